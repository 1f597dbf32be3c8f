//! Driving an [`AgentRun`] for real: the model through a `noesis_llm`
//! provider, the tools through a [`Toolbox`], the run handed to a
//! [`Checkpoint`] after every change and before the next step (a failed
//! checkpoint stops the drive: nothing runs that is not on record).
//! Read-only calls of a batch run concurrently on the blocking pool;
//! results are reported in call order.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use noesis_llm::{Budget, BudgetMeter, ChatResponse, PriceTable, Provider, Usage};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::builtin;
use crate::permission::Permissions;
use crate::run::{Action, AgentRun, Invocation, ToolOutput};
use crate::tool::ToolDecl;
use noesis_fs::Workspace;

/// A tool the host adds to the built-ins: what runs it, given the
/// arguments (already checked against its schema). Host tools are async
/// (a module run, a store query, a sub-agent); blocking work belongs on
/// the blocking pool.
pub type ToolFn = Arc<dyn Fn(Value) -> ToolFuture + Send + Sync>;

/// What a host tool returns.
pub type ToolFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ToolOutput> + Send>>;

/// What a tool's batch ends with (see [`Toolbox::with_batch_end`]): given
/// the results of that tool's calls in a batch, by call id and in call
/// order, once every call of the batch has ended, the results the run
/// takes in instead (as many, in the same order).
pub type BatchEndFn = Arc<dyn Fn(Vec<(String, ToolOutput)>) -> BatchEndFuture + Send + Sync>;

/// What a [`BatchEndFn`] returns.
pub type BatchEndFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Vec<ToolOutput>> + Send>>;

/// Tools that come from somewhere else and may change while a run goes on
/// (an MCP server's): the driver offers the model what [`ToolSource::decls`]
/// says now, and routes a call to the source that owns the tool.
pub trait ToolSource: Send + Sync {
    /// Its tools as they are now.
    fn decls(&self) -> Vec<ToolDecl>;
    /// Changes whenever [`ToolSource::decls`] may have changed.
    fn revision(&self) -> u64;
    /// Runs `tool` if it is one of this source's; `None` if it is not.
    fn call(&self, tool: &str, arguments: Value) -> Option<ToolFuture>;
}

/// The tools of a run: the built-ins over one workspace, and any the host
/// adds (a module runner, frame search, a sub-agent), and those of tool
/// sources (MCP servers). It is the tool
/// registry: [`Toolbox::decls`] gives each tool's name, description, JSON
/// Schema of its arguments and effects (read-only, writes files, runs
/// commands, network); the run checks arguments against the schema before
/// anything runs.
#[derive(Clone)]
pub struct Toolbox {
    workspace: Workspace,
    permissions: Permissions,
    extra: BTreeMap<String, (ToolDecl, ToolFn)>,
    batch_end: BTreeMap<String, BatchEndFn>,
    sources: Vec<Arc<dyn ToolSource>>,
    exec: Arc<Exec>,
}

/// How the toolbox's commands run and what leaves them: the run's sandbox
/// (made on first use, so a run that runs no command never probes the
/// machine) and the redaction of secret values from every result.
struct Exec {
    settings: noesis_sandbox::Settings,
    protected: Vec<std::path::PathBuf>,
    sandbox: std::sync::OnceLock<Result<Arc<noesis_sandbox::Sandbox>, noesis_sandbox::SandboxError>>,
    redactor: Arc<noesis_sandbox::Redactor>,
}

impl Exec {
    fn new(
        settings: noesis_sandbox::Settings,
        protected: Vec<std::path::PathBuf>,
        redactor: Arc<noesis_sandbox::Redactor>,
    ) -> Exec {
        Exec { settings, protected, sandbox: std::sync::OnceLock::new(), redactor }
    }
}

/// The redactor every toolbox starts with: this process's secret-like
/// variables.
fn process_redactor() -> Arc<noesis_sandbox::Redactor> {
    static R: std::sync::OnceLock<Arc<noesis_sandbox::Redactor>> = std::sync::OnceLock::new();
    Arc::clone(R.get_or_init(|| Arc::new(noesis_sandbox::Redactor::from_env(&[], &[]))))
}

impl std::fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolbox")
            .field("workspace", &self.workspace)
            .field("permissions", &self.permissions)
            .field("extra", &self.extra.keys().collect::<Vec<_>>())
            .field("sources", &self.sources.len())
            .finish()
    }
}

impl Toolbox {
    /// The tools over `workspace`; `run_command` runs only the commands
    /// `allowed_commands` admit, each as `--allow-command` does (its words,
    /// then any arguments: see [`Permissions::from_commands`]).
    pub fn new(workspace: Workspace, allowed_commands: Vec<String>) -> Toolbox {
        Toolbox::with_permissions(workspace, Permissions::from_commands(&allowed_commands))
    }

