#!/usr/bin/env bash
# Scale-out on Temporal, measured side by side in one run: a module batch and
# short agent runs in this process and on 1, 2 and 3 workers (no model latency,
# and 200 ms per reply), one run's engine overhead, and the time from a
# worker's death to its runs going on elsewhere. Everything on this machine
# (its cores bound what more workers can add; the 200 ms rows show how workers
# scale when the model is the wait). Not a test: run it by hand.
#   bench/scale-out.sh [INPUTS] [RUNS]     (default: 200 inputs, 24 runs)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
. scripts/temporal.sh
need_cargo
install_temporal

echo "==> building release binaries (with the temporal feature)" >&2
cargo build --release --locked -p noesis-cli --features temporal -p noesis-testkit -p noesis-sandbox >&2

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 bench/scale_out.py --noesis "$CARGO_TARGET_DIR/release/noesis" --fake "$CARGO_TARGET_DIR/release/fake-llm" \
  --temporal "$NOESIS_TEMPORAL_BIN" --module "$(cd ../shared/conformance/modules/code-simplifier && pwd)" \
  --work "$work" --inputs "${1:-200}" --runs "${2:-24}"
