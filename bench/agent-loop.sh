#!/usr/bin/env bash
# The agent loop's own overhead per iteration, side by side in one run:
# noesis, LangGraph's prebuilt ReAct agent and a pydantic-ai agent against the
# same zero-latency fake OpenAI server (10 iterations of one model call and one
# call of a trivial tool). Each figure is the median per iteration minus the
# same number of bare HTTP round trips in that language (std sockets in Rust,
# http.client in Python); ratios are against the faster Python framework.
# Durable rows checkpoint every step: noesis in SQLite (synchronous FULL and
# NORMAL) and PostgreSQL, LangGraph with its SqliteSaver and PostgresSaver;
# then one long run (LONG_ITERATIONS, default 1000) timed early and late, with
# the bytes each step wrote. Then the memory a paused run holds. Not a test:
# run it by hand.
#   bench/agent-loop.sh [RUNS]        (default: 200)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh
need_cargo

runs="${1:-200}"
iterations=10
packages=("langgraph==1.2.24" "langchain-openai==1.7.4" "pydantic-ai-slim[openai]==2.68.0"
  "langgraph-checkpoint-sqlite==3.1.2" "langgraph-checkpoint-postgres==3.2.0" "psycopg[binary]==3.3.9")

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
cargo bench --locked -p noesis-host --bench loop_overhead --no-run >&2

work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
start_fake() { # N: a server for N iterations; its URL in $fake_url
  "$CARGO_TARGET_DIR/release/fake-llm" --tool-loop "add_one:$1" > "$work/url-$1" &
  for _ in $(seq 50); do [ -s "$work/url-$1" ] && break; sleep 0.1; done
  fake_url="$(cat "$work/url-$1")"
}
start_fake "$iterations"
base="$fake_url"

# Durable rows need the PostgreSQL of the tests (scripts/test.sh's): each
# framework gets a schema of its own, made afresh.
pg="${NOESIS_TEST_PG:-postgres://root@127.0.0.1:5432/test}"
pg_ok=0
if "$venv/bin/python" - "$pg" <<'PY' 2>/dev/null; then pg_ok=1; fi
import sys, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as c:
    for s in ("noesis_bench", "langgraph_bench"):
        c.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
        c.execute(f"CREATE SCHEMA {s}")
PY
[ "$pg_ok" = 1 ] || echo "==> no PostgreSQL at $pg: the PostgreSQL rows are left out" >&2
sep='?'; case "$pg" in *\?*) sep='&' ;; esac
noesis_pg="${pg}${sep}options[search_path]=noesis_bench"
langgraph_pg="${pg}${sep}options=-csearch_path%3Dlanggraph_bench"

loop() { # LABEL STORE [long]
  env BENCH_BASE_URL="${BASE:-$base}" BENCH_ITERATIONS="${ITER:-$iterations}" BENCH_RUNS="$runs" \
    BENCH_LABEL="$1" ${2:+"BENCH_STORE=$2"} ${3:+BENCH_LONG=1} \
    cargo bench --locked -q -p noesis-host --bench loop_overhead
}
{
  loop "noesis (in memory)" ""
  loop "noesis durable (SQLite, synchronous=FULL)" "sqlite://$work/full.db"
  loop "noesis durable (SQLite, synchronous=NORMAL)" "sqlite://$work/normal.db?synchronous=normal"
  [ "$pg_ok" = 1 ] && loop "noesis durable (PostgreSQL)" "$noesis_pg"
  if [ "$pg_ok" = 1 ]; then
    "$venv/bin/python" bench/agent_loop.py "$base" "$iterations" "$runs" --sqlite "$work/langgraph.db" --postgres "$langgraph_pg"
  else
    "$venv/bin/python" bench/agent_loop.py "$base" "$iterations" "$runs" --sqlite "$work/langgraph.db"
  fi
} > "$work/results.jsonl"