    /// The tools over `workspace`, checking before a built-in runs what
    /// `permissions` refuse whatever was decided (a command no operator
    /// rule admits or a rule denies; a denied or protected path, by its
    /// real path): the same permissions as the run's.
    pub fn with_permissions(workspace: Workspace, permissions: Permissions) -> Toolbox {
        Toolbox {
            workspace,
            permissions,
            extra: BTreeMap::new(),
            batch_end: BTreeMap::new(),
            sources: Vec::new(),
            exec: Arc::new(Exec::new(noesis_sandbox::Settings::default(), Vec::new(), process_redactor())),
        }
    }

    /// The permissions the built-ins check.
    pub fn permissions(&self) -> &Permissions {
        &self.permissions
    }

    /// The same tools with commands confined by these sandbox settings;
    /// `protected` are workspace paths no command may change.
    #[must_use]
    pub fn with_sandbox(mut self, settings: noesis_sandbox::Settings, protected: Vec<std::path::PathBuf>) -> Toolbox {
        self.exec = Arc::new(Exec::new(settings, protected, Arc::clone(&self.exec.redactor)));
        self
    }

    /// The same tools with results redacted by `redactor` (the configured
    /// provider keys and `[redact] values` besides the process's secrets).
    #[must_use]
    pub fn with_redactor(mut self, redactor: Arc<noesis_sandbox::Redactor>) -> Toolbox {
        self.exec = Arc::new(Exec::new(self.exec.settings.clone(), self.exec.protected.clone(), redactor));
        self
    }

    /// The sandbox settings commands run under.
    pub fn sandbox_settings(&self) -> &noesis_sandbox::Settings {
        &self.exec.settings
    }

    /// What redacts the results.
    pub fn redactor(&self) -> &Arc<noesis_sandbox::Redactor> {
        &self.exec.redactor
    }

    /// The run's sandbox, made on first use; an error says why commands
    /// cannot run here.
    pub fn sandbox(&self) -> Result<Arc<noesis_sandbox::Sandbox>, noesis_sandbox::SandboxError> {
        self.exec
            .sandbox
            .get_or_init(|| {
                // A program the operator allowed by its full path runs from
                // its installation, which must then be readable.
                let mut settings = self.exec.settings.clone();
                for program in self.permissions.command_programs() {
                    settings.read_extra.extend(noesis_sandbox::paths::program_root(&program));
                }
                noesis_sandbox::Sandbox::new(&settings, self.workspace.root(), &self.exec.protected).map(Arc::new)
            })
            .clone()
    }

    /// Adds a source of tools; its tools come after the built-ins and the
    /// host's, and a name taken by those is not offered from it.
    #[must_use]
    pub fn with_source(mut self, source: Arc<dyn ToolSource>) -> Toolbox {
        self.sources.push(source);
        self
    }

    /// The sources' tools as they are now, without those whose names are
    /// taken by a built-in or host tool.
    pub fn source_decls(&self) -> Vec<ToolDecl> {
        let fixed = builtin::names();
        let mut out: Vec<ToolDecl> = Vec::new();
        for source in &self.sources {
            for d in source.decls() {
                if !fixed.contains(&d.name.as_str())
                    && !self.extra.contains_key(&d.name)
                    && !out.iter().any(|o| o.name == d.name)
                {
                    out.push(d);
                }
            }
        }
        out
    }

    /// Changes whenever a source's tools may have changed.
    pub fn revision(&self) -> u64 {
        self.sources.iter().fold(0u64, |acc, s| acc.wrapping_add(s.revision()))
    }

    /// Adds (or replaces) a host tool.
    #[must_use]
    pub fn with_tool(mut self, decl: ToolDecl, run: ToolFn) -> Toolbox {
        self.extra.insert(decl.name.clone(), (decl, run));
        self
    }

    /// Runs `end` over the results of `tool`'s calls of a batch once every
    /// call of the batch has ended, before the run takes them in: what
    /// concurrent calls did is judged together (sub-agents' changes
    /// compared before any is merged). Those calls' results are recorded
    /// after it, the batch's other calls' as they end.
    #[must_use]
    pub fn with_batch_end(mut self, tool: &str, end: BatchEndFn) -> Toolbox {
        self.batch_end.insert(tool.to_owned(), end);
        self
    }

    /// The workspace the tools are confined to.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// Every tool's declaration: the built-ins, then the host's.
    pub fn decls(&self) -> Vec<ToolDecl> {
        let mut all = builtin::file_tools();
        all.extend(builtin::search_tools());
        all.push(builtin::command_tool());
        all.retain(|d| !self.extra.contains_key(&d.name));
        all.extend(self.extra.values().map(|(d, _)| d.clone()));
        all.extend(self.source_decls());
        all
    }

