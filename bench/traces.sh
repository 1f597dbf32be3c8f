#!/usr/bin/env bash
# What OpenTelemetry tracing costs: 1,000 module runs against a zero-latency
# fake provider, tracing off versus exporting over OTLP/HTTP to a receiver on
# 127.0.0.1, side by side in one process (crates/noesis-trace/benches/overhead.rs).
#   bench/traces.sh [RUNS] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
need_cargo
cargo bench -p noesis-trace --bench overhead -- "${1:-1000}" "${2:-5}"
