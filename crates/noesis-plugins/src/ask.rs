//! `ask`: a question about past cognition through the default (recall)
//! plugin. The model is an agent run that navigates past frames with
//! `search_frames`, `open_frame` and `read_file` (each call a child frame of
//! the answer), sees only its session's frames, those of linked sessions and
//! promoted ones, and is offered set-aside branches. A confident answer that
//! verification confirms is promoted to memory, which later questions search
//! first.
//!
//! The frame tools and where the run's states are kept belong to the agent
//! host; the caller hands them in as an [`AskHost`].

use std::sync::Arc;

use async_trait::async_trait;
use noesis_agent::{Action, AgentRun, ApprovalPolicy, Checkpoint, Driver, Outcome, RunConfig, Toolbox, Workspace};
use noesis_frames::{CausalFrame, Draft, Evidence, FrameId, Status, Timestamp};
use noesis_llm::Provider;
use noesis_plugin::{ContextSlice, Step, Think, Thought};
use noesis_store::{MemoryQuery, NewMemory};
use serde_json::{Value, json};

use crate::recall::{Recall, promotable, similarity};
use crate::{Error, Setting};

/// The tools an ask's agent may call.
pub const TOOLS: [&str; 3] = ["search_frames", "open_frame", "read_file"];

/// What the agent host lends an ask's agent run.
pub trait AskHost: Send + Sync {
    /// `tools` with the frame tools (`search_frames`, `open_frame`) added,
    /// for the run `run_id`, showing only the frames of the `visible`
    /// sessions and promoted ones.
    fn frame_tools(&self, tools: Toolbox, run_id: &str, visible: Arc<Vec<String>>) -> Toolbox;

    /// Where each state of the run is kept.
    fn checkpoint(&self) -> Box<dyn Checkpoint + '_>;

    /// Hears the run's progress (nothing by default).
    fn observe(&self, _run_id: &str, _progress: &noesis_agent::Progress) {}

    /// The meter every model call of the ask reserves against (the
    /// command's `--max-cost` / `--max-total-tokens`); none by default.
    fn meter(&self) -> Option<Arc<noesis_llm::BudgetMeter>> {
        None
    }

    /// What the run's replies cost; the built-in table by default.
    fn prices(&self) -> Option<Arc<noesis_llm::PriceTable>> {
        None
    }
}

/// Hears each step of an ask's run, with the run's id.
pub type Observe = Box<dyn Fn(&str, &noesis_agent::Progress) + Send + Sync>;

/// The agent host of an ask in a process with a store: the host's frame
/// tools over that store, each state kept there, progress to `observe`.
/// `noesis ask` and `POST /plugins/ask` both lend it.
pub struct StoreHost {
    /// Where `run_module` finds modules.
    pub search: noesis_modules::search::SearchPath,
    /// The model of the run (what `run_module` calls too).
    pub provider: Arc<dyn Provider>,
    /// The store the frames are searched in and the run is kept in.
    pub store: Arc<dyn noesis_store::Store>,
    /// The project.
    pub project_id: String,
    /// Takes secret values out of what the frame tools return.
    pub redactor: Arc<noesis_sandbox::Redactor>,
    /// Hears each step of the run, with its id.
    pub observe: Option<Observe>,
    /// The command's budget: every model call reserves against it.
    pub budget: Option<Arc<noesis_llm::BudgetMeter>>,
    /// What the model's calls cost.
    pub prices: Option<Arc<noesis_llm::PriceTable>>,
}

impl std::fmt::Debug for StoreHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreHost").field("project_id", &self.project_id).finish_non_exhaustive()
    }
}

impl AskHost for StoreHost {
    fn frame_tools(&self, tools: Toolbox, run_id: &str, visible: Arc<Vec<String>>) -> Toolbox {
        let host = noesis_host::tools::HostTools {
            search: self.search.clone(),
            provider: Arc::clone(&self.provider),
            store: Arc::clone(&self.store),
            project_id: self.project_id.clone(),
            run_id: run_id.to_owned(),
            depth: noesis_host::tools::MAX_DEPTH,
            router: None,
            visible: Some(visible),
            redactor: Arc::clone(&self.redactor),
            skills: None,
        };
        noesis_host::tools::with_frame_tools(tools, &host)
    }

