"""Timing of LangGraph's prebuilt ReAct agent and a pydantic-ai agent on the
same task as noesis's loop bench: against the zero-latency fake OpenAI server
(`fake-llm --tool-loop add_one:N`), N iterations of one model call and one
call of a trivial tool. Prints one JSON line per framework, with the floor
(the same HTTP round trips through http.client and nothing else).

    python agent_loop.py BASE_URL ITERATIONS RUNS [--sqlite PATH] [--postgres URL]
"""

import http.client
import json
import statistics
import sys
import time
import urllib.parse


def floor_us_per_iteration(base, iterations, n):
    url = urllib.parse.urlparse(base)
    conn = http.client.HTTPConnection(url.hostname, url.port)
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "go"}]})
    began = time.perf_counter()
    for _ in range(n):
        conn.request("POST", url.path + "/chat/completions", body, {"content-type": "application/json"})
        conn.getresponse().read()
    per_roundtrip = (time.perf_counter() - began) * 1e6 / n
    return per_roundtrip * (iterations + 1) / iterations


def timed(run_once, iterations, runs):
    for _ in range(min(runs, 20)):
        run_once()
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        run_once()
        samples.append((time.perf_counter() - began) * 1e6 / iterations)
    return statistics.median(samples)


def langgraph(base, iterations, runs, checkpointer=None):
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    @tool
    def add_one(x: int) -> int:
        """Adds one to x."""
        return x + 1

    model = ChatOpenAI(model="fake", base_url=base, api_key="sk-bench", max_retries=0)
    agent = create_react_agent(model, [add_one], checkpointer=checkpointer)
    threads = iter(range(10**9))

    def run_once():
        # A thread per run, as a run per task is in noesis.
        config = {"recursion_limit": 4 * iterations + 10, "configurable": {"thread_id": f"t{next(threads)}"}}
        out = agent.invoke({"messages": [("user", "Add one ten times.")]}, config)
        calls = sum(1 for m in out["messages"] if m.type == "tool")
        assert calls == iterations, calls

    return timed(run_once, iterations, runs)


def langgraph_sqlite(path):
    """LangGraph with its SQLite checkpointer (langgraph-checkpoint-sqlite)."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    saver = SqliteSaver(sqlite3.connect(path, check_same_thread=False))
    saver.setup()
    return lambda base, iterations, runs: langgraph(base, iterations, runs, saver)


def langgraph_postgres(url):
    """LangGraph with its PostgreSQL checkpointer (langgraph-checkpoint-postgres)."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    conn = psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
    saver = PostgresSaver(conn)
    saver.setup()
    return lambda base, iterations, runs: langgraph(base, iterations, runs, saver)


def pydantic_ai(base, iterations, runs):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("fake", provider=OpenAIProvider(base_url=base, api_key="sk-bench"))
    agent = Agent(model)

    @agent.tool_plain
    def add_one(x: int) -> int:
        """Adds one to x."""
        return x + 1

    def run_once():
        result = agent.run_sync("Add one ten times.")
        assert result.output == "done", result.output

    return timed(run_once, iterations, runs)


def main():
    base, iterations, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    floor = floor_us_per_iteration(base, iterations, min(5000, runs * (iterations + 1)))
    benches = [("langgraph (prebuilt ReAct agent)", langgraph), ("pydantic-ai", pydantic_ai)]
    # Durable: `--sqlite PATH`, `--postgres URL` (LangGraph's own checkpointers).
    args = sys.argv[4:]
    for flag, value in zip(args[::2], args[1::2]):
        if flag == "--sqlite":
            benches.append(("langgraph durable (SqliteSaver)", langgraph_sqlite(value)))
        elif flag == "--postgres":
            benches.append(("langgraph durable (PostgresSaver)", langgraph_postgres(value)))
    for name, bench in benches:
        us = bench(base, iterations, runs)
        print(json.dumps({
            "framework": name,
            "us_per_iteration": us,
            "http_floor_us_per_iteration": floor,
            "overhead_us_per_iteration": max(us - floor, 0.0),
            "runs": runs,
            "iterations": iterations,
        }), flush=True)


if __name__ == "__main__":
    main()
