//! MCP servers as agent tools.
//!
//! [`McpServers::connect`] starts or reaches each configured server through
//! the official SDK (`rmcp`: a child process over stdio, or streamable
//! HTTP), lists its tools and offers them to a run as a
//! [`noesis_agent::ToolSource`], each under `SERVER__TOOL` (declared with
//! `source: mcp`, so permission rules written `mcp:NAME` match them). A
//! tool's annotations are hints, believed only for a server configured
//! `trusted`: there `readOnlyHint: true` is read-only (no approval, may run
//! beside other read-only calls); anything else, and every tool of a server
//! that is not trusted, changes the world outside the workspace and waits
//! for a decision; `idempotentHint: true` lets a call interrupted by a
//! crash run again on resume. A server's `isError` result, a protocol error, a timeout and a
//! server that is gone are each a tool error the model sees, with the kind
//! on record ([`noesis_agent::ToolEvidence::Mcp`]).
//!
//! A server's resources and prompts are offered as two read-only tools of
//! its own, `SERVER__read_resource` and `SERVER__get_prompt`, their lists in
//! the tools' descriptions (see `context`). The client declares `roots` (the
//! workspace and the folders a program server's command line names, as
//! `file://` URIs), `sampling` and `elicitation`: a server's
//! model call or question made during a tool call is answered with what the
//! run that made the call lent it ([`Answers`], through
//! [`McpServers::for_run`]): its router, metered to it as the call's spend,
//! and its person. Without them a model call is refused and a question
//! declined (see `asks`).
//!
//! `notifications/tools/list_changed` (and its resources and prompts
//! kin) makes the server's tools be listed again; the run offers the new
//! list from its next model call. A server that stops is started again
//! once; if it stops again its tools answer with an error saying so.

mod asks;
mod context;
mod names;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use noesis_agent::{Effects, McpOutcome, ToolDecl, ToolEvidence, ToolFuture, ToolOutput, ToolSource};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, GetPromptRequestParams, Implementation, ReadResourceRequestParams,
};
#[expect(
    deprecated,
    reason = "sampling and roots are deprecated from protocol 2026-07-28 (SEP-2577); the versions servers speak today have them"
)]
use rmcp::model::{CreateMessageRequestParams, CreateMessageResult, ListRootsResult};
use rmcp::service::RequestContext;
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService, ServiceError};
use serde_json::{Value, json};

pub use asks::{Answers, Elicitation, Elicited, Elicitor, RouterSampler, SAMPLING_ROLE, Sampled, Sampler};
pub use names::{check_server_name, prefixed, split_prefixed};

/// How long starting a server and its handshake may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one tool call may take unless the server's config says.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Bytes of a server's stderr kept to explain why it stopped.
const STDERR_TAIL: usize = 4096;

/// One server, as configured.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    /// Its name: the prefix of its tools (`NAME__tool`).
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// How long one call may take.
    pub call_timeout: Duration,
    /// The operator vouches for it (`trusted = true`): its process runs
    /// unconfined and its tool annotations are believed (`readOnlyHint`
    /// makes a tool read-only: it runs without approval). Otherwise a
    /// program server runs in the sandbox and every tool is treated as
    /// changing the world.
    pub trusted: bool,
    /// Its process may use the network (`network = true`).
    pub network: bool,
}

/// How a server is reached.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    /// A child process speaking MCP on stdin/stdout.
    Command {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to its environment.
        env: BTreeMap<String, String>,
        /// Its working directory (default: ours).
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP at this URL.
    Http {
        /// The endpoint.
        url: String,
        /// Headers sent with every request (not secrets: they are part of
        /// the configuration as written).
        headers: BTreeMap<String, String>,
        /// The environment variable whose value is sent as a bearer token,
        /// read when the server is reached (never stored).
        bearer_env: Option<String>,
    },
}

impl ServerSpec {
    /// A server started as `command args…`.
    pub fn command(name: &str, command: &str, args: &[&str]) -> ServerSpec {
        ServerSpec {
            name: name.into(),
            transport: Transport::Command {
                command: command.into(),
                args: args.iter().map(|a| (*a).to_owned()).collect(),
                env: BTreeMap::new(),
                cwd: None,
            },
            call_timeout: CALL_TIMEOUT,
            trusted: false,
            network: false,
        }
    }

    /// A server at a streamable-HTTP URL.
    pub fn http(name: &str, url: &str) -> ServerSpec {
        ServerSpec {
            name: name.into(),
            transport: Transport::Http { url: url.into(), headers: BTreeMap::new(), bearer_env: None },
            call_timeout: CALL_TIMEOUT,
            trusted: false,
            network: false,
        }
    }

    /// The same server, its annotations believed and its process
    /// unconfined (see [`ServerSpec::trusted`]).
    #[must_use]
    pub fn trusted(mut self) -> ServerSpec {
        self.trusted = true;
        self
    }

