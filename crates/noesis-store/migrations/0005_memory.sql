-- Episodic and procedural memory (noesis solve): each archived episode and
-- each lesson from a critique that led to success, as searchable text with
-- its JSON record. A statement marked @sqlite or @postgres runs on that back
-- end only: full-text search is SQLite's FTS5 there (a table kept in the
-- same transaction as the entries) and a tsvector GIN index here.

CREATE TABLE memory_entries (
    entry_id {serial},
    project_id TEXT NOT NULL,
    episode_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    record TEXT NOT NULL,
    at BIGINT NOT NULL
);

CREATE INDEX memory_by_episode ON memory_entries (episode_id);

@sqlite CREATE VIRTUAL TABLE memory_fts USING fts5(text, entry_id UNINDEXED, tokenize = 'porter unicode61');

@postgres CREATE INDEX memory_text ON memory_entries USING GIN (to_tsvector('english', text))
