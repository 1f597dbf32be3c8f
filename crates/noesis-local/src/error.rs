use std::path::PathBuf;

use crate::constraint::ConstraintError;
use crate::gguf::GgufError;

/// What went wrong with the local model. Every variant that concerns a file
/// names it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// No file at the model path.
    #[error("{}: no model file here (run `noesis model install`, or pass --model-path FILE.gguf)", path.display())]
    Missing {
        /// The path looked at.
        path: PathBuf,
    },
    /// The file is not a usable GGUF file (garbage, truncated, unknown version).
    #[error("{}: not a usable GGUF model: {source}", path.display())]
    BadFile {
        /// The model file.
        path: PathBuf,
        /// What is wrong with it.
        source: GgufError,
    },
    /// The file is a well-formed GGUF file llama.cpp still refuses.
    #[error(
        "{}: llama.cpp cannot load this model (architecture `{architecture}`): the bundled llama.cpp does not support that architecture, or the file's tensors are not what it expects",
        path.display()
    )]
    Unsupported {
        /// The model file.
        path: PathBuf,
        /// `general.architecture`, or `?` when absent.
        architecture: String,
    },
    /// The chat template could not be applied.
    #[error("{}: cannot format the conversation with the model's chat template: {message}", path.display())]
    Template {
        /// The model file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// The prompt does not fit the model's context window.
    #[error("the prompt has {tokens} tokens; the model's context window holds {context}")]
    ContextOverflow {
        /// Prompt tokens.
        tokens: u32,
        /// Context size the model was trained for.
        context: u32,
    },
    /// llama.cpp failed while running.
    #[error("llama.cpp: {0}")]
    Engine(String),
    /// The constraint layer failed.
    #[error(transparent)]
    Constraint(#[from] ConstraintError),
    /// The generation was cancelled.
    #[error("cancelled")]
    Cancelled,
}
