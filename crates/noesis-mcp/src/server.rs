//! The Model Context Protocol (MCP) server over a line transport (`noesis
//! mcp`): Cognitive Modules as tools, resources and prompts, and agent runs
//! as the `agent` tool, over the [`Modules`] and [`Agents`] the embedding
//! program provides.
//!
//! JSON-RPC 2.0, one message per line. [`Mcp::serve`] reads lines from a
//! channel and writes response lines to another, so the binary owns stdin
//! and stdout and nothing here touches a terminal.
//!
//! | method | answer |
//! |---|---|
//! | `initialize` | the client's protocol revision if it is one of [`PROTOCOL_VERSIONS`], else the newest; `serverInfo` and the `tools`, `resources` and `prompts` capabilities |
//! | `ping` | `{}` |
//! | `tools/list` | `run` (module, input, args, provider, model), `list`, `info` (module) |
//! | `tools/call` | `content` (the result as JSON text) and `structuredContent` (the result itself); for `run` the result is the v2.2 envelope and `isError` is true when it is a failure |
//! | `resources/list` | one `module://NAME` per module that loads |
//! | `resources/read` | `{manifest, prompt, schema}` of the module as JSON text |
//! | `prompts/list` | one prompt per module that loads, its arguments the top-level properties of the module's input schema |
//! | `prompts/get` | the module's prompt rendered with the arguments, as one user message |
//!
//! Errors are JSON-RPC codes: a line that is not JSON `-32700` (the server
//! reads on), a message that is not a request `-32600`, an unknown method
//! `-32601`, bad params `-32602` with the field named (an unknown prompt
//! and arguments that do not fit its module included), an unknown resource
//! `-32002`. Tool failures are results with `isError`, never protocol
//! errors, so the model calling the tool sees them; from revision
//! 2025-11-25 on that includes bad tool arguments (an E1001–E1003 envelope
//! naming the field), as the specification asks.
//!
//! Requests are answered concurrently (a long run does not hold up `ping`);
//! `notifications/cancelled` cancels a request in flight and suppresses its
//! answer. When the input ends, requests in flight are still answered (a
//! client may close its end of the pipe and go on reading); what has not
//! finished within the grace period is cancelled and answered with an E2002
//! envelope, and [`Mcp::serve`] returns.
//!
//! ## Why not `rmcp`'s server
//!
//! `rmcp` 3.11, whose client [`crate::client`] uses, has a server as well
//! (feature `server`). It speaks the four revisions and could serve the
//! tools, resources and prompts, but it cannot keep these behaviours, which
//! tests pin:
//! - a line that is not JSON is answered `-32700` and the server reads on;
//!   rmcp's stdio transport drops it unanswered (rust-sdk issue 938);
//! - a batch (a JSON array of messages, JSON-RPC 2.0 and MCP up to
//!   2025-03-26) is answered message by message; rmcp reads an array as
//!   one malformed message;
//! - params of the wrong shape are `-32602` naming the field (`arguments`,
//!   `protocolVersion`, `cursor`); rmcp answers every message it cannot
//!   deserialise with a bare `-32600` "Invalid request" and a null id;
//! - an id still being answered is refused (`-32600`); rmcp does not look;
//! - after the end of input, requests in flight go on for the grace the
//!   operator chose (`noesis mcp --grace`, 10 s by default) and the rest are
//!   cancelled *and answered* with an E2002 envelope; rmcp drains for a
//!   fixed 5 s, then cancels its handlers and sends nothing for them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use std::time::Instant;

use futures_util::future::join_all;
use noesis_agent::events::Event;
use noesis_modules::{ErrorCode, Failure};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use host::{AgentTask, Agents, Listed, ModuleCall, Modules};
use tools::{AgentCall, BadArgument, agent_call, agent_tool, known_fields, module_name, run_request, tool_definitions};

mod host;
mod prompts;
pub mod stdio;
#[cfg(test)]
mod tests;
mod tools;

/// How long requests in flight may go on after the input ends, by default.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// The protocol revisions this server speaks, newest first.
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;
const RESOURCE_NOT_FOUND: i64 = -32002;

