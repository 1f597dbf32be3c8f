//! `noesis ask "QUERY"`: the default (recall) plugin. The model navigates
//! past cognition with `search_frames`, `open_frame` and `read_file` (each
//! call a child frame of the answer), sees only its session's frames, those
//! of linked sessions and promoted ones, and is offered set-aside branches.
//! A confident answer that verification confirms is promoted to memory,
//! which later questions search first.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use async_trait::async_trait;
use noesis_agent::{Action, AgentRun, ApprovalPolicy, Driver, Outcome, RunConfig, Toolbox, Workspace};
use noesis_frames::{CausalFrame, Draft, Evidence, FrameId, Status, Timestamp};
use noesis_llm::Provider;
use noesis_modules::search::SearchPath;
use noesis_plugin::recall::{Recall, promotable};
use noesis_plugin::{ContextSlice, Core, Step, Think, Thought};
use noesis_store::{MemoryQuery, NewMemory, Store};
use serde_json::{Value, json};

use crate::out;
use crate::provider::ProviderArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The question.
    query: String,
    /// Files the answer should rest on (read and cited).
    files: Vec<String>,
    /// Tool calls the model may make.
    #[arg(long, value_name = "N", default_value_t = 12)]
    max_tool_calls: u32,
    /// Print the answer's frame and its children as JSON.
    #[arg(long)]
    json: bool,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
    #[command(flatten)]
    provider: ProviderArgs,
}

const TOOLS: [&str; 3] = ["search_frames", "open_frame", "read_file"];

/// The model of a recall step: an agent run with the frame tools and
/// `read_file`, whose calls become the step's children.
struct AgentThink {
    search: SearchPath,
    provider: Arc<dyn Provider>,
    store: Arc<dyn Store>,
    project_id: String,
    root: std::path::PathBuf,
    visible: Arc<Vec<String>>,
    max_tool_calls: u32,
    quiet: bool,
}

fn task(slice: &ContextSlice) -> String {
    format!(
        "Answer the question from what this project already worked out. Search past frames (search_frames), \
         open the ones that matter (open_frame) and read files when a conclusion needs checking (read_file). \
         Do not guess what a frame says: open it.\n\n{}\n\
         End with one JSON object and nothing else: {{\"answer\": \"…\", \"confidence\": 0.0-1.0, \"cites\": [frame ids you relied on]}}",
        slice.text
    )
}

/// The answer's JSON object (the last `{…}` in the text that parses and has
/// an `answer`), else the text.
fn reply(text: &str) -> Value {
    let trimmed = text.trim();
    for (start, _) in trimmed.match_indices('{').collect::<Vec<_>>().into_iter().rev() {
        let mut objects = serde_json::Deserializer::from_str(&trimmed[start..]).into_iter::<Value>();
        if let Some(Ok(v)) = objects.next()
            && v.get("answer").is_some()
        {
            return v;
        }
    }
    Value::String(trimmed.to_owned())
}

