#!/usr/bin/env bash
# `noesis serve` under load: POST /run against a zero-latency fake provider
# at concurrency 8 and 64, req/s, p50/p99 and the server's VmRSS before and
# after each batch (KB/request growth). Not a test: run it by hand.
#   bench/serve.sh [REQUESTS] [CONCURRENCIES]     (default: 100000 8,64)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
need_cargo

requests="${1:-100000}"
levels="${2:-8,64}"

# Serving does not touch the embedded model: build without it (no llama.cpp).
echo "==> building the release noesis binary" >&2
cargo build --release --locked -p noesis-cli --no-default-features >&2
echo "==> building the load generator" >&2
NOESIS_BIN="$CARGO_TARGET_DIR/release/noesis" \
  cargo bench --locked -p noesis-serve --bench serve -- "$requests" "$levels"
