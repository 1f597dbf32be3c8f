#!/usr/bin/env bash
# What the anchor rule costs: snapshot and restore of a 5,000-file tree with
# 1, 10 and 100 changed files (and 20,000 files at 10), in one run
# (crates/noesis-workflow/benches/snapshot.rs).
#   bench/snapshot.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
need_cargo
cargo bench -p noesis-workflow --bench snapshot -- "${1:-7}"
