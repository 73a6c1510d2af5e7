#!/usr/bin/env bash
# Communication bandwidth on 2 ranks, 4 KiB to 256 MiB: epl's thread backend and MPI backend,
# a plain MPI_Allreduce loop (run alternately with epl's, in the same job), and PyTorch's gloo.
# busbw = algbw * 2(n-1)/n for all_reduce. Then epl's MPI backend against MPI_Allreduce at 19
# sizes from 4 KiB to 2 MiB (where epl changes algorithm), 5 runs, medians of the ratios.
# Writes bench/results/comm.json and comm_mpi_fine.json. MPI ranks are bound a core each, the
# best setting for both (unbound, the two ranks sometimes share a core and every ratio swings).
#   bench/run_comm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
tools/quickstart.sh build bench_comm_threads bench_comm_mpi
mkdir -p bench/results
root=""; [ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
./build/cpu-release/bench/bench_comm_threads --ranks=2 > bench/results/comm_threads.json
mpi() { OMPI_MCA_btl=self,vader mpirun $root --bind-to core -np 2 ./build/cpu-release/bench/bench_comm_mpi "$@"; }
mpi > bench/results/comm_mpi.json
py=/usr/bin/python3; [ -x .venv-torch2/bin/python ] && py=.venv-torch2/bin/python
$py bench/gloo_allreduce.py --ranks 2 > bench/results/comm_gloo.json
/usr/bin/python3 - <<'PY'
import json
t = json.load(open("bench/results/comm_threads.json"))
m = json.load(open("bench/results/comm_mpi.json"))
g = json.load(open("bench/results/comm_gloo.json"))
print(f"all_reduce, 2 ranks, algorithm bandwidth in GB/s (busbw = algbw for 2 ranks); memcpy limit {t['memcpy_gbs']:.1f} GB/s")
print(f"{'bytes':>11} {'epl threads':>12} {'epl mpi':>9} {'MPI_Allreduce':>14} {'gloo':>7} {'threads/gloo':>13} {'threads/MPI':>12} {'epl mpi/MPI':>12}")
for tr, mr, gr in zip(t["rows"], m["rows"], g["rows"]):
    print(f"{tr['bytes']:>11} {tr['algbw_gbs']:>12.2f} {mr['algbw_gbs']:>9.2f} {mr['mpi_allreduce_algbw_gbs']:>14.2f} {gr['algbw_gbs']:>7.2f}"
          f" {tr['algbw_gbs']/gr['algbw_gbs']:>13.2f} {tr['algbw_gbs']/mr['mpi_allreduce_algbw_gbs']:>12.2f} {mr['ratio']:>12.2f}")
json.dump({"threads": t, "mpi": m, "gloo": g}, open("bench/results/comm.json", "w"), indent=1)
PY
for run in 1 2 3 4 5; do mpi --fine > "bench/results/comm_mpi_fine.$run.json"; done
/usr/bin/python3 - <<'PY'
import json, statistics
runs = [json.load(open(f"bench/results/comm_mpi_fine.{k}.json"))["rows"] for k in range(1, 6)]
rows = []
print("\nepl's MPI backend against MPI_Allreduce, 2 ranks, 5 runs: medians (algbw GB/s) and each run's ratio")
print(f"{'bytes':>8} {'epl mpi':>8} {'MPI_Allreduce':>14} {'ratio':>6}  runs")
for k, first in enumerate(runs[0]):
    ratios = [run[k]["ratio"] for run in runs]
    row = {"bytes": first["bytes"], "algbw_gbs": statistics.median(run[k]["algbw_gbs"] for run in runs),
           "mpi_allreduce_algbw_gbs": statistics.median(run[k]["mpi_allreduce_algbw_gbs"] for run in runs),
           "ratio": statistics.median(ratios), "ratios": ratios}
    rows.append(row)
    print(f"{row['bytes']:>8} {row['algbw_gbs']:>8.2f} {row['mpi_allreduce_algbw_gbs']:>14.2f} {row['ratio']:>6.2f}  "
          + " ".join(f"{r:.2f}" for r in ratios))
json.dump({"ranks": 2, "runs": 5, "rows": rows}, open("bench/results/comm_mpi_fine.json", "w"), indent=1)
PY
rm -f bench/results/comm_mpi_fine.[1-5].json
