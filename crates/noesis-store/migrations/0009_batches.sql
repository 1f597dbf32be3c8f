-- Module batches: one module run over many inputs, answered by whichever
-- worker takes each slice. `batches` says what to run (the module and the
-- provider the submitter chose, as JSON in `spec`); `batch_items` holds
-- each input and, once answered, its envelope. An item is answered once:
-- the answer is written only while `output` is still NULL, so a slice
-- retried after its worker died keeps the first answer.

CREATE TABLE batches (
    batch_id TEXT PRIMARY KEY,
    project_id TEXT NOT NULL,
    module TEXT NOT NULL,
    spec TEXT NOT NULL,
    total BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE batch_items (
    batch_id TEXT NOT NULL,
    idx BIGINT NOT NULL,
    input TEXT NOT NULL,
    output TEXT,
    answered_by TEXT,
    answered_at BIGINT,
    PRIMARY KEY (batch_id, idx)
)
