#!/usr/bin/env bash
# One device call: GPU tests, then moegen-bench and shared/peers/peers.py in
# the same call, then compare.py's table. Run from the repo root on the GPU
# machine, with the static build carried in BUILD and shared/peers copied to
# PEERS (see bench/RESULTS.md for the exact call). With MOEGEN_BASE set to a
# second build's folder (the branch point, say), its moegen-bench runs with
# the same arguments and a base / build table follows (an A/B in one call);
# moegen-floor runs where BUILD has it (the launch and copy floor).
# Usage: [MOEGEN_BENCH_ARGS="--stages a,b --tokens ..."] [MOEGEN_BASE=DIR]
#        bench/device.sh BUILD PEERS [peers.py args...]
set -uo pipefail
B=$1 P=$2; shift 2
out=${OUT:-/tmp/out}; mkdir -p "$out"
export MOEGEN_CACHE_DIR=/tmp/moegen-cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
bash "$(dirname "$0")"/gpu_tests.sh "$B" "$out"
"$B"/moegen-bench ${MOEGEN_BENCH_ARGS:-} | grep -v '^seed' | tee "$out/moegen.jsonl"
[ -x "$B"/moegen-floor ] && "$B"/moegen-floor | tee "$out/floor.jsonl"
if [ -n "${MOEGEN_BASE:-}" ]; then
  "$MOEGEN_BASE"/moegen-bench ${MOEGEN_BENCH_ARGS:-} | grep -v '^seed' > "$out/base.jsonl"
  python3 "$(dirname "$0")"/ab.py "$out/base.jsonl" "$out/moegen.jsonl"
fi
python3 "$P"/peers.py "$@" > "$out/peers.jsonl" 2> "$out/peers.err"
echo "peers rc=$?"
python3 "$P"/compare.py "$out/peers.jsonl" "$out/moegen.jsonl" --markdown | tee "$out/compare.md"
# Optional: hardware counters of the DeepSeek-V3 router at T = 16384.
if [ -n "${MOEGEN_NCU:-}" ]; then
  ncu --clock-control none --kernel-name moegen_router_fwd --launch-skip 25 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section InstructionStats \
    "$B"/moegen-bench --models deepseek-v3 --tokens 16384 > "$out/ncu.txt" 2>&1
  grep -E "Duration|Issued Instructions  |Achieved Occupancy|Warp Cycles Per Issued|Memory Throughput" "$out/ncu.txt"
fi
