-- Agent runs (noesis-agent): every stored state of a run, by step, so a run
-- resumes from its latest state, replays from any, and forks at any. `state`
-- is the run's JSON; `status` is what it is doing (running, awaiting_approval,
-- done, ...); times are milliseconds since the epoch.

CREATE TABLE agent_runs (
    run_id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    task TEXT NOT NULL,
    status TEXT NOT NULL,
    latest_step BIGINT NOT NULL,
    forked_from TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE INDEX agent_runs_by_project ON agent_runs (project_id, updated_at);

CREATE TABLE agent_run_states (
    run_id TEXT NOT NULL REFERENCES agent_runs (run_id),
    step BIGINT NOT NULL,
    state TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (run_id, step)
);
