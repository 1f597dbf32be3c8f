-- Sessions see each other only through a link made on purpose (`noesis
-- session link A B`). A link has no direction: it is stored once, with the
-- smaller id first. An imported transcript keeps the blake3 of its bytes, so
-- the same file is not imported twice.

CREATE TABLE session_links (
    session_a TEXT NOT NULL REFERENCES sessions (session_id),
    session_b TEXT NOT NULL REFERENCES sessions (session_id),
    reason TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (session_a, session_b),
    CHECK (session_a < session_b)
);

CREATE INDEX session_links_by_b ON session_links (session_b);

ALTER TABLE sessions ADD COLUMN source_hash TEXT;

CREATE INDEX sessions_by_source ON sessions (project_id, source_hash)
