#!/usr/bin/env bash
# What a user's program costs to compile: examples/gpt/main.cpp (two Trainer types) and
# examples/quickstart/main.cpp (one), at -O2 with g++ as a user builds them (MPI on, OpenMP,
# -march=native), one job at a time, peak compiler memory from /usr/bin/time. Four variants,
# alternating round by round: REF's tree and this tree, each header-only and with epl::precompiled
# linked (-DEPL_PRECOMPILED, what `target_link_libraries(app epl::precompiled)` adds). Medians.
# Writes bench/results/compile_time.json.
#   bench/compile_time.sh REF [rounds=3]
set -euo pipefail
cd "$(dirname "$0")/.."
ref=${1:?usage: bench/compile_time.sh REF [rounds]}
rounds=${2:-3}
tools/quickstart.sh deps
old=$(mktemp -d /tmp/epl-ct.XXXXXX)
obj=$(mktemp /tmp/epl-ct.XXXXXX.o)
trap 'rm -rf "$old" "$obj"' EXIT
git archive "$ref" include examples | tar -x -C "$old"
mpi=$(mpicxx --showme:incdirs | sed 's/\([^ ]*\)/-isystem \1/g')
mkdir -p bench/results
log=bench/results/compile_time.log; : > "$log"
compile() {  # variant tree program extra-flags...
  local variant=$1 tree=$2 program=$3; shift 3
  /usr/bin/time -f "{\"variant\": \"$variant\", \"program\": \"$program\", \"seconds\": %e, \"max_rss_kib\": %M}" \
    g++ -DEPL_WITH_MPI=1 "$@" -I"$tree/include" -isystem /usr/include/eigen3 $mpi -O2 -DNDEBUG -march=native \
    -fopenmp -std=gnu++20 -o "$obj" -c "$tree/examples/$program/main.cpp" 2>&1 | grep '^{' >> "$log"
}
for r in $(seq "$rounds"); do
  for program in gpt quickstart; do
    compile before "$old" "$program"
    compile before-precompiled "$old" "$program" -DEPL_PRECOMPILED -DEPL_PRECOMPILED_MPI
    compile header-only . "$program"
    compile precompiled . "$program" -DEPL_PRECOMPILED -DEPL_PRECOMPILED_MPI
  done
done
python3 - "$log" "$ref" "$(git rev-parse --short "$ref")" "$(git rev-parse --short HEAD)" "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(f"before = {sys.argv[2]} ({sys.argv[3]}), after = this tree ({sys.argv[4]} + changes); g++ -O2, {sys.argv[5]}")
print(f"{'program':<14}{'variant':<20}{'seconds':>9}{'peak MiB':>10}")
out = {"ref": sys.argv[3], "head": sys.argv[4], "cpu": sys.argv[5], "medians": {}, "runs": rows}
for program in ("gpt", "quickstart"):
    for variant in ("before", "header-only", "before-precompiled", "precompiled"):
        sel = [r for r in rows if r["program"] == program and r["variant"] == variant]
        s = statistics.median(r["seconds"] for r in sel)
        m = statistics.median(r["max_rss_kib"] for r in sel) / 1024
        out["medians"][f"{program}/{variant}"] = {"seconds": s, "peak_mib": m}
        print(f"{program:<14}{variant:<20}{s:>9.1f}{m:>10.0f}")
json.dump(out, open("bench/results/compile_time.json", "w"), indent=1)
PY