const RESOURCE_SCHEME: &str = "module://";

/// Told to the client at `initialize`; clients may put it in the model's
/// system prompt.
const INSTRUCTIONS: &str = "noesis runs Cognitive Modules: each module turns a JSON input into a checked JSON result. \
Call `list` for the modules, `info` for a module's input schema, and `run` to run one. Every run returns a v2.2 \
envelope: {ok: true, data, meta} or {ok: false, error: {code, message}, meta}; the error code says what to fix \
(E1xxx: the input, E4006: an unknown module).";

/// An MCP server over [`Modules`] (and [`Agents`]).
///
/// Share it as an `Arc`: [`Mcp::serve`] answers requests on tasks of their
/// own.
pub struct Mcp {
    modules: Arc<dyn Modules>,
    /// The negotiated revision; the newest until `initialize` says otherwise.
    version: Mutex<&'static str>,
    /// Requests being answered, by their id as JSON text (so `1` and `"1"`
    /// stay apart), with the token that cancels each.
    running: Mutex<HashMap<String, CancellationToken>>,
    /// Parent of every request's token; cancelled when the grace after the
    /// end of input is over.
    shutdown: CancellationToken,
    grace: Duration,
    /// Agent runs, when the `agent` tool is offered.
    agents: Option<Arc<dyn Agents>>,
    /// Where notifications (progress) go while [`Mcp::serve`] runs.
    notify: Mutex<Option<mpsc::UnboundedSender<String>>>,
}

impl std::fmt::Debug for Mcp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mcp").field("version", &self.version()).finish_non_exhaustive()
    }
}

/// A JSON-RPC error.
#[derive(Debug)]
struct RpcError {
    code: i64,
    message: String,
    data: Option<Value>,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError { code, message: message.into(), data: None }
    }

    fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(INVALID_PARAMS, message)
    }
}

/// A request to answer after the line that carried it has been read.
struct Request {
    id: Value,
    key: String,
    method: String,
    params: Value,
    cancel: CancellationToken,
}

/// What reading one line gave: answers ready now and requests still to
/// answer.
struct Accepted {
    ready: Vec<Value>,
    later: Vec<Request>,
    batch: bool,
}

impl Mcp {
    /// A server over `modules`, with [`DEFAULT_GRACE`].
    pub fn new(modules: Arc<dyn Modules>) -> Arc<Mcp> {
        Mcp::with_grace(modules, DEFAULT_GRACE)
    }

    /// A server over `modules` whose requests may go on for `grace` after
    /// the input ends.
    pub fn with_grace(modules: Arc<dyn Modules>, grace: Duration) -> Arc<Mcp> {
        Arc::new(Mcp {
            modules,
            version: Mutex::new(PROTOCOL_VERSIONS[0]),
            running: Mutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
            grace,
            agents: None,
            notify: Mutex::new(None),
        })
    }

    /// A server that also offers the `agent` tool: a task delegated to an
    /// agent run in `agents`, its steps sent as progress notifications when
    /// the call carries a `progressToken`.
    pub fn with_agents(modules: Arc<dyn Modules>, grace: Duration, agents: Arc<dyn Agents>) -> Arc<Mcp> {
        let mut mcp = Mcp::with_grace(modules, grace);
        if let Some(m) = Arc::get_mut(&mut mcp) {
            m.agents = Some(agents);
        }
        mcp
    }

