-- Agent runs as a log. Each stored step is a row of agent_run_states whose
-- `state` is either the whole run (kind 'snapshot') or the changes since the
-- row before it (kind 'delta', see delta.rs); a run's first row is a
-- snapshot, so any step reads back as the latest snapshot at or before it
-- plus the deltas after that. Rows written before this migration are
-- snapshots.
--
-- agent_run_events: what a server streamed of a run, by the id each event
-- went out under, so a client reconnecting after a restart gets exactly what
-- it missed.
--
-- run_leases: who may step a run. A holder writes only while its epoch is
-- the row's; taking over an expired lease raises the epoch, so the old
-- holder's next write is refused. Times are milliseconds since the epoch.

ALTER TABLE agent_run_states ADD COLUMN kind TEXT NOT NULL DEFAULT 'snapshot';

CREATE TABLE run_leases (
    run_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    epoch BIGINT NOT NULL,
    acquired_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);

CREATE TABLE agent_run_events (
    run_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (run_id, seq)
)
