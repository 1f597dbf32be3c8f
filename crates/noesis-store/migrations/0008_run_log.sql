-- Agent runs as a log. Each stored step is a row of agent_run_states whose
-- `state` is either the whole run (kind 'snapshot') or the changes since the
-- row before it (kind 'delta', see delta.rs); a run's first row is a
-- snapshot, so any step reads back as the latest snapshot at or before it
-- plus the deltas after that. Rows written before this migration are
-- snapshots.
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
)