    /// Runs one call: a host tool on the async runtime, a built-in on the
    /// blocking pool. The result's secret values are redacted.
    pub async fn run_async(self: Arc<Self>, call: Invocation) -> ToolOutput {
        self.run_within(call, &CallContext::default()).await
    }

    /// [`Toolbox::run_async`] for a driver that may cancel the call and
    /// gives it a time limit: a command is killed, whole tree, before the
    /// limit or on cancel, so nothing of it outlives the call.
    pub async fn run_within(self: Arc<Self>, call: Invocation, ctx: &CallContext) -> ToolOutput {
        let redactor = Arc::clone(&self.exec.redactor);
        let mut out = self.run_unredacted(call, ctx).await;
        if let std::borrow::Cow::Owned(clean) = redactor.redact(&out.content) {
            out.content = clean;
        }
        out
    }

    async fn run_unredacted(self: Arc<Self>, call: Invocation, ctx: &CallContext) -> ToolOutput {
        if let Some((_, run)) = self.extra.get(&call.tool) {
            return run(call.arguments).await;
        }
        if !builtin::names().contains(&call.tool.as_str()) {
            for source in &self.sources {
                if let Some(running) = source.call(&call.tool, call.arguments.clone()) {
                    return running.await;
                }
            }
        }
        let ctx = ctx.clone();
        tokio::task::spawn_blocking(move || self.run_with(&call, &ctx))
            .await
            .unwrap_or_else(|e| ToolOutput::error(format!("the tool failed: {e}")))
    }

    /// Runs one built-in call (blocking); a host tool is refused here (it
    /// runs through [`Toolbox::run_async`]). The result is not redacted.
    pub fn run(&self, call: &Invocation) -> ToolOutput {
        self.run_with(call, &CallContext::default())
    }

    fn run_with(&self, call: &Invocation, ctx: &CallContext) -> ToolOutput {
        if self.extra.contains_key(&call.tool) {
            return ToolOutput::error(format!("`{}` runs on the async runtime (Toolbox::run_async)", call.tool));
        }
        if call.tool == "run_command" {
            let sandbox = self.sandbox();
            let how = builtin::CommandRun { sandbox: &sandbox, cancel: ctx.cancel.as_ref(), limit: ctx.limit };
            return builtin::run_command(&self.workspace, &self.permissions, &call.arguments, &how);
        }
        if let Err(why) = self.check_path(call) {
            return ToolOutput::error(why);
        }
        builtin::run_file_tool(&self.workspace, &call.tool, &call.arguments)
            .or_else(|| builtin::run_search_tool(&self.workspace, &call.tool, &call.arguments))
            .unwrap_or_else(|| ToolOutput::error(format!("no tool `{}` in this toolbox", call.tool)))
    }
}

impl Toolbox {
    /// The path a file tool touches, as it really is (symlinks followed),
    /// checked against the rules: a symlink must not lead a write around a
    /// protected path or a deny rule. A path that cannot be confined is
    /// left to the tool, which refuses it.
    fn check_path(&self, call: &Invocation) -> Result<(), String> {
        const PATH_TOOLS: [&str; 5] = ["read_file", "list_dir", "write_file", "edit_file", "grep"];
        if !PATH_TOOLS.contains(&call.tool.as_str()) {
            return Ok(());
        }
        let given = call.arguments.get("path").and_then(Value::as_str).filter(|p| !p.is_empty()).unwrap_or(".");
        match self.workspace.confine(given) {
            Ok(real) => self.permissions.check_path(&call.tool, &self.workspace.shown(&real)),
            Err(_) => Ok(()),
        }
    }
}

/// What a driver tells a call besides its arguments.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// Cancels the call (a command is killed).
    pub cancel: Option<CancellationToken>,
    /// The most time the call has: a command's own timeout is cut to fit.
    pub limit: std::time::Duration,
}

impl Default for CallContext {
    fn default() -> CallContext {
        CallContext { cancel: None, limit: TOOL_TIMEOUT }
    }
}

/// Chooses the provider of each model call by its role: `plan`, `think`,
/// `reflect` (from [`AgentRun::role`]) or `sub_agent` (see [`AsRole`]).
pub trait ModelRouter: Send + Sync {
    /// The provider for a call of `role` sending `request`, and why (kept
    /// with the reply); an error is why no provider may answer, and stops
    /// the run (resumable).
    fn route(&self, role: &str, request: &noesis_llm::ChatRequest) -> Result<(Arc<dyn Provider>, String), String>;
}

/// A router that answers every call as one role (a sub-agent's calls are
/// `sub_agent` calls, whatever their phase).
pub struct AsRole {
    role: &'static str,
    router: Arc<dyn ModelRouter>,
}

