# Sourced by the scripts: one shared, persistent target directory outside the
# clone (a fresh machine simply starts it empty), and lean parallelism for a
# 2-core machine.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/noesis/target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export CARGO_INCREMENTAL=0
mkdir -p "$CARGO_TARGET_DIR"

need_cargo() {
  if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
      export PATH="$HOME/.cargo/bin:$PATH"
    else
      echo "error: cargo not found; install the Rust toolchain (rustup) first" >&2
      exit 2
    fi
  fi
}
