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
# The GPU tests run side by side (they only check results; run 6 took the
# slowest one's 2 minutes instead of 6 in a row), each under a time limit.
# Logs go to one file under $OUT (the device tool returns at most 8).
logs=$(mktemp -d)
for t in "$B"/tests/test_*_gpu; do
  n=$(basename "$t")
  ( timeout "${MOEGEN_TEST_TIMEOUT:-300}" "$t" > "$logs/$n.log" 2>&1; echo "== $t rc=$?" > "$logs/$n.rc" ) &
done
wait
for t in "$B"/tests/test_*_gpu; do
  n=$(basename "$t"); cat "$logs/$n.rc"; tail -1 "$logs/$n.log"; cat "$logs/$n.rc" "$logs/$n.log" >> "$out/tests.log"
done
"$B"/moegen-bench ${MOEGEN_BENCH_ARGS:-} | grep -v '^seed' | tee "$out/moegen.jsonl"
[ -x "$B"/moegen-floor ] && "$B"/moegen-floor | tee "$out/floor.jsonl"
if [ -n "${MOEGEN_BASE:-}" ]; then
  "$MOEGEN_BASE"/moegen-bench ${MOEGEN_BENCH_ARGS:-} | grep -v '^seed' > "$out/base.jsonl"
  python3 - "$out/base.jsonl" "$out/moegen.jsonl" <<'PY'
import json, sys
def load(p):
    return {(r["stage"], r["model"], r["tokens"]): r for r in map(json.loads, filter(lambda l: l.startswith("{"), open(p))) if r.get("peer") == "moegen"}
base, new = load(sys.argv[1]), load(sys.argv[2])
print("| stage | model | tokens | base ms | build ms | change |\n|---|---|---|---|---|---|")
for k in sorted(set(base) | set(new), key=lambda k: (k[1], k[2], k[0])):
    b, n = base.get(k, {}).get("ms"), new.get(k, {}).get("ms")
    ch = f"{(n / b - 1) * 100:+.1f}%" if b and n else "-"
    print(f"| {k[0]} | {k[1]} | {k[2]} | {b if b else '-'} | {n if n else '-'} | {ch} |")
PY
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
