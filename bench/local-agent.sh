#!/usr/bin/env bash
# An agent run on the local model, turn by turn, side by side in one run:
# the engine starting each turn from nothing (what every turn cost before it
# kept its state) against the engine that prefills only what the
# conversation added since its last turn (the default). Prints the median
# seconds per model turn, the ratio, and the malformed tool calls of each.
# Not a test: run it by hand.
#   bench/local-agent.sh [--runs N] [--turns N] [--threads N]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
. scripts/local-model.sh
need_cargo
need_llama_build_deps
install_local_model
exec cargo bench -q -p noesis-local --bench agent_turns -- "$@"