    /// The protocol revision in use.
    pub fn version(&self) -> &'static str {
        *self.version.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers lines from `input` on `output` (one JSON text per item, no
    /// newline) until `input` closes; then lets what is still running
    /// finish for the grace period, cancels the rest, and returns when
    /// every answer has been handed to `output`.
    pub async fn serve(self: Arc<Self>, mut input: mpsc::Receiver<Vec<u8>>, output: mpsc::UnboundedSender<String>) {
        *self.notify.lock().unwrap_or_else(PoisonError::into_inner) = Some(output.clone());
        let mut tasks = JoinSet::new();
        while let Some(line) = input.recv().await {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            // Accepted here, in arrival order, so a cancellation always
            // finds the request it names and `initialize` is settled before
            // the next line.
            let accepted = self.accept_line(&line);
            if accepted.later.is_empty() {
                if let Some(answer) = accepted.into_answer(Vec::new()) {
                    let _ = output.send(answer.to_string());
                }
            } else {
                let (me, out) = (Arc::clone(&self), output.clone());
                tasks.spawn(async move {
                    if let Some(answer) = me.finish(accepted).await {
                        let _ = out.send(answer.to_string());
                    }
                });
            }
            while tasks.try_join_next().is_some() {}
        }
        let drained = tokio::time::timeout(self.grace, async { while tasks.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            // Agent runs are stopped by the server, not by their clients:
            // the next session resumes them.
            if let Some(agents) = &self.agents {
                agents.shutdown().await;
            }
            // Runs end promptly once cancelled (the provider call is dropped).
            self.shutdown.cancel();
            while tasks.join_next().await.is_some() {}
        }
    }

    /// Answers one line (a message or a batch), waiting for everything it
    /// asked; `None` when nothing is to be sent back (notifications).
    pub async fn handle_line(self: &Arc<Self>, line: &str) -> Option<Value> {
        let accepted = self.accept_line(line.as_bytes());
        self.finish(accepted).await
    }

    fn accept_line(&self, line: &[u8]) -> Accepted {
        let message: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => {
                let error = RpcError::new(PARSE_ERROR, format!("the line is not JSON: {e}"));
                return Accepted { ready: vec![error_response(&Value::Null, error)], later: Vec::new(), batch: false };
            }
        };
        let (messages, batch) = match message {
            Value::Array(items) if items.is_empty() => {
                let error = RpcError::new(INVALID_REQUEST, "an empty batch");
                return Accepted { ready: vec![error_response(&Value::Null, error)], later: Vec::new(), batch: false };
            }
            Value::Array(items) => (items, true),
            one => (vec![one], false),
        };
        let mut accepted = Accepted { ready: Vec::new(), later: Vec::new(), batch };
        for m in messages {
            match self.accept(m) {
                Ok(Some(request)) => accepted.later.push(request),
                Ok(None) => {}
                Err(answer) => accepted.ready.push(answer),
            }
        }
        accepted
    }

    async fn finish(self: &Arc<Self>, accepted: Accepted) -> Option<Value> {
        let Accepted { ready, later, batch } = accepted;
        let answers = join_all(later.into_iter().map(|r| self.answer(r))).await;
        Accepted { ready, later: Vec::new(), batch }.into_answer(answers.into_iter().flatten().collect())
    }

    /// Classifies one message. Notifications are acted on here; requests
    /// that answer at once (`initialize`, `ping`) and malformed messages
    /// give `Err(answer)`; the rest are registered as running.
    fn accept(&self, message: Value) -> Result<Option<Request>, Value> {
        let Value::Object(mut m) = message else {
            return Err(error_response(
                &Value::Null,
                RpcError::new(INVALID_REQUEST, "a message must be a JSON object"),
            ));
        };
        let id = m.remove("id");
        let id_ok = matches!(id, Some(Value::String(_) | Value::Number(_)));
        let reply_id = if id_ok { id.clone().unwrap_or(Value::Null) } else { Value::Null };
        if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return Err(error_response(&reply_id, RpcError::new(INVALID_REQUEST, "`jsonrpc` must be \"2.0\"")));
        }
        let method = match m.remove("method") {
            Some(Value::String(s)) => s,
            Some(_) => {
                return Err(error_response(&reply_id, RpcError::new(INVALID_REQUEST, "`method` must be a string")));
            }
            // A response to a request of ours; this server sends none.
            None if m.contains_key("result") || m.contains_key("error") => return Ok(None),
            None => return Err(error_response(&reply_id, RpcError::new(INVALID_REQUEST, "a message needs `method`"))),
        };
        let params = m.remove("params").unwrap_or(Value::Null);
        let Some(id) = id else {
            self.notification(&method, &params);
            return Ok(None);
        };
        if !id_ok {
            return Err(error_response(
                &Value::Null,
                RpcError::new(INVALID_REQUEST, "`id` must be a string or a number"),
            ));
        }
        match method.as_str() {
            "initialize" => return Err(respond(&id, self.initialize(&params))),
            "ping" => return Err(respond(&id, Ok(json!({})))),
            _ => {}
        }
        let key = id.to_string();
        let cancel = self.shutdown.child_token();
        {
            let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
            if running.contains_key(&key) {
                return Err(error_response(
                    &id,
                    RpcError::new(
                        INVALID_REQUEST,
                        format!("request {key} is still being answered; ids must be unique"),
                    ),
                ));
            }
            running.insert(key.clone(), cancel.clone());
        }
        Ok(Some(Request { id, key, method, params, cancel }))
    }