impl AsRole {
    /// `router`, always asked for `role`.
    pub fn new(role: &'static str, router: Arc<dyn ModelRouter>) -> AsRole {
        AsRole { role, router }
    }
}

impl ModelRouter for AsRole {
    fn route(&self, _: &str, request: &noesis_llm::ChatRequest) -> Result<(Arc<dyn Provider>, String), String> {
        self.router.route(self.role, request)
    }
}

/// Where the driver keeps the run after every change. Implemented for any
/// `FnMut(&AgentRun)` (a checkpoint that cannot fail).
#[async_trait::async_trait]
pub trait Checkpoint: Send {
    /// Stores `run`; an error stops the drive before the next step.
    async fn save(&mut self, run: &AgentRun) -> Result<(), String>;
}

#[async_trait::async_trait]
impl<F: FnMut(&AgentRun) + Send> Checkpoint for F {
    async fn save(&mut self, run: &AgentRun) -> Result<(), String> {
        self(run);
        Ok(())
    }
}

/// A step of a drive, as it happens, for a live view.
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    /// A model request goes out (0-based turn).
    ModelCall {
        /// The turn.
        turn: u32,
    },
    /// Its reply came back.
    ModelReply {
        /// The turn.
        turn: u32,
        /// Tool calls it asked for.
        tool_calls: usize,
        /// How long it took.
        ms: u64,
    },
    /// A tool call starts.
    ToolStart {
        /// The call.
        call_id: String,
        /// The tool.
        tool: String,
        /// Its arguments.
        arguments: Value,
    },
    /// A tool call ended.
    ToolEnd {
        /// The call.
        call_id: String,
        /// The tool.
        tool: String,
        /// Whether it failed.
        is_error: bool,
        /// How long it took.
        ms: u64,
    },
    /// A tool source's tools changed; the run now offers this many tools.
    ToolsChanged {
        /// Tools offered now.
        tools: usize,
    },
    /// A piece of the reply's text as the model writes it (only when the
    /// driver streams).
    TextDelta {
        /// The turn.
        turn: u32,
        /// The piece.
        text: String,
    },
}

/// The drive could not go on; the run is as last checkpointed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DriveError {
    /// The run could not be stored.
    #[error("the run could not be stored: {0}")]
    Checkpoint(String),
}

/// What a drive needs besides the run: the model, the tools, a clock in
/// milliseconds, a price per reply (dollars), a cancellation signal and an
/// observer for live progress.
pub struct Driver<'a> {
    /// The model.
    pub provider: &'a dyn Provider,
    /// The tools.
    pub tools: Arc<Toolbox>,
    /// Milliseconds (any epoch, monotonic enough for budgets).
    pub now: &'a (dyn Fn() -> u64 + Send + Sync),
    /// Dollars for a reply.
    pub price: &'a (dyn Fn(&ChatResponse) -> f64 + Send + Sync),
    /// When cancelled, the run stops as cancelled (resumable): a model
    /// request out is abandoned; a tool batch is let finish first, so its
    /// results are on record.
    pub cancel: Option<CancellationToken>,
    /// Sees each step as it happens.
    pub observe: Option<&'a (dyn Fn(&Progress) + Send + Sync)>,
    /// Where each step is published as an event, on the run's topic
    /// ([`crate::events::run_topic`], see [`crate::events::progress_event`]):
    /// the one path the command line's live view, the server's stream and
    /// the dashboard read. Published with backpressure: a subscriber that
    /// does not read holds the run up, none is skipped.
    pub events: Option<crate::events::EventBus>,
    /// How long one tool call may take before its result is a timeout
    /// error (the model is told; a blocking built-in finishes in the
    /// background, its result dropped).
    pub tool_timeout: std::time::Duration,
    /// Most calls of one batch running at once (read-only batches).
    pub max_concurrent_tools: usize,
    /// Chooses the provider of each call by its role; `None`: `provider`
    /// answers every call.
    pub router: Option<Arc<dyn ModelRouter>>,
    /// The run tree's meter: every model call reserves its estimate here
    /// before it goes out and settles after. `None`: a meter of the run's
    /// own limits, charged with what the run has spent (so a resumed run
    /// goes on where it was), when it has a token or cost limit.
    pub meter: Option<Arc<BudgetMeter>>,
    /// Prices for reservations (and for the tools that run models: a
    /// sub-agent, `run_module`); the built-in table when `None`.
    pub prices: Option<Arc<PriceTable>>,
    /// Ask the model for its reply as a stream and publish the text as it
    /// comes ([`Progress::TextDelta`]); the reply the run takes in is the
    /// same whole reply either way.
    pub stream: bool,
}