#[async_trait]
impl Think for AgentThink {
    async fn think(&self, slice: &ContextSlice, frame: &CausalFrame) -> Result<Thought, String> {
        let workspace = Workspace::new(&self.root).map_err(|e| e.to_string())?;
        let host = super::agent::tools::Host {
            search: self.search.clone(),
            provider: Arc::clone(&self.provider),
            store: Arc::clone(&self.store),
            project_id: self.project_id.clone(),
            run_id: format!("ask-{}", frame.frame_id),
            depth: super::agent::tools::MAX_DEPTH,
            router: None,
            visible: Some(Arc::clone(&self.visible)),
            redactor: Arc::new(noesis_sandbox::Redactor::from_env(&[], &[])),
        };
        let tools = Arc::new(super::agent::tools::with_frame_tools(Toolbox::new(workspace, Vec::new()), &host));
        let offered = tools.decls().into_iter().filter(|d| TOOLS.contains(&d.name.as_str())).collect();
        let config = RunConfig {
            tools: offered,
            approval: ApprovalPolicy::Auto,
            tool_filter: noesis_agent::ToolFilter {
                only: TOOLS.iter().map(|t| (*t).to_owned()).collect(),
                except: vec![],
            },
            limits: noesis_agent::Limits { max_tool_calls: self.max_tool_calls, ..noesis_agent::Limits::default() },
            ..RunConfig::default()
        };
        let mut run = AgentRun::new(host.run_id.clone(), task(slice), config, super::agent::now_ms());
        run.host = json!({"task": slice.input["query"], "workspace": self.root.to_string_lossy(), "provider": self.provider.name(),
                          "model": self.provider.model(), "project_id": self.project_id, "ask": true});
        let observe = super::agent::progress_notes(self.quiet, &run.id, "  ");
        let driver = Driver {
            now: &super::agent::now_ms,
            observe: Some(&observe),
            ..Driver::new(self.provider.as_ref(), Arc::clone(&tools))
        };
        let mut keep = super::agent::Keep { store: self.store.as_ref(), project_id: self.project_id.clone() };
        let action = driver.drive(&mut run, &mut keep).await.map_err(|e| e.to_string())?;
        if let Action::AwaitApproval(_) = action {
            return Err("the recall run asked for an approval; its tools never need one".into());
        }
        let answer = match &run.outcome {
            Some(Outcome::Answer { text }) => text.clone(),
            Some(other) => {
                return Err(format!("the recall run ended without an answer: {}", noesis_agent::outcome_name(other)));
            }
            None => return Err("the recall run did not finish".into()),
        };
        let mut evidence = Vec::new();
        let mut children = Vec::new();
        for call in &run.calls {
            let mut cites = Vec::new();
            for e in &call.evidence {
                match e {
                    noesis_agent::ToolEvidence::Frame { frame_id } => {
                        if let Ok(id) = FrameId::parse(frame_id) {
                            cites.push(Evidence::Frame { frame_id: id });
                        }
                    }
                    noesis_agent::ToolEvidence::File { path, blake3 } => {
                        cites.push(Evidence::File { path: path.clone(), hash: blake3.clone() });
                    }
                    _ => {}
                }
            }
            // Only frames actually opened (and files read) are what the
            // answer rests on; a search result list is not.
            if call.tool != "search_frames" && !call.is_error {
                evidence.extend(cites.iter().cloned());
            }
            let result = call.result.clone().unwrap_or_default();
            let short: String = result.chars().take(2000).collect();
            children.push(Draft {
                context_slice: call.arguments.to_string(),
                evidence: if call.tool == "search_frames" { Vec::new() } else { cites },
                conclusion: short,
                confidence: if call.is_error { 0.0 } else { 1.0 },
                ..Draft::new(format!("{} {}", call.tool, call.arguments))
            });
        }
        evidence.push(Evidence::Observation { tool: "recall".into(), content: format!("agent run {}", run.id) });
        Ok(Thought { raw: reply(&answer), evidence, children })
    }
}

