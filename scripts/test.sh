#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, unit, integration and doc tests.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
. scripts/local-model.sh
. scripts/python-deps.sh
. scripts/browser.sh
. scripts/mcp-servers.sh
. scripts/book.sh
. scripts/temporal.sh
need_cargo
# Tests that need something outside the workspace are required: a missing
# dependency fails them. Each has one opt-out, which skips them instead:
#   NOESIS_SKIP_PG=1           the PostgreSQL half of the frame store's suite
#   NOESIS_SKIP_LOCAL_MODEL=1  tests that load the real model file
#   NOESIS_SKIP_MCP_SDK=1      `noesis mcp` driven by the official MCP Python SDK
#   NOESIS_SKIP_BROWSER=1      the dashboard in headless Chromium (Playwright)
#   NOESIS_SKIP_MCP_SERVERS=1  the MCP client against third-party MCP servers
#   NOESIS_SKIP_PYTEST=1       `noesis solve` on a Python project tested by pytest
#   NOESIS_SKIP_BOOK=1         the book under docs/ (mdbook build) and its link check
#   NOESIS_SKIP_TEMPORAL=1     runs on workers under a Temporal dev server (tests/scale_out.rs)
# Every skip is logged, and the run ends with a summary of them.
opted_out() { case "${!1:-}" in "" | 0 | false | FALSE | False) return 1 ;; *) return 0 ;; esac; }

# The frame store's suite runs on SQLite and on this PostgreSQL (each test in
# a schema of its own).
export NOESIS_TEST_PG="${NOESIS_TEST_PG:-postgres://root@127.0.0.1:5432/test}"
need_llama_build_deps
# The local model's tests load the real model file (cached in $NOESIS_HOME/models).
opted_out NOESIS_SKIP_LOCAL_MODEL || install_local_model
# tests/mcp.rs drives `noesis mcp` with the official MCP Python SDK.
opted_out NOESIS_SKIP_MCP_SDK || install_mcp_client
# tests/browser.rs drives the dashboard in Debian's Chromium with playwright-core.
opted_out NOESIS_SKIP_BROWSER || install_browser
# crates/noesis-mcp's tests start the filesystem (npm), git and time (PyPI) servers.
opted_out NOESIS_SKIP_MCP_SERVERS || install_mcp_servers
# tests/solve.rs runs a Python project's tests with pytest.
opted_out NOESIS_SKIP_PYTEST || install_pytest
# The book under docs/ is built with a pinned mdbook.
opted_out NOESIS_SKIP_BOOK || install_mdbook
# tests/scale_out.rs starts Temporal dev servers and workers.
opted_out NOESIS_SKIP_TEMPORAL || install_temporal

# Everything is built and tested once, with the Temporal workers in: one
# feature set for every step below, so nothing is compiled twice. The
# default binary (no Temporal SDK) is checked by the first clippy run.
FEATURES=(--features noesis-cli/temporal)

NOESIS_SKIP_LOG="$(mktemp "${TMPDIR:-/tmp}/noesis-skips.XXXXXX")"
export NOESIS_SKIP_LOG
skip_summary() {
  local status=$?
  if [ -s "$NOESIS_SKIP_LOG" ]; then
    echo "==> skipped: $(wc -l < "$NOESIS_SKIP_LOG") test(s)" >&2
    # dependency, opt-out, test, why: one line per dependency, with a count.
    awk -F'\t' '{ n[$1]++; v[$1] = $2; w[$1] = $4 }
      END { for (d in n) printf "    %s: %d test(s), %s is set (last reason: %s)\n", d, n[d], v[d], w[d] }' \
      "$NOESIS_SKIP_LOG" >&2
  else
    echo "==> skipped: none" >&2
  fi
  rm -f "$NOESIS_SKIP_LOG"
  return $status
}
trap skip_summary EXIT

# The book builds, and no relative link in it, the README or ARCHITECTURE.md
# leads nowhere (a missing page or #anchor); other sites are not fetched.
if opted_out NOESIS_SKIP_BOOK; then
  printf 'book\tNOESIS_SKIP_BOOK\tmdbook build docs and the link check\tthe book was not built\n' >> "$NOESIS_SKIP_LOG"
  echo "SKIPPED the book: NOESIS_SKIP_BOOK is set" >&2
else
  echo "==> mdbook build docs, link check" >&2
  rm -rf docs/book
  mdbook build docs >&2
  python3 scripts/check_links.py --self-test
  python3 scripts/check_links.py docs/book README.md ARCHITECTURE.md
fi

# Every platform's locked packages, not only this one's: the hygiene test
# reads the whole graph's rust-versions with `cargo metadata --offline`.
echo "==> cargo fetch" >&2
cargo fetch --locked >&2
echo "==> cargo fmt --check" >&2
cargo fmt --all -- --check >&2
echo "==> cargo clippy" >&2
cargo clippy --workspace --all-targets --locked -- -D warnings >&2
cargo clippy --workspace --all-targets --locked "${FEATURES[@]}" -- -D warnings >&2
# The oldest Rust the workspace claims (rust-version in Cargo.toml; a test
# checks it against the dependencies' own) builds it, when that toolchain is
# installed: `rustup toolchain install <version>` to have it checked here.
msrv="$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)"
# `1.94` is installed as e.g. `1.94.0-x86_64-unknown-linux-gnu`: that full name.
toolchain="$(command -v rustup >/dev/null 2>&1 && rustup toolchain list | awk -v v="$msrv" \
  'index($1, v ".") == 1 || index($1, v "-") == 1 { print $1; exit }' || true)"
if [ -n "$toolchain" ]; then
  echo "==> cargo +$toolchain check (rust-version $msrv)" >&2
  cargo "+$toolchain" check --workspace --all-targets --locked --target-dir "$CARGO_TARGET_DIR/rust-version" >&2
else
  echo "==> cargo +$msrv check: Rust $msrv is not installed here; not built with it" >&2
fi
echo "==> doc tests" >&2
cargo test --workspace --doc --locked "${FEATURES[@]}"
echo "==> unit and integration tests" >&2
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast "${FEATURES[@]}"
else
  cargo test --workspace --locked --no-fail-fast "${FEATURES[@]}"
fi
# The façade's examples are programs a newcomer copies: each asserts what it
# shows and must run to the end. Built with the whole workspace (the same
# feature set as the tests, so nothing is compiled twice), then run.
echo "==> examples of the noesis crate" >&2
cargo build --workspace --examples --locked "${FEATURES[@]}" >&2
for example in crates/noesis/examples/*.rs; do
  name="$(basename "$example" .rs)"
  echo "    $name" >&2
  "$CARGO_TARGET_DIR/debug/examples/$name" >&2
done