/// The budget a drive runs under, visible to the tools it runs (see
/// [`tree_budget`]): a sub-agent or a module run started by a tool spends
/// from the same meter, at the same prices, as the run that called it.
#[derive(Clone, Debug)]
pub struct TreeBudget {
    /// The meter of the whole run tree, when it has limits.
    pub meter: Option<Arc<BudgetMeter>>,
    /// The prices the tree's calls are charged at.
    pub prices: Arc<PriceTable>,
}

tokio::task_local! {
    static TREE: TreeBudget;
    static CALL: String;
}

/// The id of the call whose tool is running now (`None` outside a tool
/// call of a [`Driver`]): a tool whose calls run side by side (a
/// sub-agent) tells its own call from its siblings by it.
pub fn current_call_id() -> Option<String> {
    CALL.try_with(Clone::clone).ok()
}

/// The budget of the drive whose tool is running now (`None` outside a
/// tool call of a [`Driver`]). Tools that call models pass its meter on,
/// so a run tree has one meter however deep it goes.
pub fn tree_budget() -> Option<TreeBudget> {
    TREE.try_with(Clone::clone).ok()
}

/// A reply's usage in the meter's terms.
fn spent_usage(u: &crate::run::RunUsage) -> Usage {
    Usage { input_tokens: u.input_tokens, output_tokens: u.output_tokens }
}

/// [`Driver::tool_timeout`] unless the driver says otherwise.
pub const TOOL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