    fn notification(&self, method: &str, params: &Value) {
        if method == "notifications/cancelled"
            && let Some(id) = params.get("requestId")
            && let Some(token) = self.running.lock().unwrap_or_else(PoisonError::into_inner).get(&id.to_string())
        {
            token.cancel();
        }
        // Anything else (`notifications/initialized`, progress, roots) needs
        // nothing from this server; unknown notifications are ignored, as
        // JSON-RPC says.
    }

    async fn answer(self: &Arc<Self>, request: Request) -> Option<Value> {
        let result = match request.method.as_str() {
            "tools/list" => list_params(&request.params).map(|()| self.tools()),
            "tools/call" => self.call_tool(&request.params, request.cancel.clone()).await,
            "resources/list" => match list_params(&request.params) {
                Ok(()) => self.resources().await,
                Err(e) => Err(e),
            },
            "resources/templates/list" => list_params(&request.params).map(|()| json!({"resourceTemplates": []})),
            "resources/read" => self.read_resource(&request.params).await,
            "prompts/list" => match list_params(&request.params) {
                Ok(()) => self.prompts().await,
                Err(e) => Err(e),
            },
            "prompts/get" => self.get_prompt(&request.params).await,
            other => Err(RpcError::new(METHOD_NOT_FOUND, format!("unknown method `{other}`"))),
        };
        self.running.lock().unwrap_or_else(PoisonError::into_inner).remove(&request.key);
        // The client said it no longer wants this answer (a shutdown also
        // cancels, but the answer may still be read).
        if request.cancel.is_cancelled() && !self.shutdown.is_cancelled() {
            return None;
        }
        Some(respond(&request.id, result))
    }

