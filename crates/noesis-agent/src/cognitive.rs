//! The loop as the seed described it — perceive, think, act, reflect —
//! over [`AgentRun`]: each phase is a stretch of the same state machine, so
//! a cycle driven phase by phase and one driven by [`drive`] make the same
//! run, and the run can still be stored, resumed and forked.
//!
//! ```
//! use std::sync::Arc;
//! use noesis_agent::{CognitiveConfig, CognitiveLoop, ReactAgent, Toolbox, Workspace};
//! use noesis_llm::Scripted;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("a.txt"), "hello").unwrap();
//! let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), vec![]));
//! // A scripted model that answers at once (tests/http.rs drives tool calls over HTTP).
//! let model = Scripted::new(vec!["The file says hello.".into()]);
//! let config = CognitiveConfig::react().with_system_prompt("Be brief.").with_max_iterations(5).with_memory_window(20);
//! let mut agent = ReactAgent::new(Arc::new(model), tools, config);
//! let outcome = agent.run_cycle("What does a.txt say?").await;
//! assert_eq!(outcome, noesis_agent::Outcome::Answer { text: "The file says hello.".into() });
//! assert_eq!(agent.memory_buffer().len(), 2); // the question and the answer
//! # });
//! ```

use std::sync::Arc;

use noesis_llm::{Provider, ToolCall};

use crate::config::{ApprovalPolicy, RunConfig, Strategy};
use crate::driver::Toolbox;
use crate::memory::{MemoryBuffer, MemoryKind};
use crate::run::{Action, AgentRun, Critique, Entry, Outcome, StopReason};

/// How an agent works: a [`RunConfig`] with the seed's builder.
#[derive(Debug, Clone, PartialEq)]
pub struct CognitiveConfig {
    /// The run's settings.
    pub run: RunConfig,
    /// Items the memory window keeps across cycles.
    pub memory_window: usize,
}

impl CognitiveConfig {
    fn with_strategy(strategy: Strategy) -> CognitiveConfig {
        CognitiveConfig { run: RunConfig { strategy, ..RunConfig::default() }, memory_window: 50 }
    }
    /// Think, call tools, observe, think again.
    pub fn react() -> CognitiveConfig {
        CognitiveConfig::with_strategy(Strategy::React)
    }
    /// One model call, no tools.
    pub fn single_shot() -> CognitiveConfig {
        CognitiveConfig::with_strategy(Strategy::SingleShot)
    }
    /// A plan first, then each step.
    pub fn chain_of_thought() -> CognitiveConfig {
        CognitiveConfig::with_strategy(Strategy::ChainOfThought)
    }
    /// Instructions before the task.
    #[must_use]
    pub fn with_system_prompt(mut self, prompt: impl Into<String>) -> CognitiveConfig {
        self.run.system_prompt = Some(prompt.into());
        self
    }
    /// Most model calls per cycle.
    #[must_use]
    pub fn with_max_iterations(mut self, n: u32) -> CognitiveConfig {
        self.run.limits.max_turns = n.max(1);
        self
    }
    /// Critique each answer and go on while the goal is not achieved.
    #[must_use]
    pub fn with_reflection(mut self, on: bool) -> CognitiveConfig {
        self.run.reflect = on;
        self
    }
    /// Items of memory kept across cycles.
    #[must_use]
    pub fn with_memory_window(mut self, n: usize) -> CognitiveConfig {
        self.memory_window = n.max(1);
        self
    }
}

/// What the agent takes in for a cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Perception {
    /// The event: a task or a message.
    pub event: String,
    /// The memory window, as text.
    pub memory: String,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq)]
pub enum ThoughtStep {
    /// Reasoning in words.
    Reason(String),
    /// A tool to call.
    Call(ToolCall),
}

/// What the model decided in one think.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// Its steps, in order.
    pub steps: Vec<ThoughtStep>,
    /// The final answer, when it gave one.
    pub final_answer: Option<String>,
}

/// What a tool returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// The call's id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// What the model sees.
    pub content: String,
    /// Whether it is an error.
    pub is_error: bool,
}

/// What one act did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ExecutionResult {
    /// The observations, in call order.
    pub observations: Vec<Observation>,
    /// Set when the run ended (or waits for a person: see the run).
    pub outcome: Option<Outcome>,
}

/// The seed's loop. `run_cycle` drives the phases until the cycle's run
/// ends; each phase may be called alone to step it by hand.
#[async_trait::async_trait]
pub trait CognitiveLoop: Send {
    /// Starts a cycle on `event`, with the memory window as context.
    async fn perceive(&mut self, event: &str) -> Perception;
    /// Asks the model what to do.
    async fn think(&mut self, perception: &Perception) -> Plan;
    /// Does what the plan calls for.
    async fn act(&mut self, plan: &Plan) -> ExecutionResult;
    /// The critique the run fed back, if the cycle's answer was critiqued.
    async fn reflect(&mut self, result: &ExecutionResult) -> Option<Critique>;
    /// The memory window.
    fn memory_buffer(&self) -> &MemoryBuffer;
    /// The memory window, to change.
    fn memory_buffer_mut(&mut self) -> &mut MemoryBuffer;
    /// perceive → (think → act)* → reflect, until the run ends.
    async fn run_cycle(&mut self, event: &str) -> Outcome {
        let perception = self.perceive(event).await;
        loop {
            let plan = self.think(&perception).await;
            let result = self.act(&plan).await;
            if let Some(outcome) = result.outcome.clone() {
                let _ = self.reflect(&result).await;
                return outcome;
            }
        }
    }
}

/// A [`CognitiveLoop`] over a provider and the built-in tools.
pub struct ReactAgent {
    provider: Arc<dyn Provider>,
    tools: Arc<Toolbox>,
    config: CognitiveConfig,
    memory: MemoryBuffer,
    run: Option<AgentRun>,
    cycles: u64,
    clock: Box<dyn Fn() -> u64 + Send + Sync>,
}