    fn checkpoint(&self) -> Box<dyn Checkpoint + '_> {
        Box::new(noesis_host::runs::Keep::new(self.store.as_ref(), self.project_id.clone()))
    }

    fn observe(&self, run_id: &str, progress: &noesis_agent::Progress) {
        if let Some(observe) = &self.observe {
            observe(run_id, progress);
        }
    }

    fn meter(&self) -> Option<Arc<noesis_llm::BudgetMeter>> {
        self.budget.clone()
    }

    fn prices(&self) -> Option<Arc<noesis_llm::PriceTable>> {
        self.prices.clone()
    }
}

/// A question.
#[derive(Debug, Clone)]
pub struct Question {
    /// The question.
    pub query: String,
    /// Files the answer should rest on (read and cited).
    pub files: Vec<String>,
    /// Tool calls the model may make.
    pub max_tool_calls: u32,
    /// The confidence from which a verified answer is promoted to memory.
    pub promote_at: f64,
}

/// An earlier session, not linked, that asked something similar.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Similar {
    /// The session.
    pub session_id: String,
    /// Its most similar prompt.
    pub prompt: String,
    /// How similar (0 to 1).
    pub similarity: f64,
}

/// What `ask` answered.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The session asked in.
    pub session_id: String,
    /// The answer's frame.
    pub frame: CausalFrame,
    /// Its children: one per tool call.
    pub children: Vec<CausalFrame>,
    /// Whether it was promoted to memory.
    pub promoted: bool,
    /// Earlier promoted answers the question was shown.
    pub memory: Vec<Value>,
    /// Unlinked sessions that asked something similar (at most three).
    pub similar: Vec<Similar>,
    /// Branches set aside, which the person may resume.
    pub suspended: Vec<CausalFrame>,
}

impl Answer {
    /// The answer as text: the conclusion, then each branch set aside
    /// earlier that may be resumed.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut text = format!("{}\n", self.frame.conclusion);
        for f in &self.suspended {
            text.push_str(&format!(
                "set aside earlier: {} ({}) — resume? `noesis frames resume {}`\n",
                f.query.split_whitespace().collect::<Vec<_>>().join(" "),
                f.frame_id,
                f.frame_id
            ));
        }
        text
    }

    /// What to tell a person besides the answer: each similar question of
    /// another session (and how to let ask see it), then the frame, its
    /// confidence, the tool calls and whether it was promoted.
    #[must_use]
    pub fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self
            .similar
            .iter()
            .map(|sim| {
                format!(
                    "an earlier session asked something similar: {:?} (session {}); `noesis session link {} {}` lets ask see it",
                    sim.prompt.split_whitespace().collect::<Vec<_>>().join(" "),
                    sim.session_id,
                    self.session_id,
                    sim.session_id
                )
            })
            .collect();
        notes.push(format!(
            "frame {} · confidence {:.2} · {} tool call(s){}",
            self.frame.frame_id,
            self.frame.confidence,
            self.children.len(),
            if self.promoted { " · promoted to memory" } else { "" }
        ));
        notes
    }

    /// The answer as JSON (`noesis ask --json`).
    #[must_use]
    pub fn to_json(&self) -> Value {
        json!({"frame": self.frame, "children": self.children, "promoted": self.promoted, "memory": self.memory,
               "similar_sessions": self.similar,
               "suspended": self.suspended.iter().map(|f| json!({"frame_id": f.frame_id, "query": f.query})).collect::<Vec<_>>()})
    }
}

/// The model of a recall step: an agent run with the frame tools and
/// `read_file`, whose calls become the step's children.
struct AgentThink<'a> {
    host: &'a dyn AskHost,
    provider: Arc<dyn Provider>,
    project_id: String,
    root: std::path::PathBuf,
    visible: Arc<Vec<String>>,
    max_tool_calls: u32,
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

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

