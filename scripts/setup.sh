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
cargo build --release --locked -p noesis-cli -p noesis-sandbox >&2
bin="$CARGO_TARGET_DIR/release/noesis"

mkdir -p "$HOME/.local/bin"
install -m 0755 "$bin" "$HOME/.local/bin/noesis"
# The sandbox's helper goes beside noesis, where noesis looks for it.
install -m 0755 "$CARGO_TARGET_DIR/release/noesis-sandbox" "$HOME/.local/bin/noesis-sandbox"
echo "==> installed $HOME/.local/bin/noesis ($("$bin" --version)) and its sandbox helper" >&2
if ! "$HOME/.local/bin/noesis" sandbox check >/dev/null 2>&1; then
  echo "warning: this machine cannot confine the commands a model runs (see \`noesis sandbox check\`): agents will not run commands unless you pass --sandbox off" >&2
fi
case ":$PATH:" in *":$HOME/.local/bin:"*) ;; *) echo "    add \$HOME/.local/bin to PATH to call it as 'noesis'" >&2 ;; esac

echo "==> installing the local model (the offline default provider)" >&2
"$bin" model install >/dev/null

echo "==> running the built-in meeting-details module end to end (offline, with the local model)" >&2
# A task the small default model does well (copying a meeting's details out
# of a message); crates/noesis-cli/tests/local.rs runs this same case on the
# real model, so a failure here is a real failure.
if ! "$bin" run meeting-details --pretty \
  --input '{"message":"Let'\''s meet on Friday at 3 pm in room B12 to go over the budget."}'; then
  echo "error: the end-to-end run failed; see the envelope above" >&2
  exit 1
fi
echo "==> set-up done: noesis ran a module offline; try \`noesis list\`" >&2