impl<'a> Driver<'a> {
    /// A driver with no cancellation, no observer, a zero clock and free
    /// replies.
    pub fn new(provider: &'a dyn Provider, tools: Arc<Toolbox>) -> Driver<'a> {
        Driver {
            provider,
            tools,
            now: &|| 0,
            price: &|_| 0.0,
            cancel: None,
            observe: None,
            events: None,
            tool_timeout: TOOL_TIMEOUT,
            max_concurrent_tools: 8,
            router: None,
            meter: None,
            prices: None,
            stream: false,
        }
    }

    /// The meter this drive charges: the driver's, or one of the run's own
    /// limits charged with what it spent already.
    fn meter_for(&self, run: &AgentRun) -> Option<Arc<BudgetMeter>> {
        if let Some(m) = &self.meter {
            return Some(Arc::clone(m));
        }
        let l = &run.config.limits;
        let budget = Budget { max_tokens: l.max_tokens, max_cost_usd: l.max_cost_usd };
        (budget != Budget::default()).then(|| {
            let m = BudgetMeter::new(budget);
            m.charge(spent_usage(&run.usage), Some(run.usage.cost_usd));
            Arc::new(m)
        })
    }

    async fn note(&self, run_id: &str, p: Progress) {
        // The steps the bus, the live view and the HTTP stream get are the
        // run span's events too, by the same kinds (no arguments: texts are
        // opt-in), so a trace lists the run's steps as they were published.
        match &p {
            Progress::ModelCall { turn } => tracing::info!(name: "model_call", turn),
            Progress::ModelReply { turn, tool_calls, ms } => tracing::info!(name: "model_reply", turn, tool_calls, ms),
            Progress::ToolStart { call_id, tool, .. } => {
                tracing::info!(name: "tool_call", call_id = call_id.as_str(), tool = tool.as_str());
            }
            Progress::ToolEnd { call_id, tool, is_error, ms } => {
                tracing::info!(name: "tool_result", call_id = call_id.as_str(), tool = tool.as_str(), is_error, ms);
            }
            Progress::ToolsChanged { tools } => tracing::info!(name: "tools_changed", tools),
            // Texts are opt-in in traces; the reply's span has the whole.
            Progress::TextDelta { .. } => {}
        }
        if let Some(observe) = self.observe {
            observe(&p);
        }
        if let Some(bus) = &self.events {
            // A stopped bus has nobody to tell; the run goes on.
            let _ = bus.publish(crate::events::progress_event(&crate::events::run_topic(run_id), run_id, &p)).await;
        }
    }

    /// One model call: whole, or streamed with each piece of text published
    /// as it arrives (the pieces go through a channel because the sink
    /// cannot wait on subscribers; all are published before the reply is
    /// taken in).
    async fn ask(
        &self,
        provider: &dyn Provider,
        request: &noesis_llm::ChatRequest,
        run_id: &str,
        turn: u32,
        stream: bool,
    ) -> Result<ChatResponse, noesis_llm::ProviderError> {
        if !stream {
            return provider.chat(request).await;
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        let sink = move |text: &str| {
            // The receiver lives until the reply is in.
            let _ = tx.send(text.to_owned());
        };
        let asked = provider.chat_stream(request, &sink);
        tokio::pin!(asked);
        loop {
            tokio::select! {
                biased;
                Some(text) = rx.recv() => {
                    if !text.is_empty() {
                        self.note(run_id, Progress::TextDelta { turn, text }).await;
                    }
                }
                reply = &mut asked => {
                    while let Ok(text) = rx.try_recv() {
                        if !text.is_empty() {
                            self.note(run_id, Progress::TextDelta { turn, text }).await;
                        }
                    }
                    return reply;
                }
            }
        }
    }

    fn cancelled(&self) -> bool {
        self.cancel.as_ref().is_some_and(CancellationToken::is_cancelled)
    }

    /// Drives `run` until it is done or waits for a person (the returned
    /// action says which), checkpointing after every change. The drive is
    /// an `invoke_agent` span; each model call a `chat {model}` span and each
    /// tool call an `execute_tool {tool}` span under it (GenAI conventions).
    pub async fn drive(&self, run: &mut AgentRun, checkpoint: &mut dyn Checkpoint) -> Result<Action, DriveError> {
        use tracing::Instrument;
        let span = tracing::info_span!(
            "invoke_agent",
            otel.name = "invoke_agent noesis",
            otel.kind = "internal",
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = "noesis",
            gen_ai.conversation.id = %run.id,
            gen_ai.provider.name = self.provider.name(),
            gen_ai.request.model = self.provider.model(),
        );
        if let Some(ids) = noesis_trace::ids(&span) {
            run.note_trace(ids);
        }
        self.drive_inner(run, checkpoint).instrument(span).await
    }

    async fn drive_inner(&self, run: &mut AgentRun, checkpoint: &mut dyn Checkpoint) -> Result<Action, DriveError> {
        use tracing::Instrument;
        // The step of the last state stored: asking the model changes only
        // `awaiting_reply`, which resume clears, so a state already stored
        // at this step need not be stored again before the request.
        let mut stored: Option<u64> = None;
        let run_id = run.id.clone();
        // What the sources offered when this drive began; compared again
        // only when their revision moves, so a drive without sources pays
        // one fold per model call.
        let mut revision = self.tools.revision();
        let mut sourced = self.tools.source_decls();
        let tree = TreeBudget {
            meter: self.meter_for(run),
            prices: self.prices.clone().unwrap_or_else(|| Arc::new(PriceTable::builtin())),
        };
        loop {
            if self.cancelled() {
                run.cancel();
            }
            match run.next((self.now)()) {
                Action::CallModel(mut request) => {
                    if self.tools.revision() != revision {
                        revision = self.tools.revision();
                        let current = self.tools.source_decls();
                        if run.update_tools(&sourced, &current) {
                            self.note(&run_id, Progress::ToolsChanged { tools: run.config.tools.len() }).await;
                            match run.next((self.now)()) {
                                Action::CallModel(again) => request = again,
                                // Cannot happen: a note changes no stop condition.
                                _ => continue,
                            }
                        }
                        sourced = current;
                    }
                    if stored != Some(run.step) {
                        checkpoint.save(run).await.map_err(DriveError::Checkpoint)?;
                    }
                    let turn = run.usage.turns;
                    let routed = match &self.router {
                        Some(router) => match router.route(run.role(), &request) {
                            Ok(r) => Some(r),
                            Err(why) => {
                                if let Err(e) = run.on_model_error(&format!("no route: {why}")) {
                                    run.stop_for_driver(e.to_string());
                                }
                                continue;
                            }
                        },
                        None => None,
                    };
                    let provider: &dyn Provider = routed.as_ref().map_or(self.provider, |(p, _)| p.as_ref());
                    let price_now = tree.prices.price(provider.model());
                    let reserved = match &tree.meter {
                        Some(m) => Some(m.reserve_request_waiting(&mut request, price_now).await),
                        None => None,
                    };
                    let reservation = match reserved {
                        None => None,
                        Some(Ok(r)) => Some(r),
                        Some(Err(refused)) => {
                            run.stop_over_budget(refused.cost, refused.message);
                            continue;
                        }
                    };
                    self.note(&run_id, Progress::ModelCall { turn }).await;
                    let began = Instant::now();
                    // Planning and critique are steps of their own: a `plan`
                    // or `reflect` span with the model call under it.
                    let phase = match run.role() {
                        role @ ("plan" | "reflect" | "compact") => tracing::info_span!(
                            "phase",
                            otel.name = %format!("{role} noesis"),
                            otel.kind = "internal",
                            gen_ai.operation.name = role,
                            gen_ai.agent.name = "noesis",
                        ),
                        _ => tracing::Span::none(),
                    };
                    let chat = phase.in_scope(|| noesis_llm::ChatSpan::start(provider, &request, Some(run.role())));
                    let chat_ids = chat.ids();
                    // A cancelled call drops the span unfinished, which
                    // records it as cancelled.
                    // A compaction's summary is for the model, not the person
                    // watching the answer being written.
                    let stream = self.stream && run.role() != "compact";
                    let asked = self.ask(provider, &request, &run_id, turn, stream);
                    let reply = match &self.cancel {
                        Some(token) => tokio::select! {
                            r = chat.call(asked) => Some(r),
                            () = token.cancelled() => None,
                        },
                        None => Some(chat.call(asked).await),
                    };
                    drop(phase);
                    let answered_by = match &reply {
                        Some(Ok(r)) => {
                            r.served_by.clone().unwrap_or_else(|| format!("{}/{}", provider.name(), r.model))
                        }
                        _ => String::new(),
                    };
                    let reported = match reply {
                        None => {
                            run.cancel();
                            Ok(())
                        }
                        Some(Ok(reply)) => {
                            self.note(
                                &run_id,
                                Progress::ModelReply {
                                    turn,
                                    tool_calls: reply.tool_calls.len(),
                                    ms: u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX),
                                },
                            )
                            .await;
                            let cost = (self.price)(&reply);
                            if let Some(r) = reservation {
                                match reply.usage {
                                    // Unpriced models are charged as unknown,
                                    // never as free; the driver's own pricing
                                    // may know models the table does not.
                                    Some(u) => {
                                        let known = cost > 0.0 || tree.prices.price(&reply.model).is_some();
                                        r.settle(u, known.then_some(cost));
                                    }
                                    None => r.settle_at_estimate(),
                                }
                            }
                            let reported = run.on_model_reply(&reply, cost);
                            if let Some(ids) = chat_ids {
                                run.note_reply_span(ids);
                            }
                            reported
                        }
                        Some(Err(e)) if e.kind == noesis_llm::ErrorKind::ContextOverflow => {
                            // Left out by rule and asked again, or stopped.
                            run.on_context_overflow().map(|_| ())
                        }
                        Some(Err(e)) => run.on_model_error(&e.to_string()),
                    };
                    if let Err(e) = reported {
                        // Only a driver bug gets here; the run says what.
                        run.stop_for_driver(e.to_string());
                    } else if let Some((_, why)) = routed
                        && !answered_by.is_empty()
                    {
                        run.note_route(format!("{why}; answered by {answered_by}"));
                    }
                }
                Action::ExecuteTools(batch) => {
                    for call in &batch {
                        let _ = run.started(&call.call_id, (self.now)());
                    }
                    // On record as running before anything runs: a crash
                    // now makes them interrupted, never re-run.
                    checkpoint.save(run).await.map_err(DriveError::Checkpoint)?;
                    stored = Some(run.step);
                    let permits = Arc::new(tokio::sync::Semaphore::new(self.max_concurrent_tools.max(1)));
                    let mut starts = Vec::new();
                    let handles: Vec<_> = batch
                        .into_iter()
                        .map(|call| {
                            starts.push(Progress::ToolStart {
                                call_id: call.call_id.clone(),
                                tool: call.tool.clone(),
                                arguments: call.arguments.clone(),
                            });
                            let tools = Arc::clone(&self.tools);
                            let began = Instant::now();
                            let meta = (call.call_id.clone(), call.tool.clone());
                            let (permits, limit) = (Arc::clone(&permits), self.tool_timeout);
                            // A command is cut to end (whole tree) a little
                            // before the driver would stop waiting for it.
                            let ctx = CallContext {
                                cancel: self.cancel.clone(),
                                limit: limit
                                    .saturating_sub(std::time::Duration::from_secs(2))
                                    .max(std::time::Duration::from_secs(1)),
                            };
                            // The MCP fields are filled by the MCP client
                            // when the tool is a server's.
                            let span = tracing::info_span!(
                                "execute_tool",
                                otel.name = %format!("execute_tool {}", call.tool),
                                otel.kind = "internal",
                                gen_ai.operation.name = "execute_tool",
                                gen_ai.tool.name = %call.tool,
                                gen_ai.tool.call.id = %call.call_id,
                                gen_ai.tool.call.arguments = tracing::field::Empty,
                                gen_ai.tool.call.result = tracing::field::Empty,
                                mcp.method.name = tracing::field::Empty,
                                mcp.protocol.version = tracing::field::Empty,
                                network.transport = tracing::field::Empty,
                                noesis.mcp.server = tracing::field::Empty,
                                error.type = tracing::field::Empty,
                            );
                            let ids = noesis_trace::ids(&span);
                            let capture = noesis_trace::capturing_on(&span);
                            if capture {
                                span.record(
                                    noesis_trace::attr::TOOL_CALL_ARGUMENTS,
                                    call.arguments.to_string().as_str(),
                                );
                            }
                            let call_id = call.call_id.clone();
                            let task = tokio::spawn(
                                TREE.scope(
                                    tree.clone(),
                                    CALL.scope(
                                        call_id,
                                        async move {
                                            let _permit = permits.acquire_owned().await;
                                            let name = call.tool.clone();
                                            let out = tokio::time::timeout(limit, tools.run_within(call, &ctx))
                                                .await
                                                .unwrap_or_else(|_| {
                                                    ToolOutput::error(format!(
                                                        "`{name}` timed out after {} s",
                                                        limit.as_secs()
                                                    ))
                                                });
                                            let span = tracing::Span::current();
                                            if out.is_error {
                                                span.record("error.type", error_type(&out));
                                            }
                                            if capture {
                                                span.record(noesis_trace::attr::TOOL_CALL_RESULT, out.content.as_str());
                                            }
                                            out
                                        }
                                        .instrument(span),
                                    ),
                                ),
                            );
                            (meta, began, ids, task)
                        })
                        .collect();
                    // Told once every call of the batch is under way; each
                    // one's end comes after.
                    for start in starts {
                        self.note(&run_id, start).await;
                    }
                    // Calls of a tool with a batch end wait for it; the
                    // others are recorded as they end.
                    let mut held: BTreeMap<String, Vec<Ended>> = BTreeMap::new();
                    for ((id, tool), began, ids, handle) in handles {
                        let output =
                            handle.await.unwrap_or_else(|e| ToolOutput::error(format!("the tool failed: {e}")));
                        let ended = Ended { id, tool, began, ids, output };
                        if self.tools.batch_end.contains_key(&ended.tool) {
                            held.entry(ended.tool.clone()).or_default().push(ended);
                            continue;
                        }
                        self.take_in(run, ended, checkpoint).await?;
                        stored = Some(run.step);
                    }
                    for (tool, ended) in held {
                        let results = ended.iter().map(|e| (e.id.clone(), e.output.clone())).collect();
                        let mut judged = self.tools.batch_end[&tool](results).await.into_iter();
                        for mut e in ended {
                            // A hook that returns too few leaves the rest as
                            // they were; what it returns is redacted like
                            // any tool's result (it may quote files).
                            if let Some(mut output) = judged.next() {
                                if let std::borrow::Cow::Owned(clean) = self.tools.redactor().redact(&output.content) {
                                    output.content = clean;
                                }
                                e.output = output;
                            }
                            self.take_in(run, e, checkpoint).await?;
                            stored = Some(run.step);
                        }
                    }
                }
                other @ (Action::AwaitApproval(_) | Action::Done(_) | Action::Busy(_)) => {
                    checkpoint.save(run).await.map_err(DriveError::Checkpoint)?;
                    return Ok(other);
                }
            }
        }
    }
}

/// A call of a batch that has ended, not yet taken in by the run.
struct Ended {
    id: String,
    tool: String,
    began: Instant,
    ids: Option<noesis_trace::SpanIds>,
    output: ToolOutput,
}

impl Driver<'_> {
    /// Tells the observers a call ended, hands its result to the run and
    /// stores the run.
    async fn take_in(&self, run: &mut AgentRun, e: Ended, checkpoint: &mut dyn Checkpoint) -> Result<(), DriveError> {
        let run_id = run.id.clone();
        self.note(
            &run_id,
            Progress::ToolEnd {
                call_id: e.id.clone(),
                tool: e.tool,
                is_error: e.output.is_error,
                ms: u64::try_from(e.began.elapsed().as_millis()).unwrap_or(u64::MAX),
            },
        )
        .await;
        if let Some(ids) = e.ids {
            run.note_call_span(&e.id, ids);
        }
        let _ = run.finished(&e.id, e.output, (self.now)());
        checkpoint.save(run).await.map_err(DriveError::Checkpoint)
    }
}

/// The `error.type` of a failed call: an MCP server's call says how it
/// ended (timeout, unavailable, …); any other is a tool error.
fn error_type(out: &ToolOutput) -> &'static str {
    out.evidence
        .iter()
        .find_map(|e| match e {
            crate::run::ToolEvidence::Mcp { outcome, .. } => Some(outcome.as_str()),
            _ => None,
        })
        .unwrap_or("tool_error")
}

/// Drives `run` with `provider` and `tools` (see [`Driver`]); `now` is the
/// clock in milliseconds, `price` prices a reply in dollars, `checkpoint`
/// sees the run after each change.
pub async fn drive(
    run: &mut AgentRun,
    provider: &dyn Provider,
    tools: &Arc<Toolbox>,
    now: &(dyn Fn() -> u64 + Send + Sync),
    price: &(dyn Fn(&ChatResponse) -> f64 + Send + Sync),
    checkpoint: &mut dyn Checkpoint,
) -> Result<Action, DriveError> {
    let driver = Driver { now, price, ..Driver::new(provider, Arc::clone(tools)) };
    driver.drive(run, checkpoint).await
}
