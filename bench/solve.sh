#!/usr/bin/env bash
# What the workflow itself costs per node: `noesis solve` episodes against a
# zero-latency fake model with `true` as the test (crates/noesis-cli/benches/solve.rs).
#   bench/solve.sh [EPISODES]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
need_cargo
cargo bench -p noesis-cli --bench solve -- "${1:-20}"
