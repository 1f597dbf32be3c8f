#!/usr/bin/env bash
# Runs every property test (the test functions named prop_*) for a million
# cases each (PROPTEST_CASES, default 1000000), optimised, and prints one
# line per test (cases, seconds, result) and a final "panics: N" — the
# number of property tests in which some input made the code under test
# panic or break its property (proptest reports both as a failure).
#   bash bench/props.sh              all of them, 1M cases each
#   PROPTEST_CASES=10000 bash bench/props.sh prop_sse   a quicker filtered run
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
need_cargo
cases="${PROPTEST_CASES:-1000000}"
filter="${1:-prop_}"
# Property tests live beside the code (unit tests) and in tests/; listing
# both through libtest keeps this independent of nextest.
echo "==> building the test binaries (release)" >&2
cargo test --release --workspace --locked --no-run --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("profile", {}).get("test") and m.get("executable"):
        print(m["executable"])' | sort -u > "${TMPDIR:-/tmp}/noesis-prop-bins"
total=0 failed=0
while read -r bin; do
  while read -r name; do
    [ -n "$name" ] || continue
    total=$((total + 1))
    start=$(date +%s.%N)
    if PROPTEST_CASES="$cases" PROPTEST_MAX_SHRINK_ITERS=10000 "$bin" --exact "$name" --test-threads 1 -q \
      >"${TMPDIR:-/tmp}/noesis-prop-out" 2>&1; then
      result=ok
    else
      result=FAILED
      failed=$((failed + 1))
      sed 's/^/    /' "${TMPDIR:-/tmp}/noesis-prop-out" | tail -20 >&2
    fi
    secs=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
    printf '%-90s %10s cases %8ss  %s\n' "$(basename "$bin" | sed 's/-[0-9a-f]*$//')::$name" "$cases" "$secs" "$result"
  done < <("$bin" --list 2>/dev/null | sed -n 's/: test$//p' | grep -E "(^|::)${filter}")
done < "${TMPDIR:-/tmp}/noesis-prop-bins"
echo "property tests: $total, cases each: $cases, total cases: $((total * cases))"
echo "panics: $failed"
[ "$failed" -eq 0 ]
