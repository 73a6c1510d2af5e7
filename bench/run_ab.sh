#!/usr/bin/env bash
# This tree against another commit, in the same run: gpt-mini on 1 rank x 1 thread and data
# parallel on 2 thread ranks x 1 thread, alternating (old, new, old, new, ...) and comparing
# medians; and the compile time and peak compiler memory of examples/gpt/main.cpp at each
# (g++, -O3, one job). Use it to prove a refactoring kept its speed. With amp as the third
# argument, each round also runs 1 rank x 1 thread under --amp (bf16 on the kernel AMP chooses).
# Writes bench/results/ab.json.   bench/run_ab.sh REF [rounds=5] [amp]
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${1:?usage: bench/run_ab.sh REF [rounds]}
rounds=${2:-5}
amp=${3:-}
[ -z "$amp" ] || [ "$amp" = amp ] || { echo "usage: bench/run_ab.sh REF [rounds] [amp]" >&2; exit 2; }
tools/quickstart.sh deps
old=$(mktemp -d /tmp/epl-ab.XXXXXX)
trap 'git worktree remove --force "$old" >/dev/null 2>&1 || true' EXIT
git worktree add --detach "$old" "$ref" >/dev/null
for tree in "$old" .; do
  cmake -S "$tree" -B "$tree/build/ab" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEPL_BUILD_TESTS=OFF \
        -DEPL_BUILD_BENCH=ON -DEPL_ENABLE_MPI=OFF -DEPL_ENABLE_CUDA=OFF >/dev/null
  cmake --build "$tree/build/ab" -j 2 --target bench_gpt_mini >/dev/null
done
mkdir -p bench/results
log=bench/results/ab.log; : > "$log"
# Compile time: the same command ninja runs, timed alone (one job).
for tree in "$old" .; do
  cmd=$(ninja -C "$tree/build/ab" -t commands gpt | grep 'examples/gpt/main.cpp' | tail -1)
  /usr/bin/time -f "{\"compile\": \"$([ "$tree" = . ] && echo new || echo old)\", \"seconds\": %e, \"max_rss_kib\": %M}" \
    bash -c "cd '$tree/build/ab' && $cmd" 2>&1 | grep '^{' >> "$log"
done
export OMP_NUM_THREADS=1
for r in $(seq "$rounds"); do
  for tree in "$old" .; do
    tag=$([ "$tree" = . ] && echo new || echo old)
    "$tree/build/ab/bench/bench_gpt_mini" --ranks=1 --threads=1 --steps=4 --warmup=1 | sed "s/^{/{\"tree\": \"$tag\", /" >> "$log"
    "$tree/build/ab/bench/bench_gpt_mini" --ranks=2 --threads=1 --steps=4 --warmup=1 | sed "s/^{/{\"tree\": \"$tag\", /" >> "$log"
    if [ -n "$amp" ]; then
      "$tree/build/ab/bench/bench_gpt_mini" --ranks=1 --threads=1 --steps=4 --warmup=1 --amp |
        sed "s/^{/{\"tree\": \"$tag\", \"amp\": true, /" >> "$log"
    fi
  done
done
python3 - "$log" "$ref" "$(git rev-parse --short "$ref")" "$(git rev-parse --short HEAD)" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
compile = {r["compile"]: r for r in rows if "compile" in r}
runs = [r for r in rows if "tree" in r]
print(f"old = {sys.argv[2]} ({sys.argv[3]}), new = this tree ({sys.argv[4]} + changes)")
print(f"compile examples/gpt/main.cpp: old {compile['old']['seconds']:.1f} s, {compile['old']['max_rss_kib']/1024:.0f} MiB;"
      f" new {compile['new']['seconds']:.1f} s, {compile['new']['max_rss_kib']/1024:.0f} MiB")
out = {"compile": compile, "runs": runs}
# new / old twice: the ratio of the medians, and the median of each round's ratio (the runs of a
# round are seconds apart, so a round's ratio cancels the machine's minute-to-minute drift).
print(f"{'run':<22}{'old tokens/s':>14}{'new tokens/s':>14}{'ratio of medians':>18}{'median ratio':>14}{'old hidden':>12}{'new hidden':>12}")
for ranks, amp in ((1, False), (2, False), (1, True)):
    med, sel = {}, {}
    for tree in ("old", "new"):
        sel[tree] = [r for r in runs if r["tree"] == tree and r["ranks"] == ranks and r.get("amp", False) == amp]
        if sel[tree]:
            med[tree] = (statistics.median(r["tokens_per_s"] for r in sel[tree]), statistics.median(r["overlap"] for r in sel[tree]))
    if not sel["old"]:
        continue
    paired = statistics.median(n["tokens_per_s"] / o["tokens_per_s"] for o, n in zip(sel["old"], sel["new"]))
    name = ("1 rank x 1 thread" if ranks == 1 else "dp 2 ranks x 1 thread") + (", AMP" if amp else "")
    hid = (lambda t: f"{100*med[t][1]:.0f}%" if ranks == 2 else "-")
    print(f"{name:<22}{med['old'][0]:>14.1f}{med['new'][0]:>14.1f}{med['new'][0]/med['old'][0]:>18.3f}{paired:>14.3f}{hid('old'):>12}{hid('new'):>12}")
    out[f"ranks{ranks}" + ("_amp" if amp else "")] = {"old": med["old"], "new": med["new"], "median_round_ratio": paired,
                                                      "peak_mib": {t: statistics.median(r["peak_mib"] for r in sel[t]) for t in sel}}
json.dump(out, open("bench/results/ab.json", "w"), indent=1)
PY
