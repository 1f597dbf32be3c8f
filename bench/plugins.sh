#!/usr/bin/env bash
# The frame plugins' scenario: docs sync, review and testgen on a generated
# 200-file repository, then again after 3 files change (one body-only);
# prints model calls (counted at a fake server on 127.0.0.1) and times
# (crates/noesis-cli/benches/plugins.rs).
#   bench/plugins.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
need_cargo
cargo bench -p noesis-cli --bench plugins
