#!/usr/bin/env bash
# Side-by-side benchmark: noesis vs the Python reference runtime
# (`cognitive-modules` from PyPI), both against the same fake OpenAI server on
# 127.0.0.1. Prints medians and ratios. Not a test: run it by hand.
#   bench/compare.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
need_cargo

runs="${1:-20}"
shared="$(cd .. && pwd)/shared/conformance"
[ -d "$shared" ] || { echo "error: $shared not found (../shared beside the checkout)" >&2; exit 2; }

echo "==> building release binaries" >&2
cargo build --release --locked -p noesis-cli -p noesis-testkit >&2

venv=bench/.venv
if [ ! -x "$venv/bin/cog" ]; then
  echo "==> installing the Python reference runtime into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'cognitive-modules[openai]==2.2.3' 'openai==3.52.0' >&2
fi

exec python3 bench/compare.py \
  --noesis "$CARGO_TARGET_DIR/release/noesis" \
  --fake "$CARGO_TARGET_DIR/release/fake-llm" \
  --cog "$venv/bin/cog" \
  --module "$shared/modules/code-simplifier" \
  --runs "$runs"
