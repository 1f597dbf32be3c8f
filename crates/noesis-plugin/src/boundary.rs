//! What a plugin sees and returns. The types carry the boundary's rules: a
//! plugin gets shared references and no store, so it cannot change the tree;
//! what it returns from `parse_output` can only add to a frame's
//! invalidation condition, never replace or drop it.

use noesis_frames::{CausalFrame, FrameId, FrameTree, Invalidation, SessionArtifacts, Status, Timestamp};
use serde::Serialize;
use serde_json::{Value, json};

use crate::PluginError;

/// A plugin: owns the I/O of one kind of work (what goes into the model,
/// what its reply means, where the result is kept); the core owns
/// causality (frames, evidence, invalidation).
pub trait Plugin: Send + Sync {
    /// The plugin's name, for messages and frames.
    fn name(&self) -> &str;

    /// Turns the raw request into the context slice the model gets. The
    /// files named in the slice become the frame's evidence, hashed by the
    /// core.
    ///
    /// # Errors
    /// The request cannot be served.
    fn transform_input(&self, raw: &Value, ctx: &CoreContext<'_>) -> Result<ContextSlice, PluginError>;

    /// Reads the model's reply for `frame` (as the core made it: query,
    /// slice, evidence and condition, no conclusion yet). Decisions belong
    /// here.
    ///
    /// # Errors
    /// The reply does not say what the plugin needs.
    fn parse_output(&self, raw: &Value, frame: &CausalFrame) -> Result<Parsed, PluginError>;

    /// Keeps the parsed result (a file, a report); a side effect only.
    /// `frame` is the finished frame, as stored.
    ///
    /// # Errors
    /// The side effect failed; the core then invalidates the frame.
    fn store(&self, parsed: &Parsed, frame: &CausalFrame) -> Result<(), PluginError>;
}

/// What the core resolved before the plugin runs; read-only.
#[derive(Debug, Clone, Copy)]
pub struct CoreContext<'a> {
    pub(crate) current_frame: &'a CausalFrame,
    pub(crate) frames: &'a FrameTree,
    pub(crate) artifacts: &'a SessionArtifacts,
    pub(crate) changed_files: &'a [String],
    pub(crate) invalidated_frames: &'a [Invalidation],
    pub(crate) principles: &'a [CausalFrame],
}

impl<'a> CoreContext<'a> {
    /// The frame this step will become (active, no conclusion yet).
    #[must_use]
    pub fn current_frame(&self) -> &'a CausalFrame {
        self.current_frame
    }

    /// The frames the plugin may see: the session's own and those of the
    /// sessions linked to it on purpose, nothing else.
    #[must_use]
    pub fn frames(&self) -> &'a FrameTree {
        self.frames
    }

    /// The session's artifacts (files with hashes and roles, prompt).
    #[must_use]
    pub fn artifacts(&self) -> &'a SessionArtifacts {
        self.artifacts
    }

    /// Files whose hash now differs from the session's record or from a
    /// frame's condition, project-relative, sorted.
    #[must_use]
    pub fn changed_files(&self) -> &'a [String] {
        self.changed_files
    }

    /// Frames the core invalidated when it opened (changed files, expiry,
    /// and their cascade).
    #[must_use]
    pub fn invalidated_frames(&self) -> &'a [Invalidation] {
        self.invalidated_frames
    }

    /// Visible frames set aside by a pivot or backtrack; they can resume.
    #[must_use]
    pub fn suspended_frames(&self) -> Vec<&'a CausalFrame> {
        self.frames.with_status(Status::Suspended).collect()
    }

    /// Promoted frames of the whole project: lasting lessons, lifted out of
    /// their sessions on purpose.
    #[must_use]
    pub fn principles(&self) -> &'a [CausalFrame] {
        self.principles
    }

    /// The context as JSON, for plugins that run as programs.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let frames: Vec<&CausalFrame> = self.frames.iter().collect();
        json!({
            "current_frame": self.current_frame,
            "frames": frames,
            "artifacts": self.artifacts,
            "changed_files": self.changed_files,
            "invalidated_frames": self.invalidated_frames,
            "suspended_frames": self.suspended_frames().iter().map(|f| &f.frame_id).collect::<Vec<_>>(),
            "principles": self.principles,
        })
    }
}