pub(crate) fn run(search: &SearchPath, a: Args) -> anyhow::Result<ExitCode> {
    if a.query.trim().is_empty() {
        anyhow::bail!("the question is empty: noesis ask \"QUERY\"");
    }
    let rt = crate::memory::runtime()?;
    rt.block_on(async move {
        let s = super::plugins::setup().await?;
        let provider = super::agent::with_text_tools(crate::provider::select(&a.provider, &s.config, None)?, &s.config);
        let store: Arc<dyn Store> = Arc::from(s.store);
        let mut core = Core::open(store.as_ref(), &s.project, None, &crate::memory::store_files(), Timestamp::now()).await?;
        // Memory first: answers promoted earlier that share words with the
        // question.
        let remembered = store
            .search_memory(&MemoryQuery { text: &a.query, project_id: Some(&s.project.project_id), kind: Some("recall"), limit: 5 })
            .await?;
        // Only answers still promoted: one invalidated since is no memory.
        let mut memory: Vec<Value> = Vec::new();
        for m in &remembered {
            let held = match noesis_frames::FrameId::parse(&m.entry.episode_id) {
                Ok(id) => store.frame(&id).await?.is_some_and(|f| f.status == Status::Promoted),
                Err(_) => false,
            };
            if held {
                memory.push(json!({"frame_id": m.entry.episode_id, "text": m.entry.text}));
            }
        }
        let mut visible: Vec<String> = vec![core.session().session_id.clone()];
        for l in store.session_links(&s.project.project_id).await? {
            if let Some(o) = l.other(&core.session().session_id) {
                visible.push(o.to_owned());
            }
        }
        let think = Arc::new(AgentThink {
            search: search.clone(),
            provider,
            store: Arc::clone(&store),
            project_id: s.project.project_id.clone(),
            root: s.project.root.clone(),
            visible: Arc::new(visible),
            max_tool_calls: a.max_tool_calls,
            quiet: a.quiet,
        });
        let raw = json!({"query": a.query, "files": a.files, "memory": memory});
        let outcome = core
            .step(&Recall, Step { query: a.query.clone(), raw: &raw, parent: None }, think.as_ref(), Timestamp::now())
            .await?;
        // Earlier sessions that asked something like this but are not
        // linked: the plugin never saw them; the person may link one.
        let mut similar: Vec<(f64, String, String)> = Vec::new();
        let visible = &think.visible;
        for (id, _) in store.session_kinds(&s.project.project_id).await? {
            if visible.contains(&id) {
                continue;
            }
            // Its prompts: the initial one and the questions at the top of
            // its tree.
            let mut prompts: Vec<String> = store.session(&id).await?.and_then(|o| o.initial_prompt).into_iter().collect();
            let filter = noesis_store::FrameFilter {
                session_id: Some(id.clone()),
                limit: Some(500),
                ..noesis_store::FrameFilter::project(&s.project.project_id)
            };
            // Questions at the top of a tree, and an imported transcript's
            // prompts (which nest as refinements).
            let asked = |f: &CausalFrame| f.depth == 1 || f.context_slice.starts_with(crate::import::PROMPT_SLICE);
            prompts.extend(store.frames(&filter).await?.into_iter().filter(asked).map(|f| f.query));
            let best = prompts
                .into_iter()
                .map(|p| (noesis_plugin::recall::similarity(&a.query, &p), p))
                .max_by(|x, y| x.0.total_cmp(&y.0));
            if let Some((score, prompt)) = best.filter(|(score, _)| *score >= 0.25) {
                similar.push((score, id, prompt));
            }
        }
        similar.sort_by(|x, y| y.0.total_cmp(&x.0));
        similar.truncate(3);
        let suspended: Vec<CausalFrame> =
            core.frames().with_status(Status::Suspended).cloned().collect();
        // Promotion: confident, and its conditions hold now.
        let threshold = s.config.frames.promote_at.unwrap_or(0.8);
        let mut promoted = false;
        if promotable(&outcome.frame, threshold) {
            let check = noesis_store::ops::verify(store.as_ref(), &s.project, Some(&outcome.frame.frame_id), Some(&core.session().session_id), Timestamp::now()).await?;
            if check.invalidated.is_empty() {
                let why = format!("confidence {:.2} ≥ {threshold:.2}, verified", outcome.frame.confidence);
                let up = noesis_frames::transition(&outcome.frame, Status::Promoted, Some(&why), Some(&core.session().session_id), Timestamp::now())?;
                let changes = noesis_frames::Changeset { frames: vec![], statuses: vec![up] };
                store.apply(&changes).await.context("promote the answer")?;
                store
                    .replace_memory(
                        outcome.frame.frame_id.as_str(),
                        &[NewMemory {
                            project_id: s.project.project_id.clone(),
                            episode_id: outcome.frame.frame_id.to_string(),
                            kind: "recall".into(),
                            text: format!("{}\n{}", a.query, outcome.frame.conclusion),
                            record: json!({"frame_id": outcome.frame.frame_id, "confidence": outcome.frame.confidence}),
                            at: Timestamp::now().millis(),
                        }],
                    )
                    .await?;
                promoted = true;
            }
        }
        if a.json {
            out::json(
                &json!({"frame": outcome.frame, "children": outcome.children, "promoted": promoted, "memory": memory,
                        "similar_sessions": similar.iter().map(|(score, id, prompt)| json!({"session_id": id, "prompt": prompt, "similarity": score})).collect::<Vec<_>>(),
                        "suspended": suspended.iter().map(|f| json!({"frame_id": f.frame_id, "query": f.query})).collect::<Vec<_>>()}),
                true,
            )?;
            return Ok(ExitCode::SUCCESS);
        }
        let mut text = format!("{}\n", outcome.frame.conclusion);
        for f in &suspended {
            text.push_str(&format!(
                "set aside earlier: {} ({}) — resume? `noesis frames resume {}`\n",
                f.query.split_whitespace().collect::<Vec<_>>().join(" "),
                f.frame_id,
                f.frame_id
            ));
        }
        out::data(&text)?;
        for (_, id, prompt) in &similar {
            out::note(&format!(
                "an earlier session asked something similar: {:?} (session {id}); `noesis session link {} {id}` lets ask see it",
                prompt.split_whitespace().collect::<Vec<_>>().join(" "),
                core.session().session_id
            ));
        }
        out::note(&format!(
            "frame {} · confidence {:.2} · {} tool call(s){}",
            outcome.frame.frame_id,
            outcome.frame.confidence,
            outcome.children.len(),
            if promoted { " · promoted to memory" } else { "" }
        ));
        Ok(ExitCode::SUCCESS)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_from_the_last_object() {
        assert_eq!(reply("Thinking…\n{\"answer\": \"a\", \"confidence\": 0.9}")["answer"], "a");
        let code = "Use `if x {}` here.\n{\"answer\": \"b\", \"confidence\": 0.9, \"cites\": []}\nDone.";
        assert_eq!(reply(code)["answer"], "b");
        assert_eq!(reply("{\"answer\": \"first\"} then {\"answer\": \"last\"}")["answer"], "last");
        assert_eq!(reply("just text"), json!("just text"));
        assert_eq!(reply("{\"not\": 1}"), json!("{\"not\": 1}"));
    }
}