    /// Parses `--mcp NAME='CMD ARGS'` (the command split like a shell
    /// would, without running one) or `NAME=http://…`.
    pub fn parse_flag(flag: &str) -> Result<ServerSpec, McpError> {
        let bad = |message: String| McpError::Config { server: flag.to_owned(), message };
        let (name, rest) =
            flag.split_once('=').ok_or_else(|| bad("expected NAME='COMMAND ARGS' or NAME=URL".into()))?;
        names::check_server_name(name).map_err(|m| McpError::Config { server: name.into(), message: m })?;
        let rest = rest.trim();
        if rest.starts_with("http://") || rest.starts_with("https://") {
            return Ok(ServerSpec::http(name, rest));
        }
        let words = shlex::split(rest).ok_or_else(|| bad("the command's quotes do not close".into()))?;
        let (command, args) = words.split_first().ok_or_else(|| bad("the command is empty".into()))?;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Ok(ServerSpec::command(name, command, &args))
    }
}

/// A server could not be set up.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum McpError {
    /// The configuration is wrong.
    #[error("MCP server `{server}`: {message}")]
    Config {
        /// The server (or the flag).
        server: String,
        /// What is wrong.
        message: String,
    },
    /// It could not be started or reached, or its handshake failed.
    #[error("MCP server `{server}` could not be started: {message}")]
    Connect {
        /// The server.
        server: String,
        /// Why, with the end of its stderr when there is one.
        message: String,
    },
    /// Its tools could not be listed.
    #[error("MCP server `{server}`: listing its tools failed: {message}")]
    List {
        /// The server.
        server: String,
        /// Why.
        message: String,
    },
}

/// Answers the server's requests and notices its notifications: a changed
/// list marks the server for listing again.
#[derive(Clone)]
#[expect(
    deprecated,
    reason = "sampling and roots are deprecated from protocol 2026-07-28 (SEP-2577); the versions servers speak today have them"
)]
struct Handler {
    server: String,
    stale: Arc<AtomicBool>,
    wake: Arc<tokio::sync::Notify>,
    in_flight: Arc<asks::InFlight>,
    /// What `roots/list` answers: the workspace.
    roots: ListRootsResult,
}

impl Handler {
    fn changed(&self) -> impl Future<Output = ()> + Send + '_ {
        self.stale.store(true, Ordering::SeqCst);
        self.wake.notify_one();
        std::future::ready(())
    }
}

#[expect(
    deprecated,
    reason = "sampling and roots are deprecated from protocol 2026-07-28 (SEP-2577); the versions servers speak today have them"
)]
impl rmcp::ClientHandler for Handler {
    fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) -> impl Future<Output = ()> + Send + '_ {
        self.changed()
    }

    fn on_resource_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.changed()
    }

    fn on_prompt_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.changed()
    }

    fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> impl Future<Output = Result<ListRootsResult, rmcp::ErrorData>> + Send + '_ {
        std::future::ready(Ok(self.roots.clone()))
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, rmcp::ErrorData> {
        let params = serde_json::to_value(&params).map_err(|e| rmcp::ErrorData::invalid_params(e.to_string(), None))?;
        let refused = |why: String| rmcp::ErrorData::invalid_request(format!("sampling refused: {why}"), None);
        let result = self.in_flight.sample(&self.server, params).await.map_err(refused)?;
        serde_json::from_value(result).map_err(|e| rmcp::ErrorData::internal_error(e.to_string(), None))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        let params = serde_json::to_value(&request).unwrap_or(Value::Null);
        Ok(match self.in_flight.elicit(&self.server, &params).await {
            Elicited::Accept(content) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(Value::Object(content))
            }
            Elicited::Decline => ElicitResult::new(ElicitationAction::Decline),
            Elicited::Cancel => ElicitResult::new(ElicitationAction::Cancel),
        })
    }

    fn get_info(&self) -> ClientConfig {
        // Declared for every run the connection serves: whether a run lent
        // a model or a person is known only when its request arrives.
        let capabilities: ClientCapabilities = serde_json::from_value(json!({
            "roots": {"listChanged": false},
            "sampling": {},
            "elicitation": {"form": {}},
        }))
        .unwrap_or_default();
        ClientConfig::new(capabilities, Implementation::new("noesis", env!("CARGO_PKG_VERSION")))
    }
}

/// `roots/list`'s answer: the workspace, then each folder the server's
/// command line names (an absolute path to a folder), as `file://` URIs. A
/// server that serves its roots (the reference filesystem server replaces
/// its own folders with them) keeps the folders it was configured with and
/// gains the workspace.
#[expect(
    deprecated,
    reason = "sampling and roots are deprecated from protocol 2026-07-28 (SEP-2577); the versions servers speak today have them"
)]
fn roots_of(workspace: &std::path::Path, transport: &Transport) -> ListRootsResult {
    let uri = |path: &std::path::Path| {
        let mut uri = String::from("file://");
        for b in path.to_string_lossy().bytes() {
            if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
                uri.push(char::from(b));
            } else {
                uri.push_str(&format!("%{b:02X}"));
            }
        }
        uri
    };
    let mut roots = vec![json!({"uri": uri(workspace), "name": "workspace"})];
    if let Transport::Command { args, .. } = transport {
        for a in args {
            let p = std::path::Path::new(a);
            if p.is_absolute() && p.is_dir() && p != workspace {
                let name = p.file_name().map_or_else(|| a.clone(), |n| n.to_string_lossy().into_owned());
                roots.push(json!({"uri": uri(p), "name": name}));
            }
        }
    }
    serde_json::from_value(json!({ "roots": roots })).unwrap_or_default()
}