# One long run: is a step's cost flat over the run?
long="${LONG_ITERATIONS:-1000}"
start_fake "$long"
long_base="$fake_url"
{
  BASE="$long_base" ITER="$long" loop "noesis (in memory)" "" long
  BASE="$long_base" ITER="$long" loop "noesis durable (SQLite, synchronous=FULL)" "sqlite://$work/long-full.db" long
  BASE="$long_base" ITER="$long" loop "noesis durable (SQLite, synchronous=NORMAL)" "sqlite://$work/long-normal.db?synchronous=normal" long
  [ "$pg_ok" = 1 ] && BASE="$long_base" ITER="$long" loop "noesis durable (PostgreSQL)" "$noesis_pg" long
} > "$work/long.jsonl"

python3 - "$work/results.jsonl" "$work/long.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
python = [r for r in rows if not r["framework"].startswith("noesis") and "durable" not in r["framework"]]
fastest = min(python, key=lambda r: r["overhead_us_per_iteration"])
print(f"{'framework':<44} {'µs/iteration':>13} {'HTTP floor':>11} {'overhead µs':>12} {'vs ' + fastest['framework'].split()[0]:>16} {'bytes/step':>11}")
for r in rows:
    ratio = fastest["overhead_us_per_iteration"] / max(r["overhead_us_per_iteration"], 1e-9)
    b = r.get("bytes_per_iteration")
    print(f"{r['framework']:<44} {r['us_per_iteration']:>13.1f} {r['http_floor_us_per_iteration']:>11.1f} "
          f"{r['overhead_us_per_iteration']:>12.1f} {ratio:>15.1f}× {'' if b is None else f'{b:>11.0f}'}")
print(f"({rows[0]['runs']} runs of {rows[0]['iterations']} iterations each; medians)")

by = {r["framework"]: r for r in rows}
mem = by["noesis (in memory)"]["us_per_iteration"]
lg_mem = by["langgraph (prebuilt ReAct agent)"]["us_per_iteration"]
print("\ndurable overhead per iteration (durable − in memory of the same framework):")
for name, r in by.items():
    if "durable" not in name:
        continue
    own = mem if name.startswith("noesis") else lg_mem
    extra = r["us_per_iteration"] - own
    line = f"  {name:<44} {extra:>9.1f} µs  ({r['us_per_iteration'] / own:.2f}× in memory)"
    if name.startswith("noesis"):
        kind = "PostgresSaver" if "PostgreSQL" in name else "SqliteSaver"
        lg = by.get(f"langgraph durable ({kind})")
        if lg:
            lg_extra = lg["us_per_iteration"] - lg_mem
            line += f"; LangGraph's ({kind}): {lg_extra:.1f} µs, {lg_extra / max(extra, 1e-9):.1f}× noesis's"
    print(line)

long = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
if long:
    lm = next(r for r in long if r["framework"] == "noesis (in memory)")
    print(f"\none run of {lm['iterations']} iterations: medians of the first and the last {lm['window']} iterations")
    print(f"{'':<44} {'first µs':>9} {'last µs':>9} {'overhead first':>15} {'overhead last':>14} {'last/first':>10} {'bytes first':>12} {'bytes last':>11}")
    for r in long:
        of = r["first_us_per_iteration"] - lm["first_us_per_iteration"]
        ol = r["last_us_per_iteration"] - lm["last_us_per_iteration"]
        flat = "" if r is lm else f"{ol / of:>10.2f}" if of > 0 else f"{'-':>10}"
        print(f"{r['framework']:<44} {r['first_us_per_iteration']:>9.1f} {r['last_us_per_iteration']:>9.1f} "
              f"{'' if r is lm else f'{of:>15.1f}'}{'' if r is lm else f'{ol:>15.1f}'}{flat} "
              f"{r['first_bytes_per_iteration']:>12.0f} {r['last_bytes_per_iteration']:>11.0f}")
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