/// What the model gets for one step.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ContextSlice {
    /// The slice in words; kept on the frame.
    pub text: String,
    /// The model's input (a module's input object, an agent's task).
    pub input: Value,
    /// Project-relative files (or parts, `path#sig:name`) the slice rests
    /// on; the core hashes them and makes them the frame's evidence.
    pub files: Vec<String>,
}

/// More that invalidates a frame, on top of what its evidence implies.
/// Only grows: there is no way to take a condition away.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Also {
    pub(crate) files: Vec<String>,
    pub(crate) frames: Vec<FrameId>,
    pub(crate) expires_at: Option<Timestamp>,
}

impl Also {
    /// Files (or parts) the conclusion also depends on; hashed by the core.
    #[must_use]
    pub fn files(&self) -> &[String] {
        &self.files
    }
    /// Frames the conclusion also depends on.
    #[must_use]
    pub fn frames(&self) -> &[FrameId] {
        &self.frames
    }
    /// A deadline, if any.
    #[must_use]
    pub fn expires_at(&self) -> Option<Timestamp> {
        self.expires_at
    }
}

/// What `parse_output` made of a reply.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Parsed {
    conclusion: String,
    confidence: f64,
    data: Value,
    also: Also,
}

impl Parsed {
    /// A conclusion with its confidence (clamped to 0..=1; not a number
    /// counts as 0) and the structured result.
    #[must_use]
    pub fn new(conclusion: impl Into<String>, confidence: f64, data: Value) -> Parsed {
        let confidence = if confidence.is_nan() { 0.0 } else { confidence.clamp(0.0, 1.0) };
        Parsed { conclusion: conclusion.into(), confidence, data, also: Also::default() }
    }

    /// Also invalid when this file (or part) changes.
    #[must_use]
    pub fn also_file(mut self, path: impl Into<String>) -> Parsed {
        self.also.files.push(path.into());
        self
    }

    /// Also invalid when this frame is.
    #[must_use]
    pub fn also_frame(mut self, id: FrameId) -> Parsed {
        self.also.frames.push(id);
        self
    }

    /// Also invalid from this time on (the earlier deadline wins).
    #[must_use]
    pub fn expires_at(mut self, at: Timestamp) -> Parsed {
        self.also.expires_at = Some(self.also.expires_at.map_or(at, |t| t.min(at)));
        self
    }

    /// The conclusion in words.
    #[must_use]
    pub fn conclusion(&self) -> &str {
        &self.conclusion
    }
    /// 0 to 1.
    #[must_use]
    pub fn confidence(&self) -> f64 {
        self.confidence
    }
    /// The structured result.
    #[must_use]
    pub fn data(&self) -> &Value {
        &self.data
    }
    /// The additions to the frame's condition.
    #[must_use]
    pub fn also(&self) -> &Also {
        &self.also
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confidence_is_clamped_and_conditions_only_grow() {
        assert_eq!(Parsed::new("x", 1.5, Value::Null).confidence(), 1.0);
        assert_eq!(Parsed::new("x", -1.0, Value::Null).confidence(), 0.0);
        assert_eq!(Parsed::new("x", f64::NAN, Value::Null).confidence(), 0.0);
        let p = Parsed::new("x", 0.5, Value::Null)
            .also_file("a.py")
            .also_file("b.py#sig:f")
            .expires_at(Timestamp::from_millis(9))
            .expires_at(Timestamp::from_millis(20));
        assert_eq!(p.also().files(), ["a.py", "b.py#sig:f"]);
        assert_eq!(p.also().expires_at(), Some(Timestamp::from_millis(9)), "the earlier deadline");
    }
}
