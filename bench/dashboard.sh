#!/usr/bin/env bash
# The dashboard under a session of 10,000 frames: each page's server time,
# the resident memory of the server over 1,000 page loads, and the session's
# tree to its first screen in headless Chromium (target: within 1 s).
# Not a test: run it by hand.
#   bench/dashboard.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
. scripts/browser.sh
need_cargo
install_browser
cargo bench --locked -q -p noesis-dashboard --bench dashboard