    fn initialize(&self, params: &Value) -> Result<Value, RpcError> {
        let asked = match params.get("protocolVersion") {
            Some(Value::String(v)) => v.as_str(),
            Some(_) => return Err(RpcError::invalid_params("`protocolVersion` must be a string")),
            None => return Err(RpcError::invalid_params("`protocolVersion` is missing")),
        };
        let version = PROTOCOL_VERSIONS.iter().find(|v| **v == asked).copied().unwrap_or(PROTOCOL_VERSIONS[0]);
        *self.version.lock().unwrap_or_else(PoisonError::into_inner) = version;
        let mut server = json!({"name": "noesis", "version": env!("CARGO_PKG_VERSION")});
        if at_least(version, "2025-06-18") {
            server["title"] = json!("noesis: Cognitive Modules");
        }
        Ok(json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": {"listChanged": false},
                "resources": {"subscribe": false, "listChanged": false},
                "prompts": {"listChanged": false},
            },
            "serverInfo": server,
            "instructions": INSTRUCTIONS,
        }))
    }

    fn tools(&self) -> Value {
        let version = self.version();
        let structured = at_least(version, "2025-06-18");
        let annotated = at_least(version, "2025-03-26");
        let mut all = tool_definitions();
        if self.agents.is_some() {
            all.push(agent_tool());
        }
        let tools: Vec<Value> = all
            .into_iter()
            .map(|mut t| {
                let Some(obj) = t.as_object_mut() else { return t };
                if !structured {
                    obj.remove("title");
                    obj.remove("outputSchema");
                }
                if !annotated {
                    obj.remove("annotations");
                }
                t
            })
            .collect();
        json!({"tools": tools})
    }

    async fn call_tool(self: &Arc<Self>, params: &Value, cancel: CancellationToken) -> Result<Value, RpcError> {
        let started = Instant::now();
        let params = params_object(params)?;
        let name = match params.get("name") {
            Some(Value::String(s)) => s.as_str(),
            Some(_) => return Err(RpcError::invalid_params("`name` must be a string")),
            None => return Err(RpcError::invalid_params("`name` is missing: which tool to call")),
        };
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(a)) => a.clone(),
            Some(_) => return Err(RpcError::invalid_params("`arguments` must be an object")),
        };
        let version = self.version();
        let bad = |b: BadArgument| -> Result<Value, RpcError> {
            if at_least(version, "2025-11-25") {
                Ok(tool_result(self.modules.refuse(Failure::new(b.code, b.message), started), true, version))
            } else {
                Err(RpcError::invalid_params(b.message))
            }
        };
        match name {
            "run" | "compose" => {
                let request = match run_request(arguments) {
                    Ok(r) => r,
                    Err(b) => return bad(b),
                };
                // `compose` is the same run with every step listed in `meta.steps`.
                let envelope = if name == "compose" {
                    self.modules.compose(request, cancel).await
                } else {
                    self.modules.run(request, cancel).await
                };
                let envelope = mcp_hints(envelope);
                let failed = envelope.get("ok") != Some(&Value::Bool(true));
                Ok(tool_result(envelope, failed, version))
            }
            "list" => {
                if let Err(b) = known_fields(&arguments, &[]) {
                    return bad(b);
                }
                let modules = Arc::clone(&self.modules);
                let listed = blocking(move || modules.list()).await?;
                let summaries: Vec<Value> = listed.into_iter().map(|m| m.summary).collect();
                Ok(tool_result(json!({"modules": summaries}), false, version))
            }
            "info" => {
                let module = match known_fields(&arguments, &["module"]).and_then(|()| module_name(&arguments)) {
                    Ok(m) => m,
                    Err(b) => return bad(b),
                };
                let modules = Arc::clone(&self.modules);
                Ok(match blocking(move || modules.info(&module)).await? {
                    Ok(info) => tool_result(info, false, version),
                    Err(envelope) => tool_result(mcp_hints(envelope), true, version),
                })
            }
            "agent" if self.agents.is_some() => {
                let progress = params.get("_meta").and_then(|m| m.get("progressToken")).cloned();
                match agent_call(arguments) {
                    Ok(call) => Ok(self.delegate(call, progress, &cancel, version).await),
                    Err(b) => bad(b),
                }
            }
            other => Err(RpcError::invalid_params(format!(
                "unknown tool `{other}` (tools: run, compose, list, info{})",
                if self.agents.is_some() { ", agent" } else { "" }
            ))),
        }
    }

    /// Runs `call` as an agent run to its end (a new one, or an earlier one
    /// followed, resumed here when a session that ended left it); each step
    /// is a progress notification when the client gave a token.
    async fn delegate(
        &self,
        call: AgentCall,
        progress: Option<Value>,
        cancel: &CancellationToken,
        version: &str,
    ) -> Value {
        let Some(agents) = &self.agents else { return tool_result(json!({"error": "no agents"}), true, version) };
        let id = match call {
            AgentCall::Start(task) => match agents.start(task).await {
                Ok(id) => id,
                Err(message) => {
                    let failure = Failure::new(ErrorCode::E1001, message);
                    return tool_result(self.modules.refuse(failure, Instant::now()), true, version);
                }
            },
            AgentCall::Follow(id) => match agents.follow(&id).await {
                Ok(()) => id,
                Err(message) => return tool_result(json!({"run_id": id, "error": message}), true, version),
            },
        };
        let notify = self.notify.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut count = 0u64;
        let mut each = |e: &Event| {
            let (Some(token), Some(out)) = (&progress, &notify) else { return };
            count += 1;
            let message = match e.data.get("tool").and_then(Value::as_str) {
                Some(tool) => format!("{} {tool}", e.kind),
                None => e.kind.clone(),
            };
            let note = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                              "params": {"progressToken": token, "progress": count, "message": message}});
            let _ = out.send(note.to_string());
        };
        match agents.wait(&id, &mut each, cancel).await {
            Ok(run) => {
                let status = run.status();
                let answer = match &run.outcome {
                    Some(noesis_agent::Outcome::Answer { text }) => Some(text.clone()),
                    _ => None,
                };
                let result = json!({"run_id": run.id, "status": status, "answer": answer,
                                    "outcome": run.outcome, "usage": run.usage});
                tool_result(result, status != "done", version)
            }
            Err(e) => tool_result(json!({"run_id": id, "error": e}), true, version),
        }
    }

    async fn resources(&self) -> Result<Value, RpcError> {
        let modules = Arc::clone(&self.modules);
        let modules = blocking(move || modules.list()).await?;
        // A module that does not load has nothing to read; `list` shows why.
        let resources: Vec<Value> = modules
            .into_iter()
            .filter(|m| m.valid)
            .map(|m| {
                let mut r = json!({
                    "uri": format!("{RESOURCE_SCHEME}{}", m.name),
                    "name": m.name,
                    "mimeType": "application/json",
                });
                if let Some(d) = m.responsibility {
                    r["description"] = json!(d);
                }
                r
            })
            .collect();
        Ok(json!({"resources": resources}))
    }

    /// One prompt per module that loads, so an editor lists the modules
    /// as slash commands.
    async fn prompts(&self) -> Result<Value, RpcError> {
        let modules = Arc::clone(&self.modules);
        let prompts = blocking(move || {
            modules
                .list()
                .into_iter()
                .filter(|m| m.valid)
                // A module that stopped loading since it was listed is left out, as `resources/list` does.
                .filter_map(|m| modules.module(&m.name).ok().map(|module| (module, m.responsibility)))
                .map(|(module, description)| prompts::listing(&module, description.as_deref()))
                .collect::<Vec<Value>>()
        })
        .await?;
        Ok(json!({"prompts": prompts}))
    }

    async fn get_prompt(&self, params: &Value) -> Result<Value, RpcError> {
        let params = params_object(params)?;
        let name = match params.get("name") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(RpcError::invalid_params("`name` must be a string")),
            None => return Err(RpcError::invalid_params("`name` is missing: which prompt (prompts/list names them)")),
        };
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(a)) => a.clone(),
            Some(_) => return Err(RpcError::invalid_params("`arguments` must be an object of strings")),
        };
        let modules = Arc::clone(&self.modules);
        let found = blocking(move || {
            let description = modules.list().into_iter().find(|m| m.name == name).and_then(|m| m.responsibility);
            modules.module(&name).map(|m| (m, description)).map_err(|envelope| (name, envelope))
        })
        .await?;
        let (module, description) = match found {
            Ok(found) => found,
            Err((name, envelope)) => {
                let message = envelope.pointer("/error/message").and_then(Value::as_str).unwrap_or("cannot be read");
                // The specification makes an unknown prompt invalid params.
                if envelope.pointer("/error/code").and_then(Value::as_str) == Some(ErrorCode::E4006.as_str()) {
                    return Err(RpcError::invalid_params(format!(
                        "no prompt `{name}` (prompts/list names them): {message}"
                    )));
                }
                return Err(RpcError::new(INTERNAL_ERROR, message));
            }
        };
        let input = prompts::input(&module, &arguments).map_err(RpcError::invalid_params)?;
        Ok(prompts::render(&module, &input, description.as_deref()))
    }

    async fn read_resource(&self, params: &Value) -> Result<Value, RpcError> {
        let params = params_object(params)?;
        let uri = match params.get("uri") {
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err(RpcError::invalid_params("`uri` must be a string")),
            None => return Err(RpcError::invalid_params("`uri` is missing")),
        };
        let not_found =
            |why: String| RpcError { code: RESOURCE_NOT_FOUND, message: why, data: Some(json!({"uri": uri})) };
        let Some(name) = uri.strip_prefix(RESOURCE_SCHEME) else {
            return Err(not_found(format!("no resource `{uri}`: resources are module://NAME")));
        };
        let (modules, owned) = (Arc::clone(&self.modules), name.to_owned());
        let read = blocking(move || modules.module(&owned).and_then(|m| modules.info(&owned).map(|i| (m, i)))).await?;
        let (module, info) = match read {
            Ok(found) => found,
            Err(envelope) => {
                let message = envelope.pointer("/error/message").and_then(Value::as_str).unwrap_or("cannot be read");
                if envelope.pointer("/error/code").and_then(Value::as_str) == Some(ErrorCode::E4006.as_str()) {
                    return Err(not_found(format!("no resource `{uri}`: {message}")));
                }
                return Err(RpcError::new(INTERNAL_ERROR, message));
            }
        };
        let body = json!({"manifest": info, "prompt": module.prompt, "schema": module.schema});
        Ok(json!({"contents": [{"uri": uri, "mimeType": "application/json", "text": body.to_string()}]}))
    }
}