impl ReactAgent {
    /// An agent; tools that change the world run without asking (set
    /// `config.run.approval` otherwise and drive [`AgentRun`] yourself).
    pub fn new(provider: Arc<dyn Provider>, tools: Arc<Toolbox>, mut config: CognitiveConfig) -> ReactAgent {
        if config.run.tools.is_empty() && config.run.strategy != Strategy::SingleShot {
            config.run.tools = tools.decls();
        }
        if config.run.approval == ApprovalPolicy::Ask {
            config.run.approval = ApprovalPolicy::Auto;
        }
        let memory = MemoryBuffer::new(config.memory_window);
        let started = std::time::Instant::now();
        let clock = Box::new(move || u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
        ReactAgent { provider, tools, config, memory, run: None, cycles: 0, clock }
    }

    /// The run of the current (or last) cycle.
    pub fn run(&self) -> Option<&AgentRun> {
        self.run.as_ref()
    }
}

#[async_trait::async_trait]
impl CognitiveLoop for ReactAgent {
    async fn perceive(&mut self, event: &str) -> Perception {
        let memory = self.memory.to_context_string();
        let task =
            if memory.is_empty() { event.to_owned() } else { format!("{event}\n\nWhat you remember:\n{memory}") };
        self.cycles += 1;
        self.run = Some(AgentRun::new(format!("cycle-{}", self.cycles), task, self.config.run.clone(), (self.clock)()));
        self.memory.push(MemoryKind::User, event);
        Perception { event: event.to_owned(), memory }
    }

    async fn think(&mut self, _perception: &Perception) -> Plan {
        let Some(run) = self.run.as_mut() else { return Plan::default() };
        // Model calls until one that leaves something to do or ends the run.
        loop {
            let Action::CallModel(request) = run.next((self.clock)()) else { break };
            match self.provider.chat(&request).await {
                Ok(reply) => {
                    let _ = run.on_model_reply(&reply, 0.0);
                }
                Err(e) => {
                    let _ = run.on_model_error(&e.to_string());
                }
            }
            if !matches!(run.next((self.clock)()), Action::CallModel(_)) {
                break;
            }
        }
        let mut plan = Plan::default();
        if let Some(Entry::Assistant { content, calls }) =
            run.entries.iter().rev().find(|e| matches!(e, Entry::Assistant { .. }))
        {
            if !content.is_empty() {
                plan.steps.push(ThoughtStep::Reason(content.clone()));
            }
            for id in calls {
                if let Some(c) = run.call(id) {
                    plan.steps.push(ThoughtStep::Call(ToolCall {
                        id: c.id.clone(),
                        name: c.tool.clone(),
                        arguments: c.arguments.clone(),
                    }));
                }
            }
        }
        if let Some(Outcome::Answer { text }) = &run.outcome {
            plan.final_answer = Some(text.clone());
        }
        plan
    }

    async fn act(&mut self, _plan: &Plan) -> ExecutionResult {
        let Some(run) = self.run.as_mut() else { return ExecutionResult::default() };
        let mut result = ExecutionResult::default();
        loop {
            match run.next((self.clock)()) {
                Action::ExecuteTools(batch) => {
                    for call in &batch {
                        let _ = run.started(&call.call_id, (self.clock)());
                    }
                    for call in batch {
                        let out = Arc::clone(&self.tools).run_async(call.clone()).await;
                        let _ = run.finished(&call.call_id, out, (self.clock)());
                        if let Some(c) = run.call(&call.call_id) {
                            let content = c.result.clone().unwrap_or_default();
                            self.memory.push(MemoryKind::Observation, format!("{}: {}", c.tool, content));
                            result.observations.push(Observation {
                                call_id: c.id.clone(),
                                tool: c.tool.clone(),
                                content,
                                is_error: c.is_error,
                            });
                        }
                    }
                }
                Action::CallModel(_) => return result,
                Action::Done(outcome) => {
                    let text = match &outcome {
                        Outcome::Answer { text } => text.clone(),
                        other => format!("{other:?}"),
                    };
                    self.memory.push(
                        if matches!(outcome, Outcome::Answer { .. }) {
                            MemoryKind::Response
                        } else {
                            MemoryKind::Event
                        },
                        text,
                    );
                    result.outcome = Some(outcome);
                    return result;
                }
                Action::AwaitApproval(_) | Action::Busy(_) => {
                    // This agent approves by its config; a pause here is a
                    // run that needs a person: stop the cycle, say why.
                    let outcome = Outcome::Stopped {
                        reason: StopReason::NeedsApproval,
                        detail: "the run waits for an approval this agent cannot give".into(),
                    };
                    result.outcome = Some(outcome);
                    return result;
                }
            }
        }
    }

    async fn reflect(&mut self, _result: &ExecutionResult) -> Option<Critique> {
        let run = self.run.as_ref()?;
        // The run feeds critiques back itself; the last one is reported.
        run.entries.iter().rev().find_map(|e| match e {
            Entry::Note { content } if content.starts_with("A critique of your answer") => Some(Critique {
                goal_achieved: false,
                what_went_wrong: content
                    .lines()
                    .nth(1)
                    .unwrap_or_default()
                    .trim_start_matches("What went wrong: ")
                    .to_owned(),
                next_step: content.lines().nth(2).unwrap_or_default().trim_start_matches("Next step: ").to_owned(),
            }),
            _ => None,
        })
    }

    fn memory_buffer(&self) -> &MemoryBuffer {
        &self.memory
    }

    fn memory_buffer_mut(&mut self) -> &mut MemoryBuffer {
        &mut self.memory
    }
}
