#!/usr/bin/env bash
# What the sandbox costs per command: `true`, `python3 -c pass` and a
# 20-test pytest run, plain against confined (helper, namespaces, Landlock,
# seccomp), interleaved, median of 20 (SANDBOX_BENCH_RUNS). Goal: at most
# 5 ms added per command. Not a test: run it by hand.
#   bash bench/sandbox.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
. scripts/python-deps.sh
need_cargo
install_pytest
echo "==> building the helper and the benchmark (release)" >&2
cargo build --release --locked -p noesis-sandbox --bins >&2
cargo bench --locked -p noesis-sandbox --bench sandbox
