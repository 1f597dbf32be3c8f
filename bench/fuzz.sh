#!/usr/bin/env bash
# Coverage-guided fuzzing of the parsers that face a model or a module
# author (fuzz/fuzz_targets): cargo-fuzz (libFuzzer), installed pinned into
# ~/.cache/noesis/tools. The toolchain here is stable; libFuzzer's
# instrumentation needs unstable rustc flags, which RUSTC_BOOTSTRAP=1 allows
# for this build only. Prints per target the runs and the crashes found.
#   bash bench/fuzz.sh                 every target, 60 s each
#   FUZZ_SECONDS=600 bash bench/fuzz.sh extract_json
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
need_cargo
seconds="${FUZZ_SECONDS:-60}"
tools="$HOME/.cache/noesis/tools"
CARGO_FUZZ_VERSION="0.13.2"
if ! "$tools/bin/cargo-fuzz" --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
  echo "==> installing cargo-fuzz $CARGO_FUZZ_VERSION into $tools" >&2
  cargo install --locked --quiet --root "$tools" cargo-fuzz --version "$CARGO_FUZZ_VERSION" >&2
fi
export PATH="$tools/bin:$PATH" RUSTC_BOOTSTRAP=1
# Its own target directory: instrumented builds share nothing with the rest.
export CARGO_TARGET_DIR="$HOME/.cache/noesis/fuzz-target"
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
crashes=0
for t in "${targets[@]}"; do
  echo "==> $t: ${seconds}s" >&2
  corpus="$HOME/.cache/noesis/fuzz-corpus/$t"
  mkdir -p "$corpus"
  log="$(mktemp)"
  if cargo fuzz run --fuzz-dir fuzz --sanitizer none --release "$t" "$corpus" -- \
    -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 >"$log" 2>&1; then
    result=ok
  else
    result=CRASH
    crashes=$((crashes + 1))
    grep -E "panicked|Test unit written|ERROR" "$log" | head -10 >&2 || true
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
  printf '%-14s %12s runs  coverage %6s  %s\n' "$t" "${runs:-?}" "${cov:-?}" "$result"
  rm -f "$log"
done
echo "crashes: $crashes"
[ "$crashes" -eq 0 ]
