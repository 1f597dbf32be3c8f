//! The Model Context Protocol (MCP) over a line transport (`noesis mcp`).
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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::join_all;
use noesis_modules::{ErrorCode, Failure};
use noesis_runtime::{CancellationToken, Instant};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::service::{RunRequest, Service, refuse};

mod prompts;

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

/// An MCP server over a [`Service`].
///
/// Share it as an `Arc`: [`Mcp::serve`] answers requests on tasks of their
/// own.
pub struct Mcp {
    service: Arc<Service>,
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
    agents: Option<Arc<crate::agents::AgentRuns>>,
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

/// A bad tool argument: the field, what is wrong, and the envelope code it
/// becomes when reported as a tool result.
struct BadArgument {
    code: ErrorCode,
    message: String,
}

impl Mcp {
    /// A server over `service`, with [`DEFAULT_GRACE`].
    pub fn new(service: Arc<Service>) -> Arc<Mcp> {
        Mcp::with_grace(service, DEFAULT_GRACE)
    }

    /// A server over `service` whose requests may go on for `grace` after
    /// the input ends.
    pub fn with_grace(service: Arc<Service>, grace: Duration) -> Arc<Mcp> {
        Arc::new(Mcp {
            service,
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
    pub fn with_agents(service: Arc<Service>, grace: Duration, agents: Arc<crate::agents::AgentRuns>) -> Arc<Mcp> {
        let mut mcp = Mcp::with_grace(service, grace);
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
                Ok(tool_result(refuse(Failure::new(b.code, b.message), started), true, version))
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
                    self.service.compose(request, None, Some(cancel)).await
                } else {
                    self.service.run(request, None, Some(cancel)).await
                };
                let envelope = mcp_hints(envelope);
                let failed = envelope.get("ok") != Some(&Value::Bool(true));
                Ok(tool_result(envelope, failed, version))
            }
            "list" => {
                if let Err(b) = known_fields(&arguments, &[]) {
                    return bad(b);
                }
                let service = Arc::clone(&self.service);
                let modules = blocking(move || service.list()).await?;
                Ok(tool_result(json!({"modules": modules}), false, version))
            }
            "info" => {
                let module = match known_fields(&arguments, &["module"]).and_then(|()| module_name(&arguments)) {
                    Ok(m) => m,
                    Err(b) => return bad(b),
                };
                let service = Arc::clone(&self.service);
                Ok(match blocking(move || service.info(&module)).await? {
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
            AgentCall::Start(request) => match agents.start(*request).await {
                Ok(id) => id,
                Err((_, message)) => {
                    let failure = Failure::new(ErrorCode::E1001, message);
                    return tool_result(refuse(failure, Instant::now()), true, version);
                }
            },
            AgentCall::Follow(id) => match agents.follow(&id).await {
                Ok(()) => id,
                Err((_, message)) => return tool_result(json!({"run_id": id, "error": message}), true, version),
            },
        };
        let notify = self.notify.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let mut count = 0u64;
        let each = |e: &crate::agents::RunEvent| {
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
        match agents.wait(&id, each, cancel).await {
            Ok(run) => {
                let status = crate::agents::status_of(&run);
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
        let service = Arc::clone(&self.service);
        let modules = blocking(move || service.list()).await?;
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
        let service = Arc::clone(&self.service);
        let prompts = blocking(move || {
            service
                .list()
                .into_iter()
                .filter(|m| m.valid)
                // A module that stopped loading since it was listed is left out, as `resources/list` does.
                .filter_map(|m| service.module(&m.name).ok().map(|module| (module, m.responsibility)))
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
        let service = Arc::clone(&self.service);
        let found = blocking(move || {
            let description = service.list().into_iter().find(|m| m.name == name).and_then(|m| m.responsibility);
            service.module(&name).map(|m| (m, description)).map_err(|envelope| (name, envelope))
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
        let (service, owned) = (Arc::clone(&self.service), name.to_owned());
        let read = blocking(move || service.module(&owned).and_then(|m| service.info(&owned).map(|i| (m, i)))).await?;
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

fn known_fields(arguments: &Map<String, Value>, fields: &[&str]) -> Result<(), BadArgument> {
    match arguments.keys().find(|k| !fields.contains(&k.as_str())) {
        None => Ok(()),
        Some(unknown) => Err(BadArgument {
            code: ErrorCode::E1001,
            message: if fields.is_empty() {
                format!("unknown argument `{unknown}`: this tool takes none")
            } else {
                format!("unknown argument `{unknown}` (arguments: {})", fields.join(", "))
            },
        }),
    }
}

fn module_name(arguments: &Map<String, Value>) -> Result<String, BadArgument> {
    match arguments.get("module") {
        Some(Value::String(s)) => Ok(s.clone()),
        None | Some(Value::Null) => Err(BadArgument {
            code: ErrorCode::E1002,
            message: "`module` is missing: a module name (the `list` tool names them)".into(),
        }),
        Some(_) => Err(BadArgument { code: ErrorCode::E1003, message: "`module` must be a string".into() }),
    }
}

const RUN_FIELDS: &[&str] = &["module", "input", "args", "provider", "model"];

fn run_request(mut arguments: Map<String, Value>) -> Result<RunRequest, BadArgument> {
    known_fields(&arguments, RUN_FIELDS)?;
    let module = module_name(&arguments)?;
    let input = match arguments.remove("input") {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v),
        Some(_) => {
            return Err(BadArgument { code: ErrorCode::E1001, message: "`input` must be a JSON object".into() });
        }
    };
    let mut text = |field: &'static str| match arguments.remove(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(BadArgument { code: ErrorCode::E1003, message: format!("`{field}` must be a string") }),
    };
    let (args, provider, model) = (text("args")?, text("provider")?, text("model")?);
    Ok(RunRequest { module, input, args, provider, model })
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

/// The tools, as the newest revision describes them; [`Mcp::tools`] drops
/// what older revisions do not know.
/// What the `agent` tool is asked: a new run, or an earlier one to follow.
enum AgentCall {
    Start(Box<crate::agents::AgentRequest>),
    Follow(String),
}

/// The `agent` tool's arguments: `run_id` alone, or a new run's request.
fn agent_call(arguments: Map<String, Value>) -> Result<AgentCall, BadArgument> {
    let Some(id) = arguments.get("run_id") else {
        return agent_request(arguments).map(|r| AgentCall::Start(Box::new(r)));
    };
    known_fields(&arguments, &["run_id"]).map_err(|b| BadArgument {
        message: format!("{} (`run_id` follows an earlier run and takes nothing else)", b.message),
        ..b
    })?;
    match id {
        Value::String(id) if !id.trim().is_empty() => Ok(AgentCall::Follow(id.clone())),
        _ => Err(BadArgument { code: ErrorCode::E1003, message: "`run_id` must be a run's id".into() }),
    }
}

/// The `agent` tool's request: a task, how calls that change anything are
/// decided (no person can be asked over MCP), the tools and a turn limit.
fn agent_request(mut arguments: Map<String, Value>) -> Result<crate::agents::AgentRequest, BadArgument> {
    known_fields(&arguments, &["task", "approve", "tools", "max_turns"])?;
    let task = match arguments.remove("task") {
        Some(Value::String(t)) if !t.trim().is_empty() => t,
        Some(Value::String(_)) | None => {
            return Err(BadArgument {
                code: ErrorCode::E1002,
                message: "`task` is missing: what should the agent do?".into(),
            });
        }
        Some(_) => return Err(BadArgument { code: ErrorCode::E1003, message: "`task` must be a string".into() }),
    };
    let approve = match arguments.remove("approve") {
        None => "never".to_owned(),
        Some(Value::String(a)) if a == "auto" || a == "never" => a,
        Some(_) => {
            return Err(BadArgument {
                code: ErrorCode::E1003,
                message: "`approve` must be \"auto\" or \"never\": over MCP no person can be asked (POST /agents/runs can wait for one)".into(),
            });
        }
    };
    let tools = match arguments.remove("tools") {
        None => Vec::new(),
        Some(v) => serde_json::from_value(v).map_err(|_| BadArgument {
            code: ErrorCode::E1003,
            message: "`tools` must be a list of tool names".into(),
        })?,
    };
    let max_turns = match arguments.remove("max_turns") {
        None => None,
        Some(v) => Some(serde_json::from_value(v).map_err(|_| BadArgument {
            code: ErrorCode::E1003,
            message: "`max_turns` must be a whole number".into(),
        })?),
    };
    Ok(crate::agents::AgentRequest {
        task,
        approve: Some(approve),
        tools,
        limits: crate::agents::RequestLimits { max_turns, ..Default::default() },
        ..Default::default()
    })
}

fn agent_tool() -> Value {
    json!({
        "name": "agent",
        "title": "Delegate a task to an agent",
        "description": "Runs a noesis agent on a task: it reads, searches and edits the server's workspace, runs allowed commands and modules, and answers. Calls that change anything run only with approve=auto, and only when the server's operator allows it (`noesis mcp --approve auto`); otherwise they are denied and the agent is told. Returns {run_id, status, answer, outcome, usage}; with a progressToken each step is a progress notification. With run_id instead of a task it follows an earlier run (one a previous session left is resumed here).",
        "inputSchema": {
            "type": "object",
            "properties": {
                "task": {"type": "string", "description": "What the agent should do"},
                "approve": {"enum": ["auto", "never"], "description": "Whether calls that change anything may run"},
                "tools": {"type": "array", "items": {"type": "string"}, "description": "Offer only these tools"},
                "max_turns": {"type": "integer", "minimum": 1, "description": "Most model calls"},
                "run_id": {"type": "string", "description": "Instead of a task: follow this earlier run to its end, resuming it if a session that ended left it unfinished"},
            },
            "additionalProperties": false,
        },
        "annotations": {"readOnlyHint": false, "destructiveHint": true, "openWorldHint": true},
    })
}

fn tool_definitions() -> Vec<Value> {
    let envelope = json!({
        "type": "object",
        "properties": {
            "ok": {"type": "boolean"},
            "data": {"type": "object"},
            "error": {
                "type": "object",
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
                "required": ["code", "message"],
            },
            "meta": {"type": "object"},
        },
        "required": ["ok", "meta"],
    });
    let text = |d: &str| json!({"type": "string", "description": d});
    let run_input = json!({
        "type": "object",
        "properties": {
            "module": text("A module name (the `list` tool names them)"),
            "input": {"type": "object", "description": "The module's input, matching its input schema"},
            "args": text("Argument text for $ARGUMENTS; also the input's `query` when the module declares one and it is absent"),
            "provider": text("A provider name, instead of the server's default"),
            "model": text("A model name, instead of the provider's default"),
        },
        "required": ["module"],
        "additionalProperties": false,
    });
    vec![
        json!({
            "name": "run",
            "title": "Run a module",
            "description": "Run a Cognitive Module on an input. Returns its v2.2 envelope: {ok: true, data, meta} with the module's checked result, or {ok: false, error: {code, message}, meta}. `info` gives a module's input schema.",
            "inputSchema": run_input,
            "outputSchema": envelope,
            "annotations": {"readOnlyHint": true, "openWorldHint": true},
        }),
        json!({
            "name": "compose",
            "title": "Run a module and trace its composition",
            "description": "Like `run`, and the envelope's meta.steps lists every step the module's @call directives and composition ran: module, depth, parent step, how it came to run, timing and outcome (ok, failed, skipped with the reason, timed out, fell back).",
            "inputSchema": run_input.clone(),
            "outputSchema": envelope.clone(),
            "annotations": {"readOnlyHint": true, "openWorldHint": true},
        }),
        json!({
            "name": "list",
            "title": "List modules",
            "description": "The modules this server runs: name, version, tier, responsibility, and whether each loads.",
            "inputSchema": {"type": "object", "properties": {}, "additionalProperties": false},
            "outputSchema": {
                "type": "object",
                "properties": {
                    "modules": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": {"type": "string"},
                                "version": {"type": "string"},
                                "tier": {"type": "string"},
                                "responsibility": {"type": "string"},
                                "valid": {"type": "boolean"},
                            },
                            "required": ["name", "valid"],
                        },
                    },
                },
                "required": ["modules"],
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false},
        }),
        json!({
            "name": "info",
            "title": "Describe a module",
            "description": "A module's manifest, rules and schemas: input_schema is what `run` takes as `input`, data_schema what a successful run returns as `data`.",
            "inputSchema": {
                "type": "object",
                "properties": {"module": text("A module name (the `list` tool names them)")},
                "required": ["module"],
                "additionalProperties": false,
            },
            "outputSchema": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "version": {"type": "string"},
                    "responsibility": {"type": "string"},
                    "input_schema": {"type": ["object", "null"]},
                    "data_schema": {"type": ["object", "null"]},
                },
                "required": ["name", "version"],
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false},
        }),
    ]
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use noesis_llm::{EndpointConfig, Provider, TestModel, Wire as Dialect};
    use noesis_modules::Module;
    use noesis_modules::search::SearchPath;
    use noesis_testkit::{FakeServer, Reply};
    use serde_json::{Value, json};
    use tokio::sync::mpsc;

    use super::{Mcp, PROTOCOL_VERSIONS};
    use crate::service::{ProviderSource, Service, SourceError};

    /// The test model; `slow` is an OpenAI-style server that answers after
    /// a minute.
    struct Source(Option<String>);

    impl ProviderSource for Source {
        fn provider(&self, name: Option<&str>, _: Option<&str>, _: &Module) -> Result<Arc<dyn Provider>, SourceError> {
            match (name, &self.0) {
                (None | Some("test"), _) => Ok(Arc::new(TestModel)),
                (Some("slow"), Some(url)) => Dialect::OpenAi
                    .connect(EndpointConfig::new("slow", url, "m"))
                    .map_err(|e| SourceError::Unavailable(e.to_string())),
                (Some(other), _) => Err(format!("unknown provider `{other}`").into()),
            }
        }
    }

    fn server() -> Arc<Mcp> {
        Mcp::new(Arc::new(Service::new(SearchPath::default(), Arc::new(Source(None)))))
    }

    fn slow_server(fake: &FakeServer, grace: Duration) -> Arc<Mcp> {
        let source = Source(Some(fake.base_url()));
        Mcp::with_grace(Arc::new(Service::new(SearchPath::default(), Arc::new(source))), grace)
    }

    fn slow_fake() -> FakeServer {
        let reply = || Reply::Delay(Duration::from_secs(60), Box::new(Reply::Chat("{}".into())));
        FakeServer::start(vec![reply(), reply()]).unwrap()
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
    }

    /// The answer to one line.
    fn check(mcp: &Arc<Mcp>, line: &str) -> Option<Value> {
        rt().block_on(mcp.handle_line(line))
    }

    fn call(mcp: &Arc<Mcp>, params: Value) -> Value {
        let line = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}).to_string();
        check(mcp, &line).unwrap()
    }

    fn initialized(version: &str) -> Arc<Mcp> {
        let mcp = server();
        let answer = check(&mcp, &init(version)).unwrap();
        assert!(answer["result"].is_object(), "{answer}");
        mcp
    }

    fn init(version: &str) -> String {
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
        .to_string()
    }

    #[test]
    fn mcp_initialize_answers_the_clients_revision_or_the_newest() {
        for v in PROTOCOL_VERSIONS {
            let mcp = server();
            let r = check(&mcp, &init(v)).unwrap();
            assert_eq!(r["id"], 0);
            assert_eq!(r["result"]["protocolVersion"], *v);
            assert_eq!(mcp.version(), *v);
        }
        let r = check(&server(), &init("2099-01-01")).unwrap();
        let result = &r["result"];
        assert_eq!(result["protocolVersion"], PROTOCOL_VERSIONS[0]);
        assert_eq!(result["serverInfo"]["name"], "noesis");
        assert_eq!(result["serverInfo"]["version"], env!("CARGO_PKG_VERSION"));
        assert!(result["capabilities"]["tools"].is_object() && result["capabilities"]["resources"].is_object());
        assert!(result["instructions"].as_str().unwrap().contains("`run`"));
        // Older revisions have no titles.
        assert!(check(&server(), &init("2025-03-26")).unwrap()["result"]["serverInfo"].get("title").is_none());
        let r = check(&server(), r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#).unwrap();
        assert_eq!(r["error"]["code"], -32602);
        assert!(r["error"]["message"].as_str().unwrap().contains("protocolVersion"), "{r}");
    }

    #[test]
    fn mcp_jsonrpc_errors_carry_their_codes() {
        let mcp = server();
        for (line, code, id) in [
            ("{not json", -32700, Value::Null),
            ("[]", -32600, Value::Null),
            ("3", -32600, Value::Null),
            (r#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#, -32600, json!(1)),
            (r#"{"jsonrpc":"2.0","id":{},"method":"ping"}"#, -32600, Value::Null),
            (r#"{"jsonrpc":"2.0","id":1,"method":5}"#, -32600, json!(1)),
            (r#"{"jsonrpc":"2.0","id":"a","method":"completion/complete"}"#, -32601, json!("a")),
            (r#"{"jsonrpc":"2.0","id":5,"method":"prompts/list","params":{"cursor":"x"}}"#, -32602, json!(5)),
            (r#"{"jsonrpc":"2.0","id":5,"method":"prompts/get","params":{}}"#, -32602, json!(5)),
            (r#"{"jsonrpc":"2.0","id":5,"method":"prompts/get","params":{"name":"nope"}}"#, -32602, json!(5)),
            (r#"{"jsonrpc":"2.0","id":5,"method":"prompts/get","params":{"name":"../x"}}"#, -32602, json!(5)),
            (r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{}}"#, -32602, json!(2)),
            (r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"nope"}}"#, -32602, json!(2)),
            (r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":[1]}"#, -32602, json!(2)),
            (r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":"x"}}"#, -32602, json!(3)),
            (r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{}}"#, -32602, json!(4)),
            (
                r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"file:///etc/passwd"}}"#,
                -32002,
                json!(4),
            ),
            (
                r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"module://nope"}}"#,
                -32002,
                json!(4),
            ),
            (
                r#"{"jsonrpc":"2.0","id":4,"method":"resources/read","params":{"uri":"module://../x"}}"#,
                -32002,
                json!(4),
            ),
        ] {
            let r = check(&mcp, line).unwrap_or_else(|| panic!("no answer to {line}"));
            assert_eq!((r["error"]["code"].as_i64(), &r["id"]), (Some(code), &id), "{line} → {r}");
            assert_eq!(r["jsonrpc"], "2.0");
            assert!(r["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{r}");
        }
        // Notifications and stray responses get no answer.
        assert_eq!(check(&mcp, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), None);
        assert_eq!(check(&mcp, r#"{"jsonrpc":"2.0","method":"notifications/whatever"}"#), None);
        assert_eq!(check(&mcp, r#"{"jsonrpc":"2.0","id":9,"result":{}}"#), None);
        assert_eq!(check(&mcp, r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#).unwrap()["result"], json!({}));
    }

    #[test]
    fn mcp_batches_answer_each_request() {
        let r = check(
            &server(),
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]"#,
        )
        .unwrap();
        let ids: Vec<&Value> = r.as_array().unwrap().iter().map(|a| &a["id"]).collect();
        assert_eq!(ids, [&json!(1), &json!(2)]);
        assert_eq!(check(&server(), r#"[{"jsonrpc":"2.0","method":"notifications/initialized"}]"#), None);
    }

    #[test]
    fn mcp_tools_list_is_shaped_by_the_revision() {
        let tools = |v: &str| check(&initialized(v), r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).unwrap();
        let new = tools("2025-11-25");
        let names: Vec<&str> =
            new["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["run", "compose", "list", "info"]);
        for t in new["result"]["tools"].as_array().unwrap() {
            assert_eq!(t["inputSchema"]["type"], "object", "{t}");
            assert_eq!(t["outputSchema"]["type"], "object", "{t}");
        }
        let run = &new["result"]["tools"][0];
        assert_eq!(run["inputSchema"]["required"], json!(["module"]));
        let props: Vec<&String> = run["inputSchema"]["properties"].as_object().unwrap().keys().collect();
        assert_eq!(props, ["module", "input", "args", "provider", "model"]);
        let old = tools("2024-11-05");
        for t in old["result"]["tools"].as_array().unwrap() {
            assert!(
                t.get("outputSchema").is_none() && t.get("annotations").is_none() && t.get("title").is_none(),
                "{t}"
            );
        }
    }

    #[test]
    fn mcp_run_returns_the_envelope_as_text_and_structured_content() {
        let mcp = initialized("2025-06-18");
        let r = call(
            &mcp,
            json!({"name": "run", "arguments": {"module": "code-simplifier", "input": {"code": "x = 1 + 0"}}}),
        );
        let result = &r["result"];
        assert_eq!(result["isError"], false, "{r}");
        assert_eq!(result["structuredContent"]["ok"], true);
        assert_eq!(result["content"][0]["type"], "text");
        let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, result["structuredContent"]);
        assert!(noesis_modules::validate_envelope(&text).is_empty());

        let r = call(
            &mcp,
            json!({"name": "compose", "arguments": {"module": "code-simplifier", "input": {"code": "x = 1 + 0"}}}),
        );
        let composed = &r["result"]["structuredContent"];
        assert_eq!(r["result"]["isError"], false, "{r}");
        assert_eq!(composed["meta"]["steps"][0]["module"], "code-simplifier", "{composed}");
        assert_eq!(composed["meta"]["steps"][0]["outcome"]["status"], "ok", "{composed}");
        assert!(noesis_modules::validate_envelope(composed).is_empty());
        // A failure envelope is a tool error, not a protocol error.
        let r = call(&mcp, json!({"name": "run", "arguments": {"module": "nope"}}));
        assert_eq!(r["result"]["isError"], true, "{r}");
        assert_eq!(r["result"]["structuredContent"]["error"]["code"], "E4006");
        let suggestion = r["result"]["structuredContent"]["error"]["suggestion"].as_str().unwrap();
        assert!(suggestion.contains("`list` tool"), "{suggestion}");
        let r = call(&mcp, json!({"name": "run", "arguments": {"module": "code-simplifier", "provider": "nope"}}));
        assert_eq!(r["result"]["structuredContent"]["error"]["code"], "E1004", "{r}");
        // Before 2025-06-18 there is no structuredContent.
        let old = initialized("2025-03-26");
        let r = call(&old, json!({"name": "run", "arguments": {"module": "nope"}}));
        assert!(r["result"].get("structuredContent").is_none(), "{r}");
        assert_eq!(r["result"]["isError"], true);
    }

    #[test]
    fn mcp_bad_arguments_name_the_field() {
        let cases = [
            (json!({"input": {}}), "module", "E1002"),
            (json!({"module": 3}), "module", "E1003"),
            (json!({"module": "code-simplifier", "input": "x = 1"}), "input", "E1001"),
            (json!({"module": "code-simplifier", "args": 1}), "args", "E1003"),
            (json!({"module": "code-simplifier", "model": []}), "model", "E1003"),
            (json!({"module": "code-simplifier", "inputs": {}}), "inputs", "E1001"),
        ];
        // Up to 2025-06-18: a JSON-RPC error.
        let old = initialized("2025-06-18");
        for (arguments, field, _) in &cases {
            let r = call(&old, json!({"name": "run", "arguments": arguments}));
            assert_eq!(r["error"]["code"], -32602, "{arguments} → {r}");
            assert!(r["error"]["message"].as_str().unwrap().contains(&format!("`{field}`")), "{r}");
        }
        let r = call(&old, json!({"name": "run", "arguments": 5}));
        assert!(r["error"]["message"].as_str().unwrap().contains("`arguments`"), "{r}");
        let r = call(&old, json!({"name": "info", "arguments": {}}));
        assert!(r["error"]["message"].as_str().unwrap().contains("`module`"), "{r}");
        let r = call(&old, json!({"name": "list", "arguments": {"x": 1}}));
        assert!(r["error"]["message"].as_str().unwrap().contains("`x`"), "{r}");
        // From 2025-11-25: a tool error the model can read, with the envelope's code.
        let new = initialized("2025-11-25");
        for (arguments, field, code) in &cases {
            let r = call(&new, json!({"name": "run", "arguments": arguments}));
            let env = &r["result"]["structuredContent"];
            assert_eq!((&r["result"]["isError"], &env["error"]["code"]), (&json!(true), &json!(code)), "{r}");
            assert!(env["error"]["message"].as_str().unwrap().contains(&format!("`{field}`")), "{r}");
            assert!(noesis_modules::validate_envelope(env).is_empty(), "{env}");
        }
        // An unknown tool stays a protocol error.
        assert_eq!(call(&new, json!({"name": "nope"}))["error"]["code"], -32602);
    }

    #[test]
    fn mcp_list_and_info_tools() {
        let mcp = initialized("2025-11-25");
        let r = call(&mcp, json!({"name": "list"}));
        let modules = r["result"]["structuredContent"]["modules"].as_array().unwrap();
        assert!(modules.iter().any(|m| m["name"] == "code-simplifier" && m["valid"] == true), "{r}");
        let r = call(&mcp, json!({"name": "info", "arguments": {"module": "code-simplifier"}}));
        assert_eq!(r["result"]["isError"], false);
        assert_eq!(r["result"]["structuredContent"]["name"], "code-simplifier");
        assert!(r["result"]["structuredContent"]["input_schema"].is_object());
        let r = call(&mcp, json!({"name": "info", "arguments": {"module": "nope"}}));
        assert_eq!(
            (&r["result"]["isError"], &r["result"]["structuredContent"]["error"]["code"]),
            (&json!(true), &json!("E4006"))
        );
    }

    #[test]
    fn mcp_resources_list_and_read() {
        let mcp = initialized("2025-11-25");
        let r = check(&mcp, r#"{"jsonrpc":"2.0","id":1,"method":"resources/list"}"#).unwrap();
        let resources = r["result"]["resources"].as_array().unwrap();
        let cs = resources.iter().find(|r| r["uri"] == "module://code-simplifier").expect("code-simplifier listed");
        assert_eq!(cs["name"], "code-simplifier");
        assert_eq!(cs["mimeType"], "application/json");
        assert!(cs["description"].as_str().is_some_and(|d| !d.is_empty()));
        let r = check(
            &mcp,
            r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"module://code-simplifier"}}"#,
        )
        .unwrap();
        let content = &r["result"]["contents"][0];
        assert_eq!(content["uri"], "module://code-simplifier");
        let body: Value = serde_json::from_str(content["text"].as_str().unwrap()).unwrap();
        assert_eq!(body["manifest"]["name"], "code-simplifier");
        assert!(body["prompt"].as_str().is_some_and(|p| !p.is_empty()));
        assert!(body["schema"]["input"].is_object(), "{body}");
        let r = check(&mcp, r#"{"jsonrpc":"2.0","id":3,"method":"resources/templates/list"}"#).unwrap();
        assert_eq!(r["result"], json!({"resourceTemplates": []}));
    }

    #[test]
    fn mcp_each_module_is_a_prompt_with_arguments_from_its_input_schema() {
        for version in PROTOCOL_VERSIONS {
            let r = check(&server(), &init(version)).unwrap();
            assert!(r["result"]["capabilities"]["prompts"].is_object(), "{version}: {r}");
        }
        let mcp = initialized("2025-11-25");
        let r = check(&mcp, r#"{"jsonrpc":"2.0","id":1,"method":"prompts/list"}"#).unwrap();
        let prompts = r["result"]["prompts"].as_array().unwrap();
        let names: Vec<&str> = prompts.iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert!(names.contains(&"code-simplifier") && names.contains(&"meeting-details"), "{names:?}");
        let meeting = prompts.iter().find(|p| p["name"] == "meeting-details").unwrap();
        assert!(meeting["description"].as_str().is_some_and(|d| !d.is_empty()), "{meeting}");
        assert_eq!(
            meeting["arguments"],
            json!([{"name": "message", "required": true, "description": "A short message that sets up a meeting"}])
        );

        let get = |params: Value| {
            let line = json!({"jsonrpc": "2.0", "id": 2, "method": "prompts/get", "params": params}).to_string();
            check(&mcp, &line).unwrap()
        };
        let r = get(json!({"name": "meeting-details", "arguments": {"message": "Lunch with Ada on Friday"}}));
        let messages = r["result"]["messages"].as_array().unwrap_or_else(|| panic!("{r}"));
        assert_eq!(messages[0]["role"], "user");
        let text = messages[0]["content"]["text"].as_str().unwrap();
        assert!(text.starts_with("# Meeting details") && text.contains("Lunch with Ada on Friday"), "{text}");
        assert_eq!(r["result"]["description"], meeting["description"]);
        // Arguments that do not fit are invalid params naming the argument.
        for (params, says) in [
            (json!({"name": "meeting-details"}), "`message` is missing"),
            (json!({"name": "meeting-details", "arguments": {"message": 1}}), "`message` must be a string"),
            (json!({"name": "meeting-details", "arguments": {"message": "x", "day": "Fri"}}), "`day`"),
            (json!({"name": "meeting-details", "arguments": {"message": ""}}), "/message"),
            (json!({"name": "meeting-details", "arguments": []}), "`arguments`"),
            (json!({"name": "nope"}), "no prompt `nope`"),
        ] {
            let r = get(params.clone());
            assert_eq!(r["error"]["code"], -32602, "{params} → {r}");
            assert!(r["error"]["message"].as_str().unwrap().contains(says), "{params} → {r}");
        }
    }

    /// Feeds `serve` lines and collects what it writes.
    struct Wire {
        input: Option<mpsc::Sender<Vec<u8>>>,
        output: mpsc::UnboundedReceiver<String>,
        done: tokio::task::JoinHandle<()>,
    }

    impl Wire {
        fn start(mcp: Arc<Mcp>) -> Wire {
            let (input, lines) = mpsc::channel(16);
            let (out, output) = mpsc::unbounded_channel();
            let done = tokio::spawn(mcp.serve(lines, out));
            Wire { input: Some(input), output, done }
        }

        async fn send(&self, message: Value) {
            self.send_bytes(message.to_string().into_bytes()).await;
        }

        async fn send_bytes(&self, line: Vec<u8>) {
            self.input.as_ref().expect("input still open").send(line).await.unwrap();
        }

        /// Ends the input, as a client closing stdin does.
        fn close(&mut self) {
            self.input = None;
        }

        async fn next(&mut self) -> Value {
            let line = tokio::time::timeout(Duration::from_secs(10), self.output.recv()).await.unwrap().unwrap();
            assert!(!line.contains('\n'), "{line}");
            serde_json::from_str(&line).unwrap()
        }
    }

    fn slow_run(id: i64) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "run", "arguments": {"module": "code-simplifier", "provider": "slow", "input": {"code": "x"}}}})
    }

    #[test]
    fn mcp_a_long_run_does_not_hold_up_ping_and_cancel_stops_it() {
        let fake = slow_fake();
        rt().block_on(async {
            let mut wire = Wire::start(slow_server(&fake, Duration::from_secs(30)));
            wire.send(slow_run(1)).await;
            wire.send(json!({"jsonrpc": "2.0", "id": 2, "method": "ping"})).await;
            assert_eq!(wire.next().await["id"], 2);
            wire.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}})).await;
            // The cancelled run sends nothing; the next answer is the next request's.
            wire.send(json!({"jsonrpc": "2.0", "id": 3, "method": "ping"})).await;
            assert_eq!(wire.next().await["id"], 3);
            // Garbage does not stop the server.
            wire.send_bytes(b"\xff\xfe not json".to_vec()).await;
            assert_eq!(wire.next().await["error"]["code"], -32700);
            wire.send(json!({"jsonrpc": "2.0", "id": 4, "method": "ping"})).await;
            assert_eq!(wire.next().await["id"], 4);
            wire.close();
            tokio::time::timeout(Duration::from_secs(10), wire.done).await.unwrap().unwrap();
        });
    }

    #[test]
    fn mcp_end_of_input_answers_what_finishes_within_the_grace_and_cancels_the_rest() {
        let fake = slow_fake();
        rt().block_on(async {
            let mut wire = Wire::start(slow_server(&fake, Duration::from_millis(300)));
            wire.send(slow_run(1)).await;
            // A duplicate id while the first is running is refused.
            wire.send(slow_run(1)).await;
            let r = wire.next().await;
            assert_eq!((&r["id"], &r["error"]["code"]), (&json!(1), &json!(-32600)), "{r}");
            // A quick run sent just before the end of input is still answered.
            let quick = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "run", "arguments": {"module": "code-simplifier", "input": {"code": "x"}}}});
            wire.send(quick).await;
            wire.close();
            let r = wire.next().await;
            assert_eq!((&r["id"], &r["result"]["isError"]), (&json!(2), &json!(false)), "{r}");
            // The slow one is cancelled after the grace, and says so.
            let r = wire.next().await;
            assert_eq!(r["id"], 1);
            assert_eq!(r["result"]["structuredContent"]["error"]["code"], "E2002", "{r}");
            tokio::time::timeout(Duration::from_secs(10), wire.done).await.unwrap().unwrap();
            assert!(wire.output.recv().await.is_none());
        });
    }
}
