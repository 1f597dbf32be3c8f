#!/usr/bin/env bash
# Frame store benchmark. Prints: the insert rate for 100k frames (SQLite and,
# when it answers, PostgreSQL), a cascade over a 100k-frame subtree (target
# ≤ 1 s on SQLite) and session hashing of a 50k-file tree as a ratio of
# b3sum's time over the same files (target ≥ 0.8). Installs b3sum first.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
need_cargo
export PATH="$HOME/.cargo/bin:$PATH"
if ! command -v b3sum >/dev/null 2>&1; then
  echo "==> installing b3sum (cargo install b3sum --locked)" >&2
  cargo install b3sum --locked >&2
fi
export NOESIS_TEST_PG="${NOESIS_TEST_PG:-postgres://root@127.0.0.1:5432/test}"
exec cargo bench -p noesis-store --bench frames
