#!/usr/bin/env bash
# One device call: optionally NEW's GPU tests, then an A/B of two static
# builds' moegen-bench, one stage at a time and base before new for each, so
# that clock drift across the call lands on both alike; bench/ab.py's table
# at the end. Builds are folders holding moegen-bench (and tests/test_*_gpu).
# Logs and JSON lines go to $OUT (default /tmp/out).
# Usage: [MOEGEN_AB_TESTS=1] bench/ab.sh BASE NEW STAGE[,STAGE...] TOKENS [moegen-bench args...]
set -uo pipefail
base=$1 new=$2 stages=$3 tokens=$4; shift 4
out=${OUT:-/tmp/out}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
[ -n "${MOEGEN_AB_TESTS:-}" ] && bash "$(dirname "$0")"/gpu_tests.sh "$new" "$out"
for s in ${stages//,/ }; do
  "$base"/moegen-bench --stages "$s" --tokens "$tokens" "$@" 2>> "$out/bench.err" | grep -v '^seed' >> "$out/base.jsonl"
  "$new"/moegen-bench --stages "$s" --tokens "$tokens" "$@" 2>> "$out/bench.err" | grep -v '^seed' >> "$out/new.jsonl"
done
grep -h '"error"' "$out/base.jsonl" "$out/new.jsonl"
python3 "$(dirname "$0")"/ab.py "$out/base.jsonl" "$out/new.jsonl" --max-slower 2 | tee "$out/ab.md"
