//! Claude Code session transcripts (JSONL) read into plain data.
//!
//! [`parse`] turns a session file's bytes into a [`Transcript`]: the
//! envelope facts (session id, versions, cwd, branch, time span), the
//! message tree by `uuid`/`parentUuid` (crossing compaction boundaries by
//! `logicalParentUuid`), responses grouped by `message.id`, summaries,
//! compactions, and what the importer of frames needs: the human
//! [`Prompt`]s with how each one branches ([`PromptKind`]), every
//! [`ToolCall`] paired with its result, and the [`FileTouch`]es of file
//! tools with [`Transcript::roles`]. Subagent files join the session through
//! [`Transcript::attach_subagent`].
//!
//! **Architecture invariant:** parsing never fails and never panics; a bad
//! line is a [`Problem`] and the rest still count. Everything but [`files`]
//! is pure: [`files::companions`] lists a session's agent files on disk.
//! Nothing here knows about frames; the format facts come from
//! `shared/notes/transcripts.md`.
//!
//! ```
//! use noesis_transcript::{PromptKind, Role, parse};
//!
//! let jsonl = br#"{"type":"user","uuid":"u1","parentUuid":null,"sessionId":"s","message":{"role":"user","content":"add a README"}}
//! {"type":"assistant","uuid":"a1","parentUuid":"u1","message":{"id":"m1","content":[{"type":"tool_use","id":"t1","name":"Write","input":{"file_path":"/p/README.md","content":"hi\n"}}]}}
//! {"type":"user","uuid":"r1","parentUuid":"a1","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"File created"}]},"toolUseResult":{"type":"create"}}
//! {"type":"user","uuid":"u2","parentUuid":"r1","message":{"role":"user","content":"shorter"}}
//! {"type":"assistant","uuid":"a2","parentUuid":"u2","mess"#;
//! let t = parse(jsonl);
//! assert_eq!(t.session_id(), Some("s"));
//! assert_eq!(t.problems()[0].line, 5); // the last line was cut short
//! let kinds: Vec<PromptKind> = t.prompts().iter().map(|p| p.kind).collect();
//! assert_eq!(kinds, [PromptKind::Root, PromptKind::Refine]);
//! assert_eq!(t.tool_calls()[0].prompt, Some(0));
//! assert_eq!(t.roles()["/p/README.md"], Role::Created);
//! assert_eq!(t.file_touches()[0].content.as_deref(), Some("hi\n"));
//! ```

#![deny(missing_docs)]

mod build;
pub mod files;
mod lines;
mod prompt;
mod subagent;
#[cfg(test)]
mod test_support;
mod tools;
mod touch;
mod transcript;

pub use build::parse;
pub use prompt::{Prompt, PromptKind};
pub use subagent::{AgentKind, Link, Sidechain, Subagent, is_compaction_agent};
pub use tools::{Origin, RESULT_TEXT_LIMIT, Spawned, ToolCall, ToolResult};
pub use touch::{FileTouch, Role};
pub use transcript::{Compaction, Message, MessageKind, Problem, Response, Summary, Transcript, Usage};
