#!/usr/bin/env bash
# One device call: GPU tests, then moegen-bench and shared/peers/peers.py in
# the same call, then compare.py's table. Run from the repo root on the GPU
# machine, with the static build carried in BUILD and shared/peers copied to
# PEERS (see bench/RESULTS.md for the exact call).
# Usage: bench/device.sh BUILD PEERS [peers.py args...]
set -uo pipefail
B=$1 P=$2; shift 2
out=${OUT:-/tmp/out}; mkdir -p "$out"
export MOEGEN_CACHE_DIR=/tmp/moegen-cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
for t in "$B"/tests/test_*_gpu; do
  echo "== $t"; "$t" > "$out/$(basename "$t").log" 2>&1; echo "rc=$?"; tail -3 "$out/$(basename "$t").log"
done
"$B"/moegen-bench | tee "$out/moegen.jsonl"
python3 "$P"/peers.py "$@" > "$out/peers.jsonl" 2> "$out/peers.err"
echo "peers rc=$?"
python3 "$P"/compare.py "$out/peers.jsonl" "$out/moegen.jsonl" --markdown | tee "$out/compare.md"