impl Accepted {
    /// The line's answer: one message, or an array for a batch; `None`
    /// when there is nothing to send.
    fn into_answer(self, more: Vec<Value>) -> Option<Value> {
        let mut all = self.ready;
        all.extend(more);
        if self.batch { (!all.is_empty()).then_some(Value::Array(all)) } else { all.into_iter().next() }
    }
}

/// The service's hint for an unknown module names an HTTP route; an MCP
/// client finds the modules with the `list` tool.
fn mcp_hints(mut envelope: Value) -> Value {
    if envelope.pointer("/error/code").and_then(Value::as_str) == Some(ErrorCode::E4006.as_str())
        && let Some(error) = envelope.get_mut("error").and_then(Value::as_object_mut)
    {
        error.insert("suggestion".into(), json!("call the `list` tool for the modules this server has"));
    }
    envelope
}

/// Whether `version` is `minimum` or newer (both from [`PROTOCOL_VERSIONS`]).
fn at_least(version: &str, minimum: &str) -> bool {
    let rank = |v: &str| PROTOCOL_VERSIONS.iter().position(|p| *p == v).unwrap_or(usize::MAX);
    rank(version) <= rank(minimum)
}

/// Runs a blocking service call (module loading reads files and compiles
/// schemas) off the async workers, so `ping` stays prompt.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, RpcError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| RpcError::new(INTERNAL_ERROR, format!("the server failed: {e}")))
}