type Client = RunningService<RoleClient, Handler>;

/// A transport that notes a changed tool list as the message is read, in
/// order with the responses: the SDK hands notifications to the handler on
/// a task of their own, so a call's response can overtake the notice the
/// server sent before it.
struct Watched<T> {
    inner: T,
    stale: Arc<AtomicBool>,
}

impl<T: rmcp::transport::Transport<RoleClient>> rmcp::transport::Transport<RoleClient> for Watched<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: rmcp::service::TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<rmcp::service::RxJsonRpcMessage<RoleClient>>> + Send {
        let stale = Arc::clone(&self.stale);
        let next = self.inner.receive();
        async move {
            let message = next.await;
            if let Some(rmcp::model::JsonRpcMessage::Notification(n)) = &message
                && matches!(
                    n.notification,
                    rmcp::model::ServerNotification::ToolListChangedNotification(_)
                        | rmcp::model::ServerNotification::ResourceListChangedNotification(_)
                        | rmcp::model::ServerNotification::PromptListChangedNotification(_)
                )
            {
                stale.store(true, Ordering::SeqCst);
            }
            message
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// A remote tool as offered: the run's declaration and what it asks of
/// the server.
#[derive(Debug, Clone)]
struct Offered {
    decl: ToolDecl,
    remote: Remote,
}

/// What an offered tool asks of its server.
#[derive(Debug, Clone, PartialEq)]
enum Remote {
    /// `tools/call` of the server's tool of this name.
    Tool(String),
    /// `resources/read`.
    ReadResource,
    /// `prompts/get`.
    GetPrompt,
}

impl Remote {
    /// The name evidence and errors give it: the tool's, or the method's.
    fn name(&self) -> &str {
        match self {
            Remote::Tool(name) => name,
            Remote::ReadResource => "resources/read",
            Remote::GetPrompt => "prompts/get",
        }
    }
}

struct Conn {
    client: Option<Client>,
    /// Set once the one restart is spent and the server stopped again.
    gone: Option<String>,
}

/// One connected server.
struct Server {
    spec: ServerSpec,
    conn: tokio::sync::Mutex<Conn>,
    tools: Mutex<Vec<Offered>>,
    revision: Arc<AtomicU64>,
    stale: Arc<AtomicBool>,
    wake: Arc<tokio::sync::Notify>,
    restarted: AtomicBool,
    stderr: Arc<Mutex<Vec<u8>>>,
    pid: Mutex<Option<u32>>,
    /// Held by whoever lists the tools again after a change notice.
    listing: tokio::sync::Mutex<()>,
    /// How a program server is confined: the settings and the workspace.
    confine: Confine,
    /// The sandbox of the running process (its folder lives as long).
    sandbox: Mutex<Option<Arc<noesis_sandbox::Sandbox>>>,
    /// The calls in flight, whose runs answer the server's requests.
    in_flight: Arc<asks::InFlight>,
}

/// Where and how program servers are confined.
#[derive(Debug, Clone)]
pub struct Confine {
    /// The sandbox settings (the run's).
    pub settings: noesis_sandbox::Settings,
    /// The workspace the servers may write.
    pub workspace: PathBuf,
}

impl Confine {
    /// The sandbox for `spec`'s process: the run's settings, plus what its
    /// command line names (the program's installation and files readable,
    /// folders it is given writable: a file-system server serves them) and
    /// the network when the server is configured with it.
    fn sandbox_for(
        &self,
        spec: &ServerSpec,
        command: &str,
        args: &[String],
    ) -> Result<noesis_sandbox::Sandbox, String> {
        let mut settings = self.settings.clone();
        settings.network |= spec.network;
        settings.read_extra.extend(program_roots(command));
        for a in args {
            let p = std::path::Path::new(a);
            if p.is_absolute() && p.is_dir() {
                settings.write_extra.push(p.to_path_buf());
            } else if p.is_absolute() && p.exists() {
                settings.read_extra.extend(program_roots(a));
            }
        }
        noesis_sandbox::Sandbox::new(&settings, &self.workspace, &[]).map_err(|e| e.to_string())
    }
}

/// What must be readable for `program` to run: its installation, and
/// when it is a link into a `node_modules` tree (npm's `.bin`), that tree.
fn program_roots(program: &str) -> Vec<PathBuf> {
    let resolved = if program.contains('/') {
        Some(PathBuf::from(program))
    } else {
        std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(program)).find(|c| c.is_file()))
    };
    let Some(path) = resolved else { return Vec::new() };
    let mut out: Vec<PathBuf> = Vec::new();
    for p in [Some(path.clone()), path.canonicalize().ok()].into_iter().flatten() {
        let text = p.to_string_lossy().into_owned();
        if let Some(i) = text.find("/node_modules/") {
            out.push(PathBuf::from(&text[..i + "/node_modules".len()]));
        } else {
            out.extend(noesis_sandbox::paths::program_root(&text));
        }
    }
    out.dedup();
    out
}

