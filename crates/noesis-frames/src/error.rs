//! Errors of the frame algebra and of the file scan.

use std::path::PathBuf;

use crate::{FrameId, Status};

/// What can go wrong with frames, sessions and scans. Each message names the
/// value, file or frame at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FramesError {
    /// A frame id of the wrong shape.
    #[error("`{0}` is not a frame id (expected a UUID such as 0193b1c2-…, without spaces)")]
    BadId(String),
    /// An unknown status name.
    #[error("`{0}` is not a status (expected active, suspended, completed, invalidated or promoted)")]
    BadStatus(String),
    /// A time that is not RFC 3339 UTC.
    #[error("`{0}` is not an RFC 3339 UTC time such as 2026-01-31T12:00:00Z")]
    BadTime(String),
    /// A frame or draft that breaks a rule (the message says which).
    #[error("{0}")]
    Invalid(String),
    /// A status change the lifecycle does not allow.
    #[error("frame {frame_id} is {from}; it cannot become {to}")]
    Transition {
        /// The frame.
        frame_id: FrameId,
        /// Its status now.
        from: Status,
        /// The status asked for.
        to: Status,
    },
    /// No frame with that id.
    #[error("no frame {0}")]
    NotFound(FrameId),
    /// A file or folder that could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}
