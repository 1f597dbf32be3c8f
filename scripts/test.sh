#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, unit, integration and doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
. scripts/local-model.sh
. scripts/python-deps.sh
need_cargo
# The frame store's suite runs on SQLite and on this PostgreSQL (each test in
# a schema of its own); with CI set, an unreachable server fails the run.
export NOESIS_TEST_PG="${NOESIS_TEST_PG:-postgres://root@127.0.0.1:5432/test}"
need_llama_build_deps
# The local model's tests load the real model file (cached in $NOESIS_HOME/models).
install_local_model
# tests/mcp.rs drives `noesis mcp` with the official MCP Python SDK.
install_mcp_client

echo "==> cargo fmt --check" >&2
cargo fmt --all -- --check >&2
echo "==> cargo clippy" >&2
cargo clippy --workspace --all-targets --locked -- -D warnings >&2
echo "==> doc tests" >&2
cargo test --workspace --doc --locked
echo "==> unit and integration tests" >&2
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi
