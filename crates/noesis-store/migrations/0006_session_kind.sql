-- What a session records: a working session (`session`, from `noesis
-- session start` or an importer) or a `noesis solve` episode's files
-- (`episode`). Only working sessions are a project's previous session (the
-- one roles and diffs are taken against) and the parent of later runs.

ALTER TABLE sessions ADD COLUMN kind TEXT NOT NULL DEFAULT 'session'
