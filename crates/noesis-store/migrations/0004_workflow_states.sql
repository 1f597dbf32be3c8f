-- Workflow states (noesis-workflow): every version of a project's
-- CognitiveState, numbered from 1. A mutation inserts the next version;
-- two writers that read the same head race for the same primary key and
-- the loser retries, so no update is silently overwritten. `state` is the
-- state's JSON; `status` is the episode's (active, escalated, archived);
-- `command` says what made the version; `episode` is what `noesis solve`
-- keeps beside the state (its tests, snapshot, CODER's run), JSON, so a
-- node boundary is one row; times are milliseconds since the epoch.

CREATE TABLE workflow_states (
    project_id TEXT NOT NULL,
    version BIGINT NOT NULL,
    episode_id TEXT NOT NULL,
    node TEXT NOT NULL,
    status TEXT NOT NULL,
    command TEXT NOT NULL,
    state TEXT NOT NULL,
    episode TEXT NOT NULL,
    at BIGINT NOT NULL,
    PRIMARY KEY (project_id, version)
);
