#!/usr/bin/env bash
# compute-sanitizer over the GPU test suite in small-shape mode, in one
# device call. Usage: bench/sanitize.sh BUILD OUT
#
# Runs every BUILD/tests/test_*_gpu with MOEGEN_TEST_TOKENS (default
# 0,1,3,33; tests/gpu/gpu.h) under `compute-sanitizer --tool X
# --error-exitcode 1` for X in memcheck, racecheck, initcheck, synccheck,
# several at once, each under its own time limit, and prints one line a
# (tool, test): its status, exit code, the "ERROR SUMMARY: N errors" line
# and wall seconds. Status: PASS; ERRORS (sanitizer reports: the first few
# follow the line); FAIL (the test failed, no report; its last line
# follows); TIMEOUT (killed at its limit: not a pass); SKIP (exit 77);
# NOSUMMARY (no ERROR SUMMARY line: the sanitizer died); NOT RUN (the
# budget ran out first). Full logs: OUT/logs/TOOL.TEST.log; the summary
# also goes to OUT/summary.txt. Exit status 0 iff every run is PASS.
#
# Order: (1) warm the JIT cache: every test in warm mode (check.h test_jit:
# NVRTC only, no case runs), SANITIZE_WARM_SHARDS processes a test, all
# cores at once, so that no sanitized run compiles; (2) each test once
# without a sanitizer (tool "none": a failing test shows up as such);
# (3) memcheck, racecheck, initcheck, synccheck (SANITIZE_TOOLS), each over
# the tests in HEAVY_FIRST order, the longest first so that the queue
# drains evenly. A run starts only while SANITIZE_MIN_START seconds of the
# budget remain, and its limit is min(SANITIZE_TIMEOUT, what remains).
#
# Environment (defaults): COMPUTE_SANITIZER (/usr/local/cuda/bin/
# compute-sanitizer, else PATH), MOEGEN_TEST_TOKENS (0,1,3,33),
# MOEGEN_CACHE_DIR (/tmp/moegen-sanitize-cache: kept between calls on a
# warm machine), MOEGEN_TEST_SEED (the clock; printed), SANITIZE_BUDGET
# (540 s for everything, this script's start on), SANITIZE_TIMEOUT (300 s a
# run), SANITIZE_MIN_START (40 s), SANITIZE_JOBS (10 runs at once),
# SANITIZE_WARM_SHARDS (8), SANITIZE_TOOLS ("memcheck racecheck initcheck
# synccheck"), SANITIZE_SUBSET_TOOLS ("racecheck initcheck": these run with
# MOEGEN_TEST_SUBSET=1, which skips the configs the tests mark heavy, the
# models' real GEMM shapes; test_gemm_cublas* always does here: at
# DeepSeek-V3's E = 256 one run takes 37 GB, and several run at once),
# SANITIZE_TENSOR_OPS (yes: memcheck checks the TMA tensor copies too,
# where the sanitizer has --check-tensor-ops), SANITIZE_RACECHECK_REPORT
# (analysis), SANITIZE_TESTS (a space-separated subset of test names).
set -uo pipefail
B=${1:?usage: bench/sanitize.sh BUILD OUT}
OUT=${2:?usage: bench/sanitize.sh BUILD OUT}
start=$(date +%s)
budget=${SANITIZE_BUDGET:-540}
deadline=$((start + budget))
cap=${SANITIZE_TIMEOUT:-300}
min_start=${SANITIZE_MIN_START:-40}
jobs=${SANITIZE_JOBS:-10}
shards=${SANITIZE_WARM_SHARDS:-8}
tools=${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}
subset_tools=${SANITIZE_SUBSET_TOOLS:-racecheck initcheck}
tokens=${MOEGEN_TEST_TOKENS:-0,1,3,33}
seed=${MOEGEN_TEST_SEED:-$(date +%s)}
export MOEGEN_CACHE_DIR=${MOEGEN_CACHE_DIR:-/tmp/moegen-sanitize-cache}
CS=${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}
[ -x "$CS" ] || CS=$(command -v compute-sanitizer || true)
mkdir -p "$OUT/logs" "$MOEGEN_CACHE_DIR"
summary=$OUT/summary.txt
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }

# The tests, longest (expected) first; any others after them.
HEAVY_FIRST="test_gemm_bwd_gpu test_gemm_bwd_portable_gpu test_gemm_gpu test_gemm_portable_gpu
  test_layer_gpu test_layer_portable_gpu test_concurrency_gpu test_gemm_cublas_gpu
  test_gemm_cublas_portable_gpu test_permute_gpu test_router_gpu test_router_bwd_gpu test_aux_gpu
  test_router_aot_gpu"
tests=()
for n in $HEAVY_FIRST; do [ -x "$B/tests/$n" ] && tests+=("$n"); done
for t in "$B"/tests/test_*_gpu; do
  n=$(basename "$t")
  [[ " ${tests[*]} " == *" $n "* ]] || tests+=("$n")
done
if [ -n "${SANITIZE_TESTS:-}" ]; then
  keep=()
  for n in "${tests[@]}"; do [[ " $SANITIZE_TESTS " == *" $n "* ]] && keep+=("$n"); done
  tests=("${keep[@]}")
