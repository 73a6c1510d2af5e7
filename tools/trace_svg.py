#!/usr/bin/env python3
"""Draws epl timelines (the Chrome trace JSON that --trace=FILE writes) as one SVG picture.

    tools/trace_svg.py OUT.svg [LABEL=]TRACE.json ... [--step K] [--width PIXELS]

Each trace becomes a panel with one row per rank: forward spans in blue, backward in orange,
a zero-bubble schedule's weight passes in purple (the label is the micro-batch, with the model chunk after a dot when a rank holds several),
and below each rank a thin communication lane (receive waits grey, sends teal, all-reduce green).
Panels share one time scale, so schedules drawn side by side compare at a glance. --step K
draws only the K-th training step of each trace (counted from 1): a step starts where rank 0
starts its first forward of micro-batch 0. Needs only Python's standard library.
"""
import argparse
import html
import json
import os
import sys

COLORS = {"forward": "#4C78A8", "backward": "#F58518", "weight": "#B279A2", "recv": "#BAB0AC", "send": "#72B7B2",
          "all_reduce": "#54A24B"}
ROW, LANE, GAP, LEFT, TOP = 20, 7, 6, 70, 24


def fail(message):
    """Ends with epl's status for bad input (2, as argparse's), naming the problem and the fix."""
    print(f"trace_svg: {message}", file=sys.stderr)
    sys.exit(2)


def load(path):
    """The complete spans of a trace --trace wrote, or an exit naming what is wrong with the file."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        fail(f"{path}: no such file; give a trace written by --trace=FILE")
    except IsADirectoryError:
        fail(f"{path} is a directory; give a trace written by --trace=FILE")
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        fail(f"{path} is not a JSON trace ({e}); give a trace written by --trace=FILE (a run that was killed may leave it cut short)")
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        fail(f"{path} is JSON but not a Chrome trace (no traceEvents list); give a trace written by --trace=FILE")
    spans = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    for e in spans:
        if not all(isinstance(e.get(k), (int, float)) for k in ("ts", "dur", "pid")) or not isinstance(e.get("name"), str):
            fail(f"{path} holds a span without a number ts, dur and pid and a name: {json.dumps(e)[:120]}")
    if not spans:
        fail(f"{path} holds no spans (was it written by --trace?)")
    return spans


def step_window(spans, k):
    """The [start, end) of the k-th step: rank 0's first forward of micro-batch 0 starts one."""
    starts = sorted(e["ts"] for e in spans if e["pid"] == 0 and e.get("cat") == "forward" and e["name"].split(".")[0] == "F0")
    if k > len(starts):
        fail(f"--step {k}, but the trace holds {len(starts)} steps")
    end = starts[k] if k < len(starts) else max(e["ts"] + e["dur"] for e in spans) + 1
    return starts[k - 1], end


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the SVG file to write (first)")
    ap.add_argument("traces", nargs="+", help="[LABEL=]FILE.json")
    ap.add_argument("--step", type=int, default=0, help="draw only this step (from 1); 0: everything")
    ap.add_argument("--width", type=int, default=900, help="the picture's width in pixels (200 to 100000)")
    args = ap.parse_args()
    if args.step < 0:
        fail(f"--step {args.step}: steps count from 1 (0 draws every step)")
    if not 200 <= args.width <= 100000:
        fail(f"--width {args.width}: give a width from 200 to 100000 pixels")
    # OUT comes first: a forgotten one would take the first trace's name and write over it
    paths = {os.path.realpath(t.rpartition("=")[2]) for t in args.traces}
    if args.out.endswith(".json") or os.path.realpath(args.out) in paths:
        fail(f"the picture would be written to {args.out}, a trace (OUT, the SVG file, comes first: "
             f"tools/trace_svg.py OUT.svg [LABEL=]TRACE.json ...)")
    if os.path.islink(args.out):
        fail(f"{args.out} is a symbolic link; nothing epl writes follows one: give the path of a file of its own")
    if os.path.exists(args.out) and not os.path.isfile(args.out):
        fail(f"{args.out} is not a regular file; give the path of an SVG file to write")
    folder = os.path.dirname(args.out) or "."
    if not os.path.isdir(folder):
        fail(f"the folder of {args.out} does not exist; create it first")

    panels = []
    for t in args.traces:
        label, _, path = t.rpartition("=")
        spans = load(path)
        lo, hi = step_window(spans, args.step) if args.step else (min(e["ts"] for e in spans), max(e["ts"] + e["dur"] for e in spans))
        spans = [e for e in spans if e["ts"] >= lo and e["ts"] < hi]
        ranks = sorted({e["pid"] for e in spans})
        panels.append((label or path, spans, lo, hi, ranks))
    longest = max(hi - lo for _, _, lo, hi, _ in panels)
    scale = (args.width - LEFT - 10) / longest

    out, y = [], 0
    for label, spans, lo, hi, ranks in panels:
        busy = sum(e["dur"] for e in spans if e.get("cat") in ("forward", "backward", "weight"))
        idle = 1 - busy / (len(ranks) * (hi - lo)) if ranks else 0
        out.append(f'<text x="4" y="{y + 16}" font-weight="bold">{html.escape(label)}</text>'
                   f'<text x="{LEFT + 200}" y="{y + 16}" fill="#555">{(hi - lo) / 1000:.1f} ms, idle {100 * idle:.1f}% of rank time</text>')
        y += TOP
        for r in ranks:
            out.append(f'<text x="4" y="{y + 14}">rank {r}</text>')
            for e in spans:
                if e["pid"] != r:
                    continue
                cat = e.get("cat", "")
                lane = e.get("tid", 0)
                x0, w = LEFT + (e["ts"] - lo) * scale, max(e["dur"] * scale, 0.5)
                top, h = (y, ROW) if lane == 0 else (y + ROW + 1, LANE)
                color = COLORS.get(cat, "#999")
                out.append(f'<rect x="{x0:.2f}" y="{top}" width="{w:.2f}" height="{h}" fill="{color}" stroke="white" stroke-width="0.5">'
                           f'<title>{html.escape(e["name"])} ({cat}) {e["dur"] / 1000:.3f} ms</title></rect>')
                if lane == 0 and w > 14:
                    text = e["name"].lstrip("FBW")
                    out.append(f'<text x="{x0 + w / 2:.2f}" y="{top + 14}" text-anchor="middle" fill="white" font-size="10">{html.escape(text)}</text>')
            y += ROW + LANE + GAP
        y += GAP
    legend = "".join(f'<rect x="{LEFT + 110 * i}" y="{y}" width="12" height="12" fill="{c}"/>'
                     f'<text x="{LEFT + 110 * i + 16}" y="{y + 11}">{n}</text>' for i, (n, c) in enumerate(COLORS.items()))
    y += 20
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{args.width}" height="{y}" font-family="sans-serif" font-size="12">'
           f'<rect width="100%" height="100%" fill="white"/>' + "".join(out) + legend + "</svg>\n")
    try:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(svg)
    except OSError as e:
        fail(f"cannot write {args.out}: {e.strerror}")


if __name__ == "__main__":
    main()