fn params_object(params: &Value) -> Result<&Map<String, Value>, RpcError> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    match params {
        Value::Object(m) => Ok(m),
        Value::Null => Ok(EMPTY.get_or_init(Map::new)),
        _ => Err(RpcError::invalid_params("`params` must be an object")),
    }
}

/// The params of a `*/list` request: this server never hands out cursors,
/// so any cursor is one it does not know.
fn list_params(params: &Value) -> Result<(), RpcError> {
    match params_object(params)?.get("cursor") {
        None | Some(Value::Null) => Ok(()),
        Some(_) => Err(RpcError::invalid_params("`cursor` is not one this server gave out (it does not paginate)")),
    }
}

/// A `tools/call` result: the value as JSON text for every client, and as
/// `structuredContent` for those that read it (2025-06-18 on).
fn tool_result(value: Value, is_error: bool, version: &str) -> Value {
    let mut result = json!({
        "content": [{"type": "text", "text": value.to_string()}],
        "isError": is_error,
    });
    if at_least(version, "2025-06-18") {
        result["structuredContent"] = value;
    }
    result
}

fn respond(id: &Value, result: Result<Value, RpcError>) -> Value {
    match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => error_response(id, e),
    }
}

fn error_response(id: &Value, e: RpcError) -> Value {
    let mut error = json!({"code": e.code, "message": e.message});
    if let Some(data) = e.data {
        error["data"] = data;
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}