#[async_trait]
impl Think for AgentThink<'_> {
    async fn think(&self, slice: &ContextSlice, frame: &CausalFrame) -> Result<Thought, String> {
        let workspace = Workspace::new(&self.root).map_err(|e| e.to_string())?;
        let run_id = format!("ask-{}", frame.frame_id);
        let tools =
            Arc::new(self.host.frame_tools(Toolbox::new(workspace, Vec::new()), &run_id, Arc::clone(&self.visible)));
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
        let mut run = AgentRun::new(run_id.clone(), task(slice), config, now_ms());
        run.host = json!({"task": slice.input["query"], "workspace": self.root.to_string_lossy(), "provider": self.provider.name(),
                          "model": self.provider.model(), "project_id": self.project_id, "ask": true});
        let observe = |p: &noesis_agent::Progress| self.host.observe(&run_id, p);
        let prices = self.host.prices().unwrap_or_else(|| Arc::new(noesis_llm::PriceTable::builtin()));
        let table = Arc::clone(&prices);
        let price = move |r: &noesis_llm::ChatResponse| r.usage.and_then(|u| table.cost(&r.model, u)).unwrap_or(0.0);
        let driver = Driver {
            now: &now_ms,
            observe: Some(&observe),
            price: &price,
            meter: self.host.meter(),
            prices: Some(prices),
            ..Driver::new(self.provider.as_ref(), Arc::clone(&tools))
        };
        let mut keep = self.host.checkpoint();
        let action = driver.drive(&mut run, keep.as_mut()).await.map_err(|e| e.to_string())?;
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

/// Answers `question` in the project's session with `provider` (one that
/// can call tools) as the agent's model and `host` lending it tools.
///
/// # Errors
/// An empty question, the store, or the step (the agent run ended without
/// an answer).
pub async fn ask(
    setting: &Setting<'_>,
    question: &Question,
    provider: Arc<dyn Provider>,
    host: &dyn AskHost,
) -> Result<Answer, Error> {
    if question.query.trim().is_empty() {
        return Err(Error::Invalid("the question is empty".into()));
    }
    let store = setting.store;
    let project = setting.project;
    let mut core = setting.core(None).await?;
    let session_id = core.session().session_id.clone();
    // Memory first: answers promoted earlier that share words with the
    // question.
    let remembered = store
        .search_memory(&MemoryQuery {
            text: &question.query,
            project_id: Some(&project.project_id),
            kind: Some("recall"),
            limit: 5,
        })
        .await?;
    // Only answers still promoted: one invalidated since is no memory.
    let mut memory: Vec<Value> = Vec::new();
    for m in &remembered {
        let held = match FrameId::parse(&m.entry.episode_id) {
            Ok(id) => store.frame(&id).await?.is_some_and(|f| f.status == Status::Promoted),
            Err(_) => false,
        };
        if held {
            memory.push(json!({"frame_id": m.entry.episode_id, "text": m.entry.text}));
        }
    }
    let mut visible: Vec<String> = vec![session_id.clone()];
    for l in store.session_links(&project.project_id).await? {
        if let Some(o) = l.other(&session_id) {
            visible.push(o.to_owned());
        }
    }
    let think = AgentThink {
        host,
        provider,
        project_id: project.project_id.clone(),
        root: project.root.clone(),
        visible: Arc::new(visible),
        max_tool_calls: question.max_tool_calls,
    };
    let raw = json!({"query": question.query, "files": question.files, "memory": memory});
    let outcome = core
        .step(&Recall, Step { query: question.query.clone(), raw: &raw, parent: None }, &think, Timestamp::now())
        .await?;
    // Earlier sessions that asked something like this but are not
    // linked: the plugin never saw them; the person may link one.
    let mut similar: Vec<Similar> = Vec::new();
    for (id, _) in store.session_kinds(&project.project_id).await? {
        if think.visible.contains(&id) {
            continue;
        }
        // Its prompts: the initial one and the questions at the top of
        // its tree.
        let mut prompts: Vec<String> = store.session(&id).await?.and_then(|o| o.initial_prompt).into_iter().collect();
        let filter = noesis_store::FrameFilter {
            session_id: Some(id.clone()),
            limit: Some(500),
            ..noesis_store::FrameFilter::project(&project.project_id)
        };
        // Questions at the top of a tree, and an imported transcript's
        // prompts (which nest as refinements).
        let asked = |f: &CausalFrame| f.depth == 1 || f.context_slice.starts_with(crate::import::PROMPT_SLICE);
        prompts.extend(store.frames(&filter).await?.into_iter().filter(asked).map(|f| f.query));
        let best = prompts.into_iter().map(|p| (similarity(&question.query, &p), p)).max_by(|x, y| x.0.total_cmp(&y.0));
        if let Some((score, prompt)) = best.filter(|(score, _)| *score >= 0.25) {
            similar.push(Similar { session_id: id, prompt, similarity: score });
        }
    }
    similar.sort_by(|x, y| y.similarity.total_cmp(&x.similarity));
    similar.truncate(3);
    let suspended: Vec<CausalFrame> = core.frames().with_status(Status::Suspended).cloned().collect();
    // Promotion: confident, and its conditions hold now.
    let threshold = question.promote_at;
    let mut promoted = false;
    if promotable(&outcome.frame, threshold) {
        let check = noesis_store::ops::verify(
            store,
            project,
            Some(&outcome.frame.frame_id),
            Some(&session_id),
            Timestamp::now(),
        )
        .await?;
        if check.invalidated.is_empty() {
            let why = format!("confidence {:.2} ≥ {threshold:.2}, verified", outcome.frame.confidence);
            let up = noesis_frames::transition(
                &outcome.frame,
                Status::Promoted,
                Some(&why),
                Some(&session_id),
                Timestamp::now(),
            )?;
            let changes = noesis_frames::Changeset { frames: vec![], statuses: vec![up] };
            store.apply(&changes).await?;
            store
                .replace_memory(
                    outcome.frame.frame_id.as_str(),
                    &[NewMemory {
                        project_id: project.project_id.clone(),
                        episode_id: outcome.frame.frame_id.to_string(),
                        kind: "recall".into(),
                        text: format!("{}\n{}", question.query, outcome.frame.conclusion),
                        record: json!({"frame_id": outcome.frame.frame_id, "confidence": outcome.frame.confidence}),
                        at: Timestamp::now().millis(),
                    }],
                )
                .await?;
            promoted = true;
        }
    }
    Ok(Answer { session_id, frame: outcome.frame, children: outcome.children, promoted, memory, similar, suspended })
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

    #[test]
    fn an_answer_reads_as_its_conclusion_and_the_branches_set_aside() {
        let frame = |query: &str, conclusion: &str| {
            Draft { conclusion: conclusion.into(), confidence: 0.9, ..Draft::new(query) }
                .into_frame("p", None, None, Timestamp::from_millis(0))
                .unwrap()
        };
        let aside = frame("an  old\nquestion", "");
        let answer = Answer {
            session_id: "s1".into(),
            frame: frame("q", "it is 42"),
            children: Vec::new(),
            promoted: true,
            memory: Vec::new(),
            similar: vec![Similar { session_id: "s0".into(), prompt: "what  is\nit".into(), similarity: 0.9 }],
            suspended: vec![aside.clone()],
        };
        let id = &aside.frame_id;
        assert_eq!(
            answer.to_text(),
            format!("it is 42\nset aside earlier: an old question ({id}) — resume? `noesis frames resume {id}`\n")
        );
        let notes = answer.notes();
        assert_eq!(
            notes[0],
            "an earlier session asked something similar: \"what is it\" (session s0); `noesis session link s1 s0` lets ask see it"
        );
        assert_eq!(
            notes[1],
            format!("frame {} · confidence 0.90 · 0 tool call(s) · promoted to memory", answer.frame.frame_id)
        );
    }
}
