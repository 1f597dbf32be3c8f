//! The retention probe: a scripted run that learns 20 facts with evidence
//! (files read and changed, test runs, a person's refusals, errors)
//! between bulky turns that force compactions, then checks which of the
//! facts the model still has in front of it at the end. The summariser is
//! the one model in it, passed in, so the same script measures compaction
//! with its facts kept and a plain summary (`keep_facts = false`) with
//! the test's scripted summariser or a real model (`bench/retention.sh`).
//!
//! A fact counts as retained when every one of its probe strings (a path
//! with its hash, a test's name with the exit code, a refusal's words) is
//! in the last request the model is sent: what the model cannot see, it
//! does not know.

use noesis_llm::{ChatRequest, ChatResponse, StructuredMode, ToolCall};
use serde_json::{Value, json};

use crate::config::{ApprovalPolicy, ContextConfig, Limits, RunConfig};
use crate::run::{Action, AgentRun, Decision, ToolEvidence, ToolOutput, Verdict};
use crate::tool::{Effects, ToolDecl};

/// What one step of the script does (one model turn, one call).
enum Step {
    /// Read a file that exists.
    Read(&'static str, String),
    /// Read a file that cannot be read: the error.
    ReadFails(&'static str, &'static str),
    /// Write a file (approved).
    Write(&'static str, String),
    /// Run a command (approved): its exit code and output.
    Run(&'static str, i32, String),
    /// A command a person refuses, with why.
    Refused(&'static str, &'static str),
}

/// One probed fact: what it is, and the strings that must all be seen.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The fact, in words.
    pub fact: String,
    /// Every one must be in the final request.
    pub keys: Vec<String>,
}

/// What a probe run found.
#[derive(Debug, Clone)]
pub struct Report {
    /// Facts whose probe strings were all in the final request.
    pub retained: usize,
    /// Facts seeded.
    pub total: usize,
    /// Compactions the run made.
    pub compactions: usize,
    /// Model turns of the run (summaries not counted).
    pub turns: usize,
    /// The facts not retained.
    pub missing: Vec<String>,
    /// Estimated tokens of the final request.
    pub final_tokens: u64,
    /// How the run ended (`answer`, or why it stopped).
    pub ended: String,
}

impl Report {
    /// Retained facts as a share, in percent.
    pub fn percent(&self) -> f64 {
        if self.total == 0 { 100.0 } else { self.retained as f64 * 100.0 / self.total as f64 }
    }
}

fn hash(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex().to_string()
}

/// A file's worth of prose that holds no fact, `n` characters or so.
fn filler(topic: &str, n: usize) -> String {
    let line = format!(
        "The {topic} module follows the team's conventions: small functions, explicit errors, and comments \
that say why rather than what. Nothing here bears on the failing test.\n"
    );
    line.repeat(n / line.len() + 1)
}

fn script() -> (Vec<Step>, Vec<Probe>) {
    use Step::*;
    let facts: Vec<(Step, Vec<String>, String)> = {
        let read = |path: &'static str, body: String| {
            let keys = vec![format!("{path} (blake3 {}", &hash(&body)[..16])];
            (Read(path, body), keys, format!("read {path} with its hash"))
        };
        let write = |path: &'static str, body: String| {
            let keys = vec![format!("changed {path} (now blake3 {}", &hash(&body)[..16])];
            (Write(path, body), keys, format!("changed {path} with its hash"))
        };
        let run = |cmd: &'static str, code: i32, out: &str, key: &str| {
            let keys = vec![format!("`{cmd}` exited {code}"), key.to_owned()];
            (Run(cmd, code, out.to_owned()), keys, format!("`{cmd}` and its outcome"))
        };
        let refused = |cmd: &'static str, why: &'static str| {
            (Refused(cmd, why), vec![why.to_owned()], format!("a person refused `{cmd}`"))
        };
        let fails = |path: &'static str, error: &'static str| {
            (ReadFails(path, error), vec![error.to_owned()], format!("reading {path} failed"))
        };
        vec![
            read("config/billing.toml", "currency = \"EUR\"\nrounding = \"half_even\"\nvat_rate = 0.19\n".into()),
            run(
                "cargo test -p billing",
                101,
                "running 42 tests\ntest invoice::rounds_half_even ... FAILED\ntest result: FAILED. 41 passed; 1 failed",
                "invoice::rounds_half_even",
            ),
            read(
                "src/invoice.rs",
                format!("pub fn total(lines: &[Line]) -> Cents {{ todo!() }}\n{}", filler("invoice", 300)),
            ),
            fails("src/legacy/vat.rs", "no such file: src/legacy/vat.rs"),
            refused("cargo publish -p billing", "never publish from an agent run"),
            read("src/tax.rs", format!("pub const VAT: f64 = 0.19;\n{}", filler("tax", 200))),
            write("src/invoice.rs", "pub fn total(lines: &[Line]) -> Cents { round_half_even(sum(lines)) }\n".into()),
            run(
                "cargo test -p billing invoice",
                101,
                "test invoice::credit_note_negative ... FAILED\ntest result: FAILED. 7 passed; 1 failed",
                "invoice::credit_note_negative",
            ),
            read("docs/ROUNDING.md", "Round half to even at the invoice total, never per line.\n".into()),
            fails("assets/logo.png", "not UTF-8 text: assets/logo.png"),
            write("src/credit.rs", "pub fn credit(c: Cents) -> Cents { -c.abs() }\n".into()),
            refused("rm -rf migrations", "the migrations are the audit trail"),
            run(
                "cargo clippy -p billing",
                0,
                "Checking billing v0.3.1\nFinished dev profile; 0 warnings emitted (clippy-clean-billing)",
                "clippy-clean-billing",
            ),
            read("Cargo.toml", "[workspace]\nmembers = [\"billing\", \"ledger\"]\n".into()),
            write("CHANGELOG.md", "## 0.3.2\n- invoices round half to even at the total\n".into()),
            fails("../secrets/prod.env", "path escapes the workspace: ../secrets/prod.env"),
            run(
                "cargo test -p ledger",
                0,
                "running 18 tests\ntest result: ok. 18 passed; 0 failed (ledger-suite-green)",
                "ledger-suite-green",
            ),
            refused("git push --force origin main", "no force pushes to main"),
            write("src/tax.rs", "pub const VAT: Rate = Rate::percent(19);\n".into()),
            run(
                "cargo test -p billing",
                0,
                "running 43 tests\ntest result: ok. 43 passed; 0 failed (billing-suite-green)",
                "billing-suite-green",
            ),
        ]
    };
    let mut steps = Vec::new();
    let mut probes = Vec::new();
    for (i, (step, keys, fact)) in facts.into_iter().enumerate() {
        steps.push(step);
        probes.push(Probe { fact, keys });
        // Bulk between facts: what makes the context fill up.
        steps.push(Read(FILLERS[i % FILLERS.len()], filler(FILLERS[i % FILLERS.len()], 2400)));
    }
    // More bulk after the last fact, for as long as it takes a compaction
    // to cover it: every fact is probed after it went through one.
    for i in 0..EXTRA {
        steps.push(Read(FILLERS[i % FILLERS.len()], filler(FILLERS[i % FILLERS.len()], 2400)));
    }
    (steps, probes)
}

