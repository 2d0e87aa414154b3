#!/usr/bin/env bash
# Runs BUILD/tests/test_*_gpu side by side (they only check results; run 6
# took the slowest one's 2 minutes instead of 6 in a row), each under a time
# limit ($MOEGEN_TEST_TIMEOUT, 300 s); prints each test's status and last
# line, and appends the full logs to OUT/tests.log (the device tool returns
# few files). Usage: bench/gpu_tests.sh BUILD OUT
set -uo pipefail
B=$1 out=$2
logs=$(mktemp -d)
for t in "$B"/tests/test_*_gpu; do
  n=$(basename "$t")
  ( timeout "${MOEGEN_TEST_TIMEOUT:-300}" "$t" > "$logs/$n.log" 2>&1; echo "== $t rc=$?" > "$logs/$n.rc" ) &
done
wait
for t in "$B"/tests/test_*_gpu; do
  n=$(basename "$t"); cat "$logs/$n.rc"; tail -1 "$logs/$n.log"; cat "$logs/$n.rc" "$logs/$n.log" >> "$out/tests.log"
done
