"""Scale-out figures, measured side by side in one run (bench/scale-out.sh).

A Temporal dev server of its own; the noesis store a SQLite file every process
shares; fake OpenAI servers with no latency and with 200 ms per reply.

- Module batch: N inputs of one module in slices of 5, in this process
  (`run --batch`, 8 slices at once) and on 1, 2 and 3 workers of 8 slots
  each (`run --batch --on`).
- Short agent runs: R runs of 3 model turns (2 read_file calls), in this
  process (R `noesis agent` processes, 8 at a time) and on 1, 2, 3 workers
  (submitted with --detach, finished when the store says so).
- Engine overhead per run: one run at a time, on a worker vs in process.
- Takeover: a worker SIGKILLed while it holds runs; the time until each of
  them is stepped again by another worker.
"""

import argparse
import json
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Bench:
    def __init__(self, a):
        self.a = a
        self.work = a.work
        self.home = os.path.join(self.work, "home")
        os.makedirs(self.home, exist_ok=True)
        self.db = os.path.join(self.home, ".noesis", "noesis.db")
        self.procs = []
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"

    def env(self, url):
        e = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "NOESIS_", "OPENAI_"))}
        e.update(HOME=self.home, OPENAI_BASE_URL=url, OPENAI_API_KEY="sk-bench", NO_COLOR="1")
        return e

    def start_temporal(self):
        p = subprocess.Popen(
            [self.a.temporal, "server", "start-dev", "--ip", "127.0.0.1", "--headless", "--log-level", "error",
             "--port", str(self.port), "--http-port", str(free_port()),
             "--db-filename", os.path.join(self.work, "temporal.db")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(p)
        for _ in range(300):
            ok = subprocess.run([self.a.temporal, "operator", "namespace", "describe", "--namespace", "default",
                                 "--address", self.address], capture_output=True).returncode == 0
            if ok:
                return
            time.sleep(0.2)
        sys.exit("the Temporal dev server did not answer")

    def fake(self, *args):
        p = subprocess.Popen([self.a.fake, *args], stdout=subprocess.PIPE, text=True)
        self.procs.append(p)
        return p.stdout.readline().strip()

    def workers(self, n, url, concurrency=8):
        ws = []
        for _ in range(n):
            p = subprocess.Popen([self.a.noesis, "worker", "--temporal", self.address, "--concurrency",
                                  str(concurrency), "--grace", "1"],
                                 cwd=self.work, env=self.env(url), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            ws.append(p)
        time.sleep(1.5)  # polling
        return ws

    @staticmethod
    def stop(ws):
        for p in ws:
            p.send_signal(signal.SIGKILL)
            p.wait()

    def noesis(self, url, *args, check=True):
        r = subprocess.run([self.a.noesis, *args], cwd=self.work, env=self.env(url), capture_output=True, text=True)
        if check and r.returncode not in (0,):
            sys.exit(f"noesis {' '.join(args)}: exit {r.returncode}\n{r.stderr}")
        return r

    def statuses(self, ids):
        with sqlite3.connect(self.db, timeout=30) as c:
            rows = c.execute(
                f"SELECT run_id, status, latest_step FROM agent_runs WHERE run_id IN ({','.join('?' * len(ids))})",
                ids).fetchall()
        return {r[0]: (r[1], r[2]) for r in rows}

    def wait_done(self, ids, limit=600):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            s = self.statuses(ids)
            if len(s) == len(ids) and all(v[0] not in ("running", "awaiting_approval") for v in s.values()):
                return
            time.sleep(0.01)
        sys.exit(f"runs did not finish: {ids}")

    # --- module batch ---------------------------------------------------------
    def batch(self, url, n, workers):
        path = os.path.join(self.work, "inputs.jsonl")
        with open(path, "w") as f:
            for i in range(n):
                f.write(json.dumps({"code": f"x_{i} = {i}", "language": "python"}) + "\n")
        ws = self.workers(workers, url) if workers else []
        began = time.monotonic()
        args = ["run", self.a.module, "--batch", path, "--slice", "5"]
        args += ["--on", self.address] if workers else ["--parallel", "8"]
        r = self.noesis(url, *args, check=False)
        spent = time.monotonic() - began
        self.stop(ws)
        if r.returncode != 0 or len(r.stdout.splitlines()) != n:
            sys.exit(f"the batch failed: {r.stderr}")
        return spent

    # --- agent runs -----------------------------------------------------------
    def agent_args(self, run_id):
        return ["agent", "Read a.txt twice", "--workspace", self.ws, "--approve", "auto", "--quiet",
                "--run-id", run_id]

    def agents_here(self, url, ids):
        began = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: self.noesis(url, *self.agent_args(i)), ids))
        return time.monotonic() - began

    def agents_on(self, url, ids, workers):
        ws = self.workers(workers, url)
        began = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: self.noesis(url, *self.agent_args(i), "--on", self.address, "--detach"), ids))
        self.wait_done(ids)
        spent = time.monotonic() - began
        self.stop(ws)
        return spent

    def overhead(self, url, k):
        here, there = [], []
        ws = self.workers(1, url)
        for i in range(k):
            b = time.monotonic()
            self.noesis(url, *self.agent_args(f"oh-here-{i}"))
            here.append(time.monotonic() - b)
            rid = f"oh-on-{i}"
            b = time.monotonic()
            self.noesis(url, *self.agent_args(rid), "--on", self.address, "--detach")
            self.wait_done([rid])
            there.append(time.monotonic() - b)
        self.stop(ws)
        return statistics.median(here), statistics.median(there)

    def takeover(self, url, runs):
        ws = self.workers(2, url, concurrency=runs)
        ids = [f"to-{i}" for i in range(runs)]
        for i in ids:
            self.noesis(url, *self.agent_args(i), "--on", self.address, "--detach")
        victim = ws[0].pid
        deadline = time.monotonic() + 60
        held = {}
        # Both workers have taken runs by the time the victim holds half.
        while time.monotonic() < deadline and len(held) < runs // 2:
            with sqlite3.connect(self.db, timeout=30) as c:
                rows = c.execute("SELECT run_id, holder FROM run_leases").fetchall()
            held_ids = [r for r, h in rows if f":{victim}:" in h and r in ids]
            held = {r: self.statuses([r])[r][1] for r in held_ids}
            time.sleep(0.01)
        if not held:
            sys.exit("the worker never held a run")
        ws[0].send_signal(signal.SIGKILL)
        ws[0].wait()
        killed = time.monotonic()
        moved = {}
        while len(moved) < len(held) and time.monotonic() < killed + 120:
            s = self.statuses(list(held))
            for r, step in held.items():
                if r not in moved and (s[r][1] != step):
                    moved[r] = time.monotonic() - killed
            time.sleep(0.01)
        self.wait_done(ids)
        self.stop(ws[1:])
        return sorted(moved.values())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--noesis", required=True)
    p.add_argument("--fake", required=True)
    p.add_argument("--temporal", required=True)
    p.add_argument("--module", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--inputs", type=int, default=200)
    p.add_argument("--runs", type=int, default=24)
    a = p.parse_args()
    b = Bench(a)
    b.ws = os.path.join(a.work, "ws")
    os.makedirs(b.ws, exist_ok=True)
    with open(os.path.join(b.ws, "a.txt"), "w") as f:
        f.write("hello\n")
    try:
        b.start_temporal()
        case = os.path.join(a.module, "tests", "case1.expected.json")
        print(f"module batch of {a.inputs} inputs (seconds; inputs per second)")
        print(f"{'latency':>8} {'in process':>16} {'1 worker':>16} {'2 workers':>16} {'3 workers':>16}")
        for latency in (0, 200):
            url = b.fake("--reply", case, "--latency-ms", str(latency))
            cells = []
            for w in (0, 1, 2, 3):
                t = b.batch(url, a.inputs, w)
                cells.append(f"{t:7.2f} ({a.inputs / t:6.1f})")
            print(f"{latency:>6}ms " + " ".join(f"{c:>16}" for c in cells))
        print()
        print(f"{a.runs} short agent runs, 3 model turns each (seconds; runs per second)")
        print(f"{'latency':>8} {'in process':>16} {'1 worker':>16} {'2 workers':>16} {'3 workers':>16}")
        for latency in (0, 200):
            url = b.fake("--tool-loop", "read_file:2", "--tool-args", '{"path": "a.txt"}', "--latency-ms",
                         str(latency))
            cells = []
            for w in (0, 1, 2, 3):
                ids = [f"a{latency}-{w}-{i}" for i in range(a.runs)]
                t = b.agents_here(url, ids) if w == 0 else b.agents_on(url, ids, w)
                cells.append(f"{t:7.2f} ({a.runs / t:6.2f})")
            print(f"{latency:>6}ms " + " ".join(f"{c:>16}" for c in cells))
        print()
        url = b.fake("--tool-loop", "read_file:2", "--tool-args", '{"path": "a.txt"}')
        here, there = b.overhead(url, 10)
        print(f"one run at a time (median of 10, no model latency): in process {here * 1000:.0f} ms, "
              f"on a worker {there * 1000:.0f} ms (engine and hand-off: {(there - here) * 1000:+.0f} ms per run)")
        url = b.fake("--tool-loop", "read_file:6", "--tool-args", '{"path": "a.txt"}', "--latency-ms", "300")
        moved = b.takeover(url, 6)
        print(f"worker SIGKILLed holding {len(moved)} runs: stepped again by another worker after "
              f"{moved[0]:.2f}-{moved[-1]:.2f} s (heartbeat timeout 5 s)")
    finally:
        for p in b.procs:
            p.kill()


if __name__ == "__main__":
    main()