impl Server {
    fn tail(&self) -> String {
        let bytes = self.stderr.lock().map(|b| b.clone()).unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes).trim().to_owned();
        if text.is_empty() { String::new() } else { format!(" (its stderr ends: {text})") }
    }

    async fn start(&self) -> Result<Client, McpError> {
        let handler = Handler {
            server: self.spec.name.clone(),
            stale: Arc::clone(&self.stale),
            wake: Arc::clone(&self.wake),
            in_flight: Arc::clone(&self.in_flight),
            roots: roots_of(&self.confine.workspace, &self.spec.transport),
        };
        let connect_err = |message: String| McpError::Connect { server: self.spec.name.clone(), message };
        let started = match &self.spec.transport {
            Transport::Command { command, args, env, cwd } => {
                let mut cmd = if self.spec.trusted {
                    let mut c = tokio::process::Command::new(command);
                    c.args(args);
                    c
                } else {
                    // Confined like any process a model steers: the server
                    // acts on the model's requests.
                    let sandbox = Arc::new(self.confine.sandbox_for(&self.spec, command, args).map_err(&connect_err)?);
                    let dir = cwd.clone().unwrap_or_else(|| self.confine.workspace.clone());
                    let os_args: Vec<std::ffi::OsString> = args.iter().map(Into::into).collect();
                    let c = tokio::process::Command::from(sandbox.command(command.as_ref(), &os_args, &dir));
                    *self.sandbox.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(sandbox);
                    c
                };
                cmd.envs(env).kill_on_drop(true);
                if let Some(dir) = cwd {
                    cmd.current_dir(dir);
                }
                let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .map_err(|e| connect_err(format!("`{command}`: {e}")))?;
                if let Some(stderr) = stderr {
                    tokio::spawn(keep_tail(stderr, Arc::clone(&self.stderr)));
                }
                *self.pid.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = transport.id();
                let transport = Watched { inner: transport, stale: Arc::clone(&self.stale) };
                tokio::time::timeout(CONNECT_TIMEOUT, handler.serve(transport)).await
            }
            Transport::Http { url, headers, bearer_env } => {
                let mut config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                    url.as_str(),
                );
                if let Some(var) = bearer_env {
                    let token = std::env::var(var)
                        .ok()
                        .filter(|t| !t.is_empty())
                        .ok_or_else(|| connect_err(format!("its bearer token variable `{var}` is not set")))?;
                    config = config.auth_header(token);
                }
                let mut custom = std::collections::HashMap::new();
                for (k, v) in headers {
                    let name = http::HeaderName::from_bytes(k.as_bytes())
                        .map_err(|_| connect_err(format!("`{k}` is not a header name")))?;
                    let value = http::HeaderValue::from_str(v)
                        .map_err(|_| connect_err(format!("the value of header `{k}` is not a header value")))?;
                    custom.insert(name, value);
                }
                let config = config.custom_headers(custom);
                let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
                let transport = Watched { inner: transport, stale: Arc::clone(&self.stale) };
                tokio::time::timeout(CONNECT_TIMEOUT, handler.serve(transport)).await
            }
        };
        match started {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => {
                // Let the stderr reader catch the last words of a server
                // that exited during the handshake.
                tokio::time::sleep(Duration::from_millis(50)).await;
                Err(connect_err(format!("{e}{}", self.tail())))
            }
            Err(_) => Err(connect_err(format!("no handshake within {} s{}", CONNECT_TIMEOUT.as_secs(), self.tail()))),
        }
    }

    /// Lists the server's tools, resources and prompts through `peer` and
    /// offers them.
    async fn list(&self, peer: &Peer<RoleClient>) -> Result<(), McpError> {
        let listed = tokio::time::timeout(self.spec.call_timeout, peer.list_all_tools())
            .await
            .map_err(|_| McpError::List { server: self.spec.name.clone(), message: "timed out".into() })?
            .map_err(|e| McpError::List { server: self.spec.name.clone(), message: e.to_string() })?;
        let mut offered: Vec<Offered> = listed
            .iter()
            .map(|t| Offered { decl: declare(&self.spec, t), remote: Remote::Tool(t.name.to_string()) })
            .collect();
        let (more, problems) = context::list(peer, self.spec.call_timeout).await;
        for p in problems {
            // Its tools still serve; the model is not offered what could
            // not be listed.
            tracing::warn!(server = %self.spec.name, "MCP server: {p}");
        }
        let extra = [
            more.resources
                .as_deref()
                .and_then(|r| context::read_resource_decl(&self.spec.name, r, &more.templates))
                .map(|d| (d, Remote::ReadResource)),
            more.prompts
                .as_deref()
                .and_then(|p| context::get_prompt_decl(&self.spec.name, p))
                .map(|d| (d, Remote::GetPrompt)),
        ];
        for (decl, remote) in extra.into_iter().flatten() {
            // A tool of the server's own under the same name keeps it.
            if !offered.iter().any(|o| o.decl.name == decl.name) {
                offered.push(Offered { decl, remote });
            }
        }
        *self.tools.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = offered;
        self.revision.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// The live connection's peer, starting the server again (once in its
    /// life) when it stopped.
    async fn peer(&self) -> Result<Peer<RoleClient>, String> {
        let mut conn = self.conn.lock().await;
        if let Some(why) = &conn.gone {
            return Err(why.clone());
        }
        if let Some(client) = &conn.client
            && !client.is_closed()
            && !client.peer().is_transport_closed()
        {
            return Ok(client.peer().clone());
        }
        if self.restarted.swap(true, Ordering::SeqCst) {
            let why = format!(
                "the MCP server `{}` stopped and was already started again once; its tools are unavailable{}",
                self.spec.name,
                self.tail()
            );
            conn.client = None;
            conn.gone = Some(why.clone());
            self.offer_none();
            return Err(why);
        }
        conn.client = None;
        let client = self.start().await.map_err(|e| {
            let why = format!("{e}; its tools are unavailable");
            conn.gone = Some(why.clone());
            why
        });
        let client = match client {
            Ok(c) => c,
            Err(why) => {
                self.offer_none();
                return Err(why);
            }
        };
        let peer = client.peer().clone();
        conn.client = Some(client);
        drop(conn);
        self.list(&peer).await.map_err(|e| e.to_string())?;
        Ok(peer)
    }

    fn offer_none(&self) {
        let mut tools = self.tools.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !tools.is_empty() {
            tools.clear();
            self.revision.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn remote(&self, tool: &str) -> Option<Offered> {
        self.tools.lock().ok()?.iter().find(|o| o.decl.name == tool).cloned()
    }

    /// [`Server::call`] for `run`: a model call or question the server
    /// makes meanwhile is answered with `answers`, and what its model calls
    /// spent is the call's spend.
    async fn call_for(&self, run: u64, answers: Answers, offered: Offered, arguments: Value) -> ToolOutput {
        let id = self.in_flight.begin(run, answers);
        // Ended however the call ends, a future dropped mid-call included.
        struct End<'a> {
            in_flight: &'a asks::InFlight,
            id: u64,
            done: bool,
        }
        impl Drop for End<'_> {
            fn drop(&mut self) {
                if !self.done {
                    self.in_flight.end(self.id);
                }
            }
        }
        let mut guard = End { in_flight: &self.in_flight, id, done: false };
        let out = self.call(offered, arguments).await;
        guard.done = true;
        match self.in_flight.end(id) {
            Some(spent) => out.with_spent(spent),
            None => out,
        }
    }

    async fn call(&self, offered: Offered, arguments: Value) -> ToolOutput {
        let name = &self.spec.name;
        let remote = offered.remote.name().to_owned();
        let evidence = |outcome: McpOutcome, content: &str| ToolEvidence::Mcp {
            server: name.clone(),
            tool: remote.clone(),
            outcome,
            result_blake3: blake3::hash(content.as_bytes()).to_hex().to_string(),
        };
        let fail = |outcome: McpOutcome, content: String| {
            let e = evidence(outcome, &content);
            ToolOutput::error(content).with_evidence(e)
        };
        // The MCP attributes of the run's `execute_tool` span (declared
        // there; the conventions merge them into it, no second span).
        let span = tracing::Span::current();
        span.record(
            noesis_trace::attr::MCP_METHOD_NAME,
            match offered.remote {
                Remote::Tool(_) => "tools/call",
                Remote::ReadResource => "resources/read",
                Remote::GetPrompt => "prompts/get",
            },
        );
        span.record("noesis.mcp.server", name.as_str());
        span.record(
            noesis_trace::attr::NETWORK_TRANSPORT,
            match self.spec.transport {
                Transport::Command { .. } => "pipe",
                Transport::Http { .. } => "tcp",
            },
        );
        let request = match Request::of(&offered.remote, arguments) {
            Ok(r) => r,
            Err(why) => return fail(McpOutcome::ProtocolError, why),
        };
        let mut attempts = 0;
        loop {
            attempts += 1;
            let peer = match self.peer().await {
                Ok(p) => p,
                Err(why) => return fail(McpOutcome::Unavailable, why),
            };
            if !span.is_disabled()
                && let Some(info) = peer.peer_info()
            {
                span.record(noesis_trace::attr::MCP_PROTOCOL_VERSION, info.protocol_version.to_string().as_str());
            }
            match tokio::time::timeout(self.spec.call_timeout, request.send(&peer)).await {
                Err(_) => {
                    return fail(
                        McpOutcome::Timeout,
                        format!(
                            "`{remote}` on the MCP server `{name}` did not answer within {} s",
                            self.spec.call_timeout.as_secs()
                        ),
                    );
                }
                Ok(Ok((content, is_error))) => {
                    // A server that changed its tools during the call said
                    // so before answering: list them now, so the run's next
                    // request offers what the result may refer to.
                    // The watcher may be listing already: wait for it.
                    let _listing = self.listing.lock().await;
                    if self.stale.swap(false, Ordering::SeqCst) {
                        let _ = self.list(&peer).await;
                    }
                    let outcome = if is_error { McpOutcome::ToolError } else { McpOutcome::Ok };
                    let e = evidence(outcome, &content);
                    let out = if is_error { ToolOutput::error(content) } else { ToolOutput::ok(content) };
                    return out.with_evidence(e);
                }
                Ok(Err(ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                    // The server stopped. A call that never reached it, or
                    // one that may run twice, is tried once more on a fresh
                    // start; any other may have had its effect.
                    if attempts == 1 && offered.decl.idempotent {
                        continue;
                    }
                    return fail(
                        McpOutcome::Unavailable,
                        format!(
                            "the MCP server `{name}` stopped during the call; it may or may not have taken effect{}",
                            self.tail()
                        ),
                    );
                }
                Ok(Err(ServiceError::McpError(e))) => {
                    return fail(
                        McpOutcome::ProtocolError,
                        format!("the MCP server `{name}` refused the call: {}", e.message),
                    );
                }
                Ok(Err(e)) => return fail(McpOutcome::ProtocolError, format!("the MCP server `{name}`: {e}")),
            }
        }
    }

    /// Lists the tools again whenever the server says they changed.
    async fn watch(me: Weak<Server>, wake: Arc<tokio::sync::Notify>) {
        loop {
            wake.notified().await;
            let Some(server) = me.upgrade() else { return };
            // Held while listing, so a call that ends meanwhile waits for
            // the new list instead of answering before it.
            let _listing = server.listing.lock().await;
            if !server.stale.swap(false, Ordering::SeqCst) {
                continue;
            }
            let peer = {
                let conn = server.conn.lock().await;
                conn.client.as_ref().map(|c| c.peer().clone())
            };
            if let Some(peer) = peer {
                // A failure leaves the old list; the next call finds out.
                let _ = server.list(&peer).await;
            }
        }
    }
}

/// One request of an offered tool, its arguments checked.
enum Request {
    Call(CallToolRequestParams),
    Read(ReadResourceRequestParams),
    Prompt(GetPromptRequestParams),
}

impl Request {
    fn of(remote: &Remote, arguments: Value) -> Result<Request, String> {
        let Value::Object(arguments) = arguments else {
            return Err(format!("the arguments must be an object, not {arguments}"));
        };
        let text = |key: &str| match arguments.get(key) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            _ => Err(format!("`{key}` must be given, as a string")),
        };
        Ok(match remote {
            Remote::Tool(name) => Request::Call(CallToolRequestParams::new(name.clone()).with_arguments(arguments)),
            Remote::ReadResource => Request::Read(ReadResourceRequestParams::new(text("uri")?)),
            Remote::GetPrompt => {
                let p = GetPromptRequestParams::new(text("name")?);
                let args = match arguments.get("arguments") {
                    None | Some(Value::Null) => None,
                    Some(Value::Object(args)) => {
                        // The protocol's arguments are strings: a number or a
                        // flag the model gave is sent as its JSON text.
                        let strings = args
                            .iter()
                            .map(|(k, v)| {
                                (k.clone(), Value::String(v.as_str().map_or_else(|| v.to_string(), str::to_owned)))
                            })
                            .collect();
                        Some(strings)
                    }
                    Some(other) => return Err(format!("`arguments` must be an object, not {other}")),
                };
                Request::Prompt(match args {
                    Some(a) => p.with_arguments(a),
                    None => p,
                })
            }
        })
    }

    /// Sends it: the text the model sees, and whether it is an error.
    async fn send(&self, peer: &Peer<RoleClient>) -> Result<(String, bool), ServiceError> {
        match self {
            Request::Call(p) => peer.call_tool(p.clone()).await.map(|r| render(&r)),
            Request::Read(p) => peer.read_resource(p.clone()).await.map(|r| (context::render_resource(&r), false)),
            Request::Prompt(p) => {
                let result = peer.get_prompt_once(p.clone()).await?;
                match result {
                    rmcp::model::GetPromptResponse::Complete(r) => Ok((context::render_prompt(&r), false)),
                    _ => Err(ServiceError::UnexpectedResponse),
                }
            }
        }
    }
}

