//! The store's error type.

use noesis_frames::FramesError;

/// What can go wrong with a store. Messages name the store (password
/// removed), the operation and the frame or session at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The URL is neither `sqlite:…`, `postgres://…` nor a file path.
    #[error("store `{0}`: expected sqlite://PATH, postgres://USER@HOST/DB or a file path")]
    BadUrl(String),
    /// The database could not be reached or opened.
    #[error("cannot open the store {url}: {source}")]
    Open {
        /// The store, without password.
        url: String,
        /// The cause.
        source: Box<sqlx::Error>,
    },
    /// The database was written by a newer noesis.
    #[error("the store {url} has schema version {found}; this noesis knows up to {known}: upgrade noesis")]
    NewerSchema {
        /// The store, without password.
        url: String,
        /// Version found in the database.
        found: i64,
        /// Latest version this build knows.
        known: i64,
    },
    /// A query failed.
    #[error("store: {context}: {source}")]
    Sql {
        /// What was being done.
        context: String,
        /// The cause.
        source: Box<sqlx::Error>,
    },
    /// A frame, session or change that breaks a rule, or an unknown id.
    #[error(transparent)]
    Frames(#[from] FramesError),
    /// A request that cannot be served (the message says why).
    #[error("{0}")]
    Invalid(String),
    /// Stored data that does not read back (the message names the row).
    #[error("store holds unreadable data: {0}")]
    Corrupt(String),
    /// Another writer changed what this write was made from; read again
    /// and retry.
    #[error("store: a concurrent change: {0}")]
    Conflict(String),
    /// A run's lease is another holder's: the write was refused and the
    /// writer must stop stepping the run (the message names the holder).
    #[error("{0}")]
    Fenced(String),
}

impl StoreError {
    /// Whether a run's lease refused the write (another holder steps it).
    #[must_use]
    pub fn is_fenced(&self) -> bool {
        matches!(self, StoreError::Fenced(_))
    }

    /// Whether the database was busy or locked (another writer held it
    /// longer than the busy timeout); retrying later may succeed.
    #[must_use]
    pub fn is_busy(&self) -> bool {
        match self {
            StoreError::Sql { source, .. } | StoreError::Open { source, .. } => is_busy(source),
            _ => false,
        }
    }
}

pub(crate) fn is_busy(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            // SQLite BUSY (5) and its extended codes, LOCKED (6); PostgreSQL
            // serialization failure and deadlock.
            matches!(&*code, "5" | "6" | "261" | "517" | "773" | "40001" | "40P01")
                || db.message().contains("database is locked")
        }
        _ => false,
    }
}

/// Attaches what was being done to a sqlx error.
pub(crate) trait Context<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, StoreError>;
}

impl<T> Context<T> for Result<T, sqlx::Error> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, StoreError> {
        self.map_err(|source| StoreError::Sql { context: context(), source: Box::new(source) })
    }
}