/// Filler turns the script may add after the last fact.
const EXTRA: usize = 30;

const FILLERS: [&str; 5] = ["src/report.rs", "src/export.rs", "src/customer.rs", "src/pdf.rs", "src/mail.rs"];

fn tools() -> Vec<ToolDecl> {
    let path = json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]});
    vec![
        ToolDecl::read_only("read_file", "Reads a file.", path),
        ToolDecl::read_only(
            "write_file",
            "Writes a file.",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"]}),
        )
        .with_effects(Effects { writes_files: true, ..Effects::default() }),
        ToolDecl::read_only(
            "run_command",
            "Runs a command.",
            json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
        )
        .with_effects(Effects { runs_commands: true, ..Effects::default() }),
    ]
}

fn call(i: usize, tool: &str, arguments: Value) -> ChatResponse {
    ChatResponse {
        tool_calls: vec![ToolCall { id: format!("c{i}"), name: tool.into(), arguments }],
        ..ChatResponse::text("", "script", StructuredMode::Text)
    }
}

/// The probes the script checks, in the order their facts are seeded.
pub fn probes() -> Vec<Probe> {
    script().1
}

/// Runs the script with compaction over a `window_tokens` window,
/// `keep_facts` as configured and `summarize` answering each compaction
/// request, and probes the final request.
pub fn run(keep_facts: bool, window_tokens: u64, summarize: &mut dyn FnMut(&ChatRequest) -> String) -> Report {
    let (steps, probes) = script();
    let last_fact = format!("c{}", steps.len() - EXTRA - 2);
    let config = RunConfig {
        tools: tools(),
        approval: ApprovalPolicy::Ask,
        // Admitted, so a person decides on each (and refuses three).
        permissions: crate::Permissions::from_commands(&["cargo".to_owned(), "rm".to_owned(), "git".to_owned()]),
        // The bulk rereads the same files: neutral here, the stall rule is not measured.
        limits: Limits { max_turns: 200, max_tool_calls: 200, stall_steps: 1_000, ..Limits::default() },
        max_output_tokens: Some(300),
        context: ContextConfig { window_tokens: Some(window_tokens), keep_facts, ..ContextConfig::default() },
        ..RunConfig::default()
    };
    let mut run = AgentRun::new("retention", "Fix the failing tests of the billing service.", config, 0);
    let mut next_step = 0;
    let mut last = None;
    let mut turns = 0;
    for _ in 0..1000 {
        match run.next(0) {
            Action::CallModel(request) if run.role() == "compact" => {
                let summary = summarize(&request);
                let reply = ChatResponse::text(summary, "summariser", StructuredMode::Text);
                if run.on_model_reply(&reply, 0.0).is_err() {
                    break;
                }
            }
            Action::CallModel(request) => {
                turns += 1;
                let covered = run.compaction().is_some_and(|(_, c)| {
                    run.entries[..c.upto]
                        .iter()
                        .any(|e| matches!(e, crate::Entry::Assistant { calls, .. } if calls.contains(&last_fact)))
                });
                let step = if covered && next_step >= steps.len() - EXTRA { None } else { steps.get(next_step) };
                let reply = match step {
                    Some(Step::Read(path, _) | Step::ReadFails(path, _)) => {
                        call(next_step, "read_file", json!({"path": path}))
                    }
                    Some(Step::Write(path, body)) => {
                        call(next_step, "write_file", json!({"path": path, "content": body}))
                    }
                    Some(Step::Run(cmd, ..) | Step::Refused(cmd, _)) => {
                        call(next_step, "run_command", json!({"command": cmd}))
                    }
                    None => {
                        last = Some(request);
                        ChatResponse::text("All tests pass.", "script", StructuredMode::Text)
                    }
                };
                next_step += 1;
                if run.on_model_reply(&reply, 0.0).is_err() {
                    break;
                }
            }
            Action::AwaitApproval(pending) => {
                let decisions = pending
                    .iter()
                    .map(|p| {
                        let why = run
                            .call(&p.call_id)
                            .and_then(|c| c.id.strip_prefix('c'))
                            .and_then(|n| n.parse::<usize>().ok())
                            .and_then(|n| match steps.get(n) {
                                Some(Step::Refused(_, why)) => Some(*why),
                                _ => None,
                            });
                        Decision {
                            call_id: p.call_id.clone(),
                            tool: p.tool.clone(),
                            arguments_hash: p.arguments_hash.clone(),
                            verdict: match why {
                                Some(m) => Verdict::Deny { message: Some(m.to_owned()) },
                                None => Verdict::Approve,
                            },
                        }
                    })
                    .collect::<Vec<_>>();
                if run.decide(&decisions).is_err() {
                    break;
                }
            }
            Action::ExecuteTools(batch) => {
                for c in &batch {
                    let _ = run.started(&c.call_id, 0);
                }
                for c in batch {
                    let n: usize = c.call_id.trim_start_matches('c').parse().unwrap_or(usize::MAX);
                    let out = match steps.get(n) {
                        Some(Step::Read(path, body)) => ToolOutput::ok(body.clone())
                            .with_evidence(ToolEvidence::File { path: (*path).into(), blake3: hash(body) }),
                        Some(Step::ReadFails(_, error)) => ToolOutput::error(*error),
                        Some(Step::Write(path, body)) => ToolOutput::ok(format!("wrote {} bytes", body.len()))
                            .with_evidence(ToolEvidence::File { path: (*path).into(), blake3: hash(body) }),
                        Some(Step::Run(cmd, code, out)) => {
                            ToolOutput { is_error: *code != 0, ..ToolOutput::ok(out.clone()) }.with_evidence(
                                ToolEvidence::Command {
                                    command: (*cmd).into(),
                                    exit_code: Some(*code),
                                    output_blake3: hash(out),
                                },
                            )
                        }
                        _ => ToolOutput::error("not in the script"),
                    };
                    let _ = run.finished(&c.call_id, out, 0);
                }
            }
            Action::Busy(_) | Action::Done(_) => break,
        }
    }
    let seen: String = last
        .as_ref()
        .map(|r| r.messages.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n"))
        .unwrap_or_default();
    let missing: Vec<String> =
        probes.iter().filter(|p| !p.keys.iter().all(|k| seen.contains(k.as_str()))).map(|p| p.fact.clone()).collect();
    Report {
        retained: probes.len() - missing.len(),
        total: probes.len(),
        compactions: run.compactions(),
        turns,
        missing,
        final_tokens: last.as_ref().map_or(0, noesis_llm::estimate_request_tokens),
        ended: match &run.outcome {
            Some(crate::Outcome::Stopped { detail, .. }) => format!("stopped: {detail}"),
            Some(o) => crate::outcome_name(o),
            None => "unfinished".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_script_seeds_twenty_distinct_facts() {
        let probes = super::probes();
        assert_eq!(probes.len(), 20);
        let mut keys: Vec<&String> = probes.iter().flat_map(|p| &p.keys).collect();
        keys.sort();
        keys.dedup();
        assert!(keys.len() >= 20);
    }
}