async fn keep_tail(mut stderr: tokio::process::ChildStderr, tail: Arc<Mutex<Vec<u8>>>) {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 1024];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            return;
        }
        if let Ok(mut kept) = tail.lock() {
            kept.extend_from_slice(&buf[..n]);
            let excess = kept.len().saturating_sub(STDERR_TAIL);
            kept.drain(..excess);
        }
    }
}

/// The run's declaration of a server's tool: its hints believed only when
/// the server is trusted.
fn declare(spec: &ServerSpec, tool: &rmcp::model::Tool) -> ToolDecl {
    let server = spec.name.as_str();
    let hints = tool.annotations.as_ref();
    let says_read_only = hints.and_then(|h| h.read_only_hint) == Some(true);
    let read_only = says_read_only && spec.trusted;
    // The spec's defaults: not read-only is destructive unless it says not.
    let destructive = !says_read_only && hints.and_then(|h| h.destructive_hint) != Some(false);
    let idempotent = read_only || hints.and_then(|h| h.idempotent_hint) == Some(true);
    let mut description = tool.description.as_deref().unwrap_or("").trim().to_owned();
    if description.is_empty() {
        description = tool.title.clone().unwrap_or_default();
    }
    let what = if read_only {
        "read-only"
    } else if says_read_only {
        "says it is read-only, but the server is not trusted: a call waits for approval like any change"
    } else if destructive {
        "may change or delete data"
    } else {
        "may add data"
    };
    let description = format!("{description} (MCP server `{server}`; {what})").trim().to_owned();
    let mut parameters = Value::Object((*tool.input_schema).clone());
    if parameters.get("type").is_none() {
        parameters["type"] = Value::String("object".into());
    }
    let effects = if read_only { Effects::READ_ONLY } else { Effects { external: true, ..Effects::default() } };
    let mut decl = ToolDecl::read_only(&prefixed(server, &tool.name), &description, parameters).with_effects(effects);
    decl.idempotent = idempotent;
    decl.source = Some("mcp".into());
    decl
}

