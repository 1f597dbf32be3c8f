#!/usr/bin/env bash
# The agent loop's own overhead per iteration, side by side in one run:
# noesis, LangGraph's prebuilt ReAct agent and a pydantic-ai agent against the
# same zero-latency fake OpenAI server (10 iterations of one model call and one
# call of a trivial tool). Each figure is the median per iteration minus the
# same number of bare HTTP round trips in that language (std sockets in Rust,
# http.client in Python); ratios are against the faster Python framework.
# Then the memory a paused run holds. Not a test: run it by hand.
#   bench/agent-loop.sh [RUNS]        (default: 200)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
need_cargo

runs="${1:-200}"
iterations=10
packages=("langgraph==1.2.24" "langchain-openai==1.7.4" "pydantic-ai-slim[openai]==2.68.0")

venv="${XDG_CACHE_HOME:-$HOME/.cache}/noesis/bench-venv"
if [ "$(cat "$venv/.installed" 2>/dev/null)" != "${packages[*]}" ]; then
  echo "==> installing ${packages[*]} into $venv" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --disable-pip-version-check -q "${packages[@]}" >&2
  echo "${packages[*]}" > "$venv/.installed"
fi

echo "==> building release binaries" >&2
cargo build --release --locked -p noesis-cli -p noesis-testkit >&2
cargo bench --locked -p noesis-agent --bench loop_overhead --no-run >&2

work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
"$CARGO_TARGET_DIR/release/fake-llm" --tool-loop "add_one:$iterations" > "$work/url" &
for _ in $(seq 50); do [ -s "$work/url" ] && break; sleep 0.1; done
base="$(cat "$work/url")"

{
  BENCH_BASE_URL="$base" BENCH_ITERATIONS=$iterations BENCH_RUNS="$runs" \
    cargo bench --locked -q -p noesis-agent --bench loop_overhead
  BENCH_BASE_URL="$base" BENCH_ITERATIONS=$iterations BENCH_RUNS="$runs" BENCH_STORE="$work/bench.db" \
    cargo bench --locked -q -p noesis-agent --bench loop_overhead
  "$venv/bin/python" bench/agent_loop.py "$base" "$iterations" "$runs"
} > "$work/results.jsonl"

python3 - "$work/results.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
python = [r for r in rows if not r["framework"].startswith("noesis")]
fastest = min(python, key=lambda r: r["overhead_us_per_iteration"])
print(f"{'framework':<40} {'µs/iteration':>13} {'HTTP floor':>11} {'overhead µs':>12} {'vs ' + fastest['framework'].split()[0]:>16}")
for r in rows:
    ratio = fastest["overhead_us_per_iteration"] / max(r["overhead_us_per_iteration"], 1e-9)
    print(f"{r['framework']:<40} {r['us_per_iteration']:>13.1f} {r['http_floor_us_per_iteration']:>11.1f} "
          f"{r['overhead_us_per_iteration']:>12.1f} {ratio:>15.1f}×")
print(f"({rows[0]['runs']} runs of {rows[0]['iterations']} iterations each; medians)")
PY

# A paused run: the process exits and the run lives in the store.
echo "==> a run paused for approval" >&2
mkdir -p "$work/ws"
"$CARGO_TARGET_DIR/release/fake-llm" --tool-loop "write_file:1" \
  --tool-args '{"path": "out.txt", "content": "hello"}' > "$work/url2" &
for _ in $(seq 50); do [ -s "$work/url2" ] && break; sleep 0.1; done
export NOESIS_HOME="$work/home" OPENAI_BASE_URL="$(cat "$work/url2")" OPENAI_API_KEY=sk-bench
set +e
/usr/bin/time -f "%M" -o "$work/rss" "$CARGO_TARGET_DIR/release/noesis" agent "Write a file" \
  --workspace "$work/ws" --run-id paused --quiet > /dev/null 2>&1
code=$?
set -e
bytes=$("$CARGO_TARGET_DIR/release/noesis" agent show paused --json | wc -c)
echo "paused run: exit code $code (awaiting approval), no process holds it (peak RSS while running: $(tail -1 "$work/rss") KB); state in the store: $bytes bytes"