fi
[ ${#tests[@]} -gt 0 ] || { echo "no test binaries in $B/tests"; exit 2; }

say "sanitize: ${#tests[@]} tests, tools: $tools; MOEGEN_TEST_TOKENS=$tokens MOEGEN_TEST_SEED=$seed"
say "sanitize: budget ${budget} s, ${cap} s a run, $jobs at once; cache $MOEGEN_CACHE_DIR"
command -v nvidia-smi > /dev/null && say "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
if [ -z "$CS" ]; then
  say "compute-sanitizer not found (set COMPUTE_SANITIZER): only the plain runs"
  tools=""
else
  say "sanitizer: $CS ($("$CS" --version 2>&1 | grep -i version | head -1))"
fi

# Options, where this sanitizer has them (older versions lack some).
help=$([ -n "$CS" ] && "$CS" --help 2>&1)
has() { grep -qE -- "(^|[[:space:][])$1([[:space:]]|\]|$)" <<< "$help"; }
common=(--error-exitcode 1 --print-limit 100)
has --check-exit-code && common+=(--check-exit-code no)   # a failing test is not a report
has --launch-timeout && common+=(--launch-timeout 120)    # many runs start at once
# cuBLASLt (test_gemm_cublas) asks the driver for entry points it may lack:
# a NOT_FOUND answer is its probe, not an error of the code under test.
has --ignore-getprocaddress-notfound && common+=(--ignore-getprocaddress-notfound)
declare -A tool_opts
tool_opts[memcheck]=""
[ "${SANITIZE_TENSOR_OPS:-yes}" = yes ] && has --check-tensor-ops && tool_opts[memcheck]="--check-tensor-ops yes"
tool_opts[racecheck]=""
has --racecheck-report && tool_opts[racecheck]="--racecheck-report ${SANITIZE_RACECHECK_REPORT:-analysis}"
tool_opts[initcheck]=""
has --check-api-memory-access && tool_opts[initcheck]="--check-api-memory-access yes"
tool_opts[synccheck]=""
[ -n "$CS" ] && for x in $tools; do say "options $x: ${common[*]} ${tool_opts[$x]:-}"; done

secs() { printf '%d.%d' $(($1 / 1000)) $(($1 % 1000 / 100)); } # ms -> "s.d"
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# ---------------------------------------------------------------- 1. warm
t0=$(now_ms)
warm_limit=$((budget / 2))
warm_one() { # test shard: compiles the shard-th of every $shards modules of test
  local env=(MOEGEN_TEST_WARM=1 MOEGEN_TEST_WARM_SHARD="$2/$shards" MOEGEN_TEST_TOKENS="$tokens")
  [[ $1 == test_gemm_cublas* ]] && env+=(MOEGEN_TEST_SUBSET=1) # as it runs here (below)
  env "${env[@]}" timeout -k 10 "$warm_limit" "$B/tests/$1" > "$OUT/logs/warm.$1.$2.log" 2>&1
  echo "$1 $2 rc=$?" >> "$OUT/logs/warm.rc"
}
export -f warm_one
export B OUT tokens shards warm_limit
: > "$OUT/logs/warm.rc"
# shellcheck disable=SC2016 # $0 and $1 are bash -c's
for n in "${tests[@]}"; do for ((i = 0; i < shards; i++)); do echo "$n $i"; done; done |
  xargs -P "$(nproc)" -L 1 bash -c 'warm_one "$0" "$1"'
compiled=$(cat "$OUT"/logs/warm.*.log 2>/dev/null | grep -o '[0-9]* kernels compiled' | awk '{s += $1} END {print s + 0}')
wfail=$(grep -hc '^FAIL' "$OUT"/logs/warm.*.log 2>/dev/null | awk '{s += $1} END {print s + 0}')
wbad=$(grep -vc 'rc=0$' "$OUT/logs/warm.rc")
say "warm: $compiled kernels compiled in $(secs $(($(now_ms) - t0))) s; $wfail failed, $wbad processes exited non-zero (logs/warm.*)"
grep -h '^FAIL' "$OUT"/logs/warm.*.log 2>/dev/null | head -5 | tee -a "$summary"

# ---------------------------------------------------------------- 2, 3. runs
queue=()
for n in "${tests[@]}"; do queue+=("none $n"); done
for x in $tools; do for n in "${tests[@]}"; do queue+=("$x $n"); done; done

# One run in the background; writes its log and LOG.rc ("rc ms").
launch() { # tool test slot limit
  local x=$1 n=$2 slot=$3 limit=$4 log="$OUT/logs/$1.$2.log"
  local env=(MOEGEN_TEST_TOKENS="$tokens" MOEGEN_TEST_SEED="$seed")
  if [[ $n == test_gemm_cublas* ]] || { [ "$x" != none ] && [[ " $subset_tools " == *" $x "* ]]; }; then
    env+=(MOEGEN_TEST_SUBSET=1)
  fi
  local cmd=("$B/tests/$n")
  if [ "$x" != none ]; then
    local port=()
    has --port && has --max-connections && port=(--port $((49152 + 32 * slot)) --max-connections 32)
    # shellcheck disable=SC2206
    cmd=("$CS" --tool "$x" "${common[@]}" ${tool_opts[$x]} "${port[@]}" "${cmd[@]}")
  fi
  (
    s=$(now_ms)
    env "${env[@]}" timeout -k 15 "$limit" "${cmd[@]}" > "$log" 2>&1
    rc=$?
    echo "$rc $(($(now_ms) - s))" > "$log.rc"
  ) &
  slot_pid[slot]=$!
  slot_job[slot]="$x $n"
}

# Prints the summary line of a finished run (and what explains it).
report() { # tool test
  local x=$1 n=$2 log="$OUT/logs/$1.$2.log" rc ms status sum
  [ -f "$log.rc" ] || echo "255 0" > "$log.rc"
  read -r rc ms < "$log.rc"
  sum=$(grep -o 'ERROR SUMMARY: [0-9]* errors\?' "$log" | tail -1)
  local errs=${sum//[^0-9]/}
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then status=TIMEOUT
  elif [ "$x" != none ] && [ -z "$sum" ]; then status=NOSUMMARY
  elif [ "$x" != none ] && [ "${errs:-0}" -gt 0 ]; then status=ERRORS
  elif [ "$rc" = 77 ]; then status=SKIP
  elif [ "$rc" = 0 ]; then status=PASS
  else status=FAIL
  fi
  [ "$x" = none ] && sum="(no sanitizer)"
  say "$(printf '%-9s %-32s %-9s rc=%-3s %-30s %6s s' "$x" "$n" "$status" "$rc" "${sum:-no ERROR SUMMARY}" "$(secs "$ms")")"
  case $status in
    ERRORS) grep -E '^========= +[A-Z]' "$log" | grep -v 'ERROR SUMMARY\|COMPUTE-SANITIZER' |
              head -4 | sed 's/^/    /' | tee -a "$summary" ;;
    FAIL | NOSUMMARY | TIMEOUT) grep -v '^=========' "$log" | grep -E 'FAIL|rror' | head -3 |
              sed 's/^/    /' | tee -a "$summary"
            tail -1 "$log" | sed 's/^/    last: /' | tee -a "$summary" ;;
  esac
  count[$status]=$((${count[$status]:-0} + 1))
  [ "$status" = PASS ] || bad_of[$x]="${bad_of[$x]:-} $n:$status"
  ran_of[$x]=$((${ran_of[$x]:-0} + 1))
}

declare -A count bad_of ran_of
declare -a slot_pid slot_job
for ((i = 0; i < jobs; i++)); do slot_pid[i]=""; done
next=0
while :; do
  busy=0
  for ((i = 0; i < jobs; i++)); do
    p=${slot_pid[$i]}
    [ -z "$p" ] && continue
    if kill -0 "$p" 2> /dev/null; then busy=$((busy + 1)); continue; fi
    wait "$p" 2> /dev/null
    read -r jt jn <<< "${slot_job[$i]}"
    report "$jt" "$jn"
    slot_pid[i]=""
  done
  left=$((deadline - $(date +%s)))
  for ((i = 0; i < jobs && next < ${#queue[@]}; i++)); do
    [ -n "${slot_pid[$i]}" ] && continue
    [ "$left" -lt "$min_start" ] && break
    limit=$((left - 10 < cap ? left - 10 : cap))
    read -r jt jn <<< "${queue[$next]}"
    launch "$jt" "$jn" "$i" "$limit"
    next=$((next + 1))
    busy=$((busy + 1))
  done
  if [ "$next" -lt ${#queue[@]} ] && [ "$left" -lt "$min_start" ] && [ "$busy" -eq 0 ]; then
    for ((; next < ${#queue[@]}; next++)); do
      read -r jt jn <<< "${queue[$next]}"
      say "$(printf '%-9s %-32s NOT RUN   (the budget ran out)' "$jt" "$jn")"
      count[NOTRUN]=$((${count[NOTRUN]:-0} + 1))
    done
  fi
  [ "$next" -ge ${#queue[@]} ] && [ "$busy" -eq 0 ] && break
  sleep 1
done

for x in none $tools; do
  say "$(printf '%-9s %2d run, not PASS:%s' "$x" "${ran_of[$x]:-0}" "${bad_of[$x]:- none}")"
done
total=${#queue[@]}
say "sanitize: $(date +%s | awk -v s="$start" '{print $1 - s}') s; ${count[PASS]:-0} passed, $((total - ${count[PASS]:-0} - ${count[SKIP]:-0} - ${count[NOTRUN]:-0})) failed, ${count[SKIP]:-0} skipped, ${count[NOTRUN]:-0} not run (ERRORS ${count[ERRORS]:-0}, FAIL ${count[FAIL]:-0}, TIMEOUT ${count[TIMEOUT]:-0}, NOSUMMARY ${count[NOSUMMARY]:-0})"
[ "${count[PASS]:-0}" -eq "$total" ]