/// The text the model sees for a result, and whether it is an error.
fn render(result: &CallToolResult) -> (String, bool) {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        let value = serde_json::to_value(block).unwrap_or(Value::Null);
        match value.get("type").and_then(Value::as_str) {
            Some("text") => parts.push(value["text"].as_str().unwrap_or("").to_owned()),
            Some("resource") => match value["resource"].get("text").and_then(Value::as_str) {
                Some(text) => parts.push(text.to_owned()),
                None => parts.push(format!("[resource {}]", value["resource"]["uri"].as_str().unwrap_or("?"))),
            },
            Some("resource_link") => parts.push(format!("[resource {}]", value["uri"].as_str().unwrap_or("?"))),
            Some(kind @ ("image" | "audio")) => {
                parts.push(format!("[{kind} {}]", value["mimeType"].as_str().unwrap_or("?")));
            }
            _ => parts.push(value.to_string()),
        }
    }
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    (parts.join("\n"), result.is_error == Some(true))
}

/// The run key of calls made through [`McpServers`] itself (no run lent
/// answers); [`McpServers::for_run`] hands out the others.
const NO_RUN: u64 = 0;

/// Run keys handed out by [`McpServers::for_run`].
static RUNS: AtomicU64 = AtomicU64::new(NO_RUN + 1);

