"""Times noesis and the Python reference runtime side by side in one run.

Both programs talk to the same fake OpenAI server (fake-llm), which answers
every request with code-simplifier's case1 `$example`. Runs are interleaved so
machine noise hits both alike. Every run's output is checked: a run that does
not return `ok: true` aborts the benchmark rather than timing a failure.

The short path (`state get`, `agent list`) has no counterpart in the reference
CLI; it is timed for noesis alone, in a git project of its own with a store of
its own, so the figures include opening the SQLite store and finding the
project.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def timed(cmd, env, check_ok, cwd=None):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=cwd)
    dt = time.perf_counter() - t0
    if check_ok:
        last = [l for l in p.stdout.strip().splitlines() if l.startswith("{")]
        env_json = json.loads(last[-1]) if last else {}
        if env_json.get("ok") is not True:
            sys.exit(f"run failed: {' '.join(cmd)}\nstdout: {p.stdout}\nstderr: {p.stderr}")
    elif p.returncode != 0:
        sys.exit(f"command failed: {' '.join(cmd)}\n{p.stderr}")
    return dt


def main():
    ap = argparse.ArgumentParser()
    for a in ("--noesis", "--fake", "--cog", "--module"):
        ap.add_argument(a, required=True)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    # The short path runs in a project folder of its own: paths must not be relative.
    args.module = os.path.abspath(args.module)

    expected = os.path.join(args.module, "tests", "case1.expected.json")
    input_file = os.path.join(args.module, "tests", "case1.input.json")
    fake = subprocess.Popen([args.fake, "--reply", expected], stdout=subprocess.PIPE, text=True)
    base = fake.stdout.readline().strip()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LLM_", "OPENAI_"))}
        env.update(LLM_PROVIDER="openai", OPENAI_API_KEY="bench-dummy", OPENAI_BASE_URL=base)
        cases = {
            "start-up (--version)": (
                [args.noesis, "--version"],
                [args.cog, "--version"],
                False,
            ),
            "run code-simplifier (fake server)": (
                [args.noesis, "run", args.module, "--input", input_file],
                [args.cog, "run", args.module, input_file],
                True,
            ),
        }
        print(f"fake server: {base}; {args.runs} interleaved runs each; medians")
        print(f"{'case':36} {'noesis':>10} {'python ref':>11} {'ratio':>8}")
        for name, (ours, theirs, check) in cases.items():
            timed(ours, env, check)  # warm the page cache for both
            timed(theirs, env, check)
            a, b = [], []
            for _ in range(args.runs):
                a.append(timed(ours, env, check))
                b.append(timed(theirs, env, check))
            ma, mb = statistics.median(a), statistics.median(b)
            print(f"{name:36} {ma * 1000:8.2f}ms {mb * 1000:9.1f}ms {mb / ma:7.1f}x")
        short_path(args, env)
    finally:
        fake.kill()


def short_path(args, env):
    """noesis-only commands that a hook or an editor runs many times."""
    with tempfile.TemporaryDirectory() as tmp:
        project = os.path.join(tmp, "project")
        os.makedirs(project)
        git = ["git", "-C", project, "-c", "user.name=bench", "-c", "user.email=bench@invalid"]
        subprocess.run(["git", "init", "-q", project], check=True)
        subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "root"], check=True)
        env = dict(env, NOESIS_HOME=os.path.join(tmp, "home"))
        env.pop("NOESIS_STORE", None)
        subprocess.run([args.noesis, "state", "init"], env=env, check=True,
                       capture_output=True, cwd=project)
        cases = {
            "state get": [args.noesis, "state", "get", "current_node"],
            "agent list": [args.noesis, "agent", "list"],
            "run code-simplifier in a project": [args.noesis, "run", args.module, "--input",
                                                 os.path.join(args.module, "tests", "case1.input.json")],
        }
        for name, cmd in cases.items():
            check = name.startswith("run")
            timed(cmd, env, check, project)
            runs = [timed(cmd, env, check, project) for _ in range(args.runs)]
            print(f"{name:36} {statistics.median(runs) * 1000:8.2f}ms {'-':>11} {'-':>8}")


if __name__ == "__main__":
    main()
