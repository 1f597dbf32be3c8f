#!/usr/bin/env bash
# Installs what noesis needs, builds it, and runs a module end to end.
#   ./scripts/setup.sh            build + install to ~/.local/bin + demo run
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
. scripts/local-model.sh
need_cargo
need_llama_build_deps

echo "==> building noesis (release; the first build takes a few minutes)" >&2
cargo build --release --locked -p noesis-cli >&2
bin="$CARGO_TARGET_DIR/release/noesis"

mkdir -p "$HOME/.local/bin"
install -m 0755 "$bin" "$HOME/.local/bin/noesis"
echo "==> installed $HOME/.local/bin/noesis ($("$bin" --version))" >&2
case ":$PATH:" in *":$HOME/.local/bin:"*) ;; *) echo "    add \$HOME/.local/bin to PATH to call it as 'noesis'" >&2 ;; esac

echo "==> installing the local model (the offline default provider)" >&2
"$bin" model install >/dev/null

echo "==> running the built-in code-simplifier module end to end (offline, with the local model)" >&2
# A failure envelope is still a finished run: the 135M default model often
# rates its own confidence below the module's threshold (E2001).
"$bin" run code-simplifier --pretty \
  --input '{"code": "def calc(x):\n    if x > 0:\n        if x < 10:\n            return x * 2\n        else:\n            return x\n    else:\n        return 0", "language": "python"}' ||
  status=$?
case "${status:-0}" in
  0) ;;
  1) echo "==> the run ended in a failure envelope (exit 1); set-up itself succeeded" >&2 ;;
  *) exit "$status" ;;
esac
