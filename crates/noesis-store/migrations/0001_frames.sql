-- Frames, their status history, file conditions and edges; sessions and
-- their files. Portable SQL for SQLite and PostgreSQL: `{serial}` becomes
-- each back end's auto-increment key, `{frame_key}` the frames' integer key
-- (assigned by the store, see `reserve_seqs`), `{state_key}` a copy of it
-- (SQLite: the row id itself). Times are milliseconds since
-- the epoch. Frames are addressed by `frame_id` (a UUID) outside and by the
-- integer `seq` inside, so the cascade walks small integer indexes.

CREATE TABLE projects (
    project_id TEXT PRIMARY KEY,
    root TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE frames (
    seq {frame_key},
    frame_id TEXT NOT NULL UNIQUE,
    project_id TEXT NOT NULL REFERENCES projects (project_id),
    session_id TEXT,
    parent_seq BIGINT REFERENCES frames (seq),
    depth BIGINT NOT NULL,
    query TEXT NOT NULL,
    context_slice TEXT NOT NULL,
    evidence TEXT NOT NULL,
    conclusion TEXT NOT NULL,
    confidence DOUBLE PRECISION NOT NULL,
    expires_at BIGINT,
    note TEXT,
    branched_from TEXT REFERENCES frames (frame_id),
    created_at BIGINT NOT NULL,
    -- How many frame_files rows and 'cites' edges the frame was written
    -- with, so a check can prove that no frame is partial.
    n_files BIGINT NOT NULL,
    n_deps BIGINT NOT NULL
);

CREATE INDEX frames_by_parent ON frames (parent_seq);

CREATE INDEX frames_by_project ON frames (project_id, created_at);

-- What changes: one narrow row per frame, so a cascade rewrites little.
-- Invalidation is terminal, so its record lives here too and a cascade is
-- one UPDATE: when, the reason given for a seed (a frame reached by the
-- cascade names its cause at read time: its parent, or a cited frame,
-- invalidated in the same batch), the session, the batch. Status is not
-- indexed on purpose.
CREATE TABLE frame_state (
    seq {state_key} REFERENCES frames (seq),
    status TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    invalidated_at BIGINT,
    invalidated_reason TEXT,
    invalidated_session TEXT,
    invalidated_batch BIGINT
);

CREATE INDEX frame_state_by_batch ON frame_state (invalidated_batch) WHERE invalidated_batch IS NOT NULL;

CREATE INDEX frame_state_by_session ON frame_state (invalidated_session) WHERE invalidated_session IS NOT NULL;

CREATE INDEX frames_by_session ON frames (session_id);

-- The structured file conditions: invalid when the file's hash differs.
CREATE TABLE frame_files (
    frame_seq BIGINT NOT NULL REFERENCES frames (seq),
    path TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (frame_seq, path)
);

CREATE INDEX frame_files_by_path ON frame_files (path);

-- What the cascade follows: kind 0 = parent (src = parent, dst = child),
-- kind 1 = cites (src = cited frame, dst = the frame whose condition names it).
CREATE TABLE frame_edges (
    src BIGINT NOT NULL REFERENCES frames (seq),
    dst BIGINT NOT NULL REFERENCES frames (seq),
    kind BIGINT NOT NULL,
    PRIMARY KEY (src, kind, dst)
);

CREATE INDEX frame_edges_by_dst ON frame_edges (dst);

-- Every status a frame took before any invalidation, oldest first; the
-- invalidation itself is the invalidated_* columns of frame_state.
CREATE TABLE frame_status (
    seq {serial},
    frame_seq BIGINT NOT NULL REFERENCES frames (seq),
    status TEXT NOT NULL,
    at BIGINT NOT NULL,
    reason TEXT,
    session_id TEXT
);

CREATE INDEX frame_status_by_frame ON frame_status (frame_seq, seq);

CREATE TABLE sessions (
    session_id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects (project_id),
    initial_prompt TEXT,
    scope TEXT NOT NULL,
    root_frame_id TEXT REFERENCES frames (frame_id),
    conversation_log TEXT,
    created_at BIGINT NOT NULL,
    n_files BIGINT NOT NULL
);

CREATE INDEX sessions_by_project ON sessions (project_id, created_at);

CREATE TABLE session_files (
    session_id TEXT NOT NULL REFERENCES sessions (session_id),
    path TEXT NOT NULL,
    hash TEXT NOT NULL,
    role TEXT NOT NULL,
    PRIMARY KEY (session_id, path)
);
