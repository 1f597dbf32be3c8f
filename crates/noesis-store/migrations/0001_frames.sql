-- Frames, their status history, file conditions and edges; sessions and
-- their files. Portable SQL for SQLite and PostgreSQL; `{serial}` becomes
-- each back end's auto-increment key. Times are milliseconds since the epoch.

CREATE TABLE projects (
    project_id TEXT PRIMARY KEY,
    root TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE frames (
    frame_id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL REFERENCES projects (project_id),
    session_id TEXT,
    parent_id TEXT REFERENCES frames (frame_id),
    depth BIGINT NOT NULL,
    query TEXT NOT NULL,
    context_slice TEXT NOT NULL,
    evidence TEXT NOT NULL,
    conclusion TEXT NOT NULL,
    confidence DOUBLE PRECISION NOT NULL,
    expires_at BIGINT,
    note TEXT,
    status TEXT NOT NULL,
    branched_from TEXT REFERENCES frames (frame_id),
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    -- How many frame_files and 'cites' edges the frame was written with, so
    -- a check can prove no frame is partial.
    n_files BIGINT NOT NULL,
    n_deps BIGINT NOT NULL
);

CREATE INDEX frames_by_parent ON frames (parent_id);

CREATE INDEX frames_by_project ON frames (project_id, status);

CREATE INDEX frames_by_session ON frames (session_id);

-- The structured file conditions: invalid when the file's hash differs.
CREATE TABLE frame_files (
    frame_id TEXT NOT NULL REFERENCES frames (frame_id),
    path TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (frame_id, path)
);

CREATE INDEX frame_files_by_path ON frame_files (path);

-- What the cascade follows: kind 'parent' (src = parent, dst = child) and
-- kind 'cites' (src = cited frame, dst = the frame whose condition names it).
CREATE TABLE frame_edges (
    src TEXT NOT NULL REFERENCES frames (frame_id),
    dst TEXT NOT NULL REFERENCES frames (frame_id),
    kind TEXT NOT NULL,
    PRIMARY KEY (src, kind, dst)
);

CREATE INDEX frame_edges_by_dst ON frame_edges (dst);

-- Every status a frame took; the last one (highest seq) is its status.
-- `batch` groups the rows one invalidation wrote.
CREATE TABLE frame_status (
    seq {serial},
    frame_id TEXT NOT NULL REFERENCES frames (frame_id),
    status TEXT NOT NULL,
    at BIGINT NOT NULL,
    reason TEXT,
    session_id TEXT,
    batch TEXT
);

CREATE INDEX frame_status_by_frame ON frame_status (frame_id, seq);

CREATE INDEX frame_status_by_batch ON frame_status (batch);

CREATE INDEX frame_status_by_session ON frame_status (session_id, status);

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
