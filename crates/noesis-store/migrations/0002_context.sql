-- Emitted context (the context protocol): one row per expanded key and
-- type within a namespace (the CLI uses the project id). `value` is JSON
-- text; `user_id`/`session_id` are set only when the key pattern named
-- them, and such a row is served only to that user/session. Times are
-- milliseconds since the epoch; `expires_at` NULL is persistent.

CREATE TABLE context_entries (
    namespace TEXT NOT NULL,
    ctx_key TEXT NOT NULL,
    ctx_type TEXT NOT NULL,
    value TEXT NOT NULL,
    module TEXT NOT NULL,
    user_id TEXT,
    session_id TEXT,
    created_at BIGINT NOT NULL,
    expires_at BIGINT,
    PRIMARY KEY (namespace, ctx_key, ctx_type)
);

CREATE INDEX context_by_type ON context_entries (namespace, ctx_type, created_at);