/// The configured servers, connected, as one source of tools.
pub struct McpServers {
    servers: Vec<Arc<Server>>,
}

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.servers.iter().map(|s| &s.spec.name)).finish()
    }
}

impl McpServers {
    /// Starts (or reaches) every server at once and lists its tools; the
    /// first that fails is the error (the others are stopped).
    pub async fn connect(specs: Vec<ServerSpec>) -> Result<McpServers, McpError> {
        let workspace = std::env::current_dir().map_err(|e| McpError::Config {
            server: specs.first().map(|s| s.name.clone()).unwrap_or_default(),
            message: format!("no current folder: {e}"),
        })?;
        McpServers::connect_confined(specs, Confine { settings: noesis_sandbox::Settings::default(), workspace }).await
    }

    /// [`McpServers::connect`], program servers confined by `confine`
    /// (those not `trusted`).
    pub async fn connect_confined(specs: Vec<ServerSpec>, confine: Confine) -> Result<McpServers, McpError> {
        let (all, mut failed) = McpServers::connect_each(specs, confine).await?;
        if failed.is_empty() {
            return Ok(all);
        }
        all.shutdown().await;
        Err(failed.remove(0))
    }

    /// [`McpServers::connect_confined`], a server that cannot be started
    /// left out rather than failing the others: the servers that started,
    /// and why each of the others did not. A configuration error (a bad or
    /// repeated name) is still an error for all.
    pub async fn connect_each(
        specs: Vec<ServerSpec>,
        confine: Confine,
    ) -> Result<(McpServers, Vec<McpError>), McpError> {
        let mut seen = std::collections::BTreeSet::new();
        for spec in &specs {
            names::check_server_name(&spec.name)
                .map_err(|message| McpError::Config { server: spec.name.clone(), message })?;
            if !seen.insert(spec.name.clone()) {
                return Err(McpError::Config { server: spec.name.clone(), message: "configured twice".into() });
            }
        }
        let connecting = specs.into_iter().map(|spec| {
            let confine = confine.clone();
            async move {
                let wake = Arc::new(tokio::sync::Notify::new());
                let server = Arc::new(Server {
                    spec,
                    conn: tokio::sync::Mutex::new(Conn { client: None, gone: None }),
                    tools: Mutex::new(Vec::new()),
                    revision: Arc::new(AtomicU64::new(0)),
                    stale: Arc::new(AtomicBool::new(false)),
                    wake: Arc::clone(&wake),
                    restarted: AtomicBool::new(false),
                    stderr: Arc::new(Mutex::new(Vec::new())),
                    pid: Mutex::new(None),
                    listing: tokio::sync::Mutex::new(()),
                    confine,
                    sandbox: Mutex::new(None),
                    in_flight: Arc::new(asks::InFlight::default()),
                });
                let client = server.start().await?;
                let peer = client.peer().clone();
                server.conn.lock().await.client = Some(client);
                server.list(&peer).await?;
                tokio::spawn(Server::watch(Arc::downgrade(&server), wake));
                Ok::<_, McpError>(server)
            }
        });
        let results = futures_util::future::join_all(connecting).await;
        let mut servers = Vec::new();
        let mut failed = Vec::new();
        for r in results {
            match r {
                Ok(s) => servers.push(s),
                Err(e) => failed.push(e),
            }
        }
        Ok((McpServers { servers }, failed))
    }

