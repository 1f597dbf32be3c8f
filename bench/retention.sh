#!/usr/bin/env bash
# Fact retention across compactions, side by side in one run: a scripted
# agent run seeds 20 facts with evidence, its context is compacted five
# times or more (the embedded local model writes each summary), and the
# final request is probed for every fact — noesis's compaction (summary +
# facts carried verbatim) against a plain "summarise the conversation"
# compaction as the baseline. Prints retained/20 and the percentage of each.
# Not a test: run it by hand.
#   bench/retention.sh [--window TOKENS] [--threads N]
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
. scripts/local-model.sh
need_cargo
need_llama_build_deps
install_local_model
exec cargo bench -q -p noesis-local --bench retention -- "$@"