    /// The servers' names, in configured order.
    pub fn names(&self) -> Vec<&str> {
        self.servers.iter().map(|s| s.spec.name.as_str()).collect()
    }

    /// Stops every server (closing a child's stdin, then killing it).
    pub async fn shutdown(&self) {
        for server in &self.servers {
            let client = server.conn.lock().await.client.take();
            if let Some(mut client) = client {
                let _ = client.close_with_timeout(Duration::from_secs(5)).await;
            }
        }
    }

    /// The servers as one run's source of tools: a model call or question
    /// a server makes during one of its calls is answered with `answers`
    /// (see [`Answers`]), and what those model calls spent is the call's
    /// spend ([`noesis_agent::ToolOutput::spent`]), so the run's budget
    /// counts it.
    pub fn for_run(self: &Arc<Self>, answers: Answers) -> McpRun {
        McpRun { servers: Arc::clone(self), answers, run: RUNS.fetch_add(1, Ordering::SeqCst) }
    }

    fn call_as(&self, run: u64, answers: Answers, tool: &str, arguments: Value) -> Option<ToolFuture> {
        let (server_name, _) = split_prefixed(tool)?;
        let server = Arc::clone(self.servers.iter().find(|s| s.spec.name == server_name)?);
        let tool = tool.to_owned();
        Some(Box::pin(async move {
            match server.remote(&tool) {
                Some(offered) => server.call_for(run, answers, offered, arguments).await,
                None => ToolOutput::error(format!(
                    "the MCP server `{}` offers no tool `{tool}` now (its tools changed or it stopped)",
                    server.spec.name
                )),
            }
        }))
    }

    /// The process id of a child-process server's current process.
    pub fn pid(&self, server: &str) -> Option<u32> {
        let server = self.servers.iter().find(|s| s.spec.name == server)?;
        *server.pid.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl ToolSource for McpServers {
    fn decls(&self) -> Vec<ToolDecl> {
        self.servers
            .iter()
            .flat_map(|s| {
                s.tools.lock().map(|t| t.iter().map(|o| o.decl.clone()).collect()).unwrap_or_else(|_| Vec::new())
            })
            .collect()
    }

    fn revision(&self) -> u64 {
        self.servers.iter().fold(0u64, |acc, s| acc.wrapping_add(s.revision.load(Ordering::SeqCst)))
    }

    fn call(&self, tool: &str, arguments: Value) -> Option<ToolFuture> {
        self.call_as(NO_RUN, Answers::default(), tool, arguments)
    }
}

/// The servers as one run's source of tools ([`McpServers::for_run`]).
pub struct McpRun {
    servers: Arc<McpServers>,
    answers: Answers,
    run: u64,
}

impl std::fmt::Debug for McpRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpRun").field("servers", &self.servers).field("answers", &self.answers).finish()
    }
}

impl ToolSource for McpRun {
    fn decls(&self) -> Vec<ToolDecl> {
        self.servers.decls()
    }

    fn revision(&self) -> u64 {
        self.servers.revision()
    }

    fn call(&self, tool: &str, arguments: Value) -> Option<ToolFuture> {
        self.servers.call_as(self.run, self.answers.clone(), tool, arguments)
    }
}
