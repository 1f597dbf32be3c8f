//! A fake LLM server on 127.0.0.1 for tests and benchmarks.
//!
//! It speaks real HTTP/1.1 (keep-alive and chunked streaming included) and
//! answers every `POST` with the next scripted reply, so provider code for
//! any wire format (OpenAI, Anthropic, Gemini, Ollama) is tested over a real
//! socket, never through a mocked trait. [`Reply::Chat`] builds an OpenAI
//! chat completion; other formats script their bodies with [`Reply::Status`]
//! and [`Reply::Stream`]. Faults are replies too: truncated bodies, a slow
//! drip, a reset connection. Plain threads and `std::net`: usable from sync
//! and async tests alike.
#![deny(missing_docs)]
#![allow(clippy::print_stdout, clippy::print_stderr)]

pub mod skip;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with a chat completion whose message content is this text.
    Chat(String),
    /// 200 with a chat completion and the given `finish_reason`.
    ChatFinish(String, String),
    /// Any status, body and extra headers.
    Status(u16, String, Vec<(String, String)>),
    /// Wait, then give the inner reply.
    Delay(Duration, Box<Reply>),
    /// Close the connection without answering.
    Close,
    /// Reset the connection (TCP RST) without answering.
    Reset,
    /// 200 with a chunked body: each string is sent as it is (SSE events
    /// should end with a blank line, NDJSON lines with `\n`), `interval`
    /// apart. The content type is `text/event-stream` unless every chunk
    /// starts with `{` (then `application/x-ndjson`).
    Stream(Vec<String>, Duration),
    /// Like [`Reply::Stream`] but the connection is dropped after the
    /// chunks, without the closing chunk.
    StreamCut(Vec<String>, Duration),
    /// 200 whose `content-length` promises more than the body sent before
    /// the connection closes.
    Truncated(String),
    /// 200 with a complete body sent one byte every `interval`.
    Drip(String, Duration),
    /// The reply computed from the request's JSON body, so the answer can
    /// follow the conversation (a client restarted mid-run gets the reply
    /// its history calls for, not the next one in a list).
    Respond(Responder),
}

/// A function from a request body to a reply (see [`Reply::Respond`]).
#[derive(Clone)]
pub struct Responder(pub Arc<dyn Fn(&Value) -> Reply + Send + Sync>);

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Responder(..)")
    }
}

impl Reply {
    /// [`Reply::Respond`] from a closure.
    pub fn respond(f: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Reply {
        Reply::Respond(Responder(Arc::new(f)))
    }
}

/// An OpenAI chat completion whose message asks for one tool call.
pub fn tool_call_completion(id: &str, name: &str, arguments: &Value) -> Value {
    let mut body = chat_completion("", "tool_calls");
    body["choices"][0]["message"] = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": id, "type": "function", "function": {"name": name, "arguments": arguments.to_string()}}
    ]});
    body
}

/// A reply for an agent loop in the OpenAI format: while the conversation
/// holds fewer than `rounds` tool results, one call of `tool` with
/// `arguments(k)` (k counts from 0); then `answer`. It depends only on the
/// request, so a run that is stopped and resumed gets the same script.
pub fn tool_loop(
    tool: &'static str,
    rounds: usize,
    arguments: impl Fn(usize) -> Value + Send + Sync + 'static,
    answer: &'static str,
) -> Reply {
    Reply::respond(move |request| {
        let done = request["messages"]
            .as_array()
            .map(|m| m.iter().filter(|m| m["role"] == "tool").count())
            .unwrap_or_default();
        if done < rounds {
            let body = tool_call_completion(&format!("call_{done}"), tool, &arguments(done));
            Reply::Status(200, body.to_string(), vec![])
        } else {
            Reply::Chat(answer.to_owned())
        }
    })
}

/// The text of every message of an OpenAI-style request body, one after
/// another (a non-string content as its JSON), for replies that depend on
/// what the prompt holds.
pub fn said(request: &Value) -> String {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m["content"].as_str().map_or_else(|| m["content"].to_string(), str::to_owned))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `program` in `dir` with `HOME` set to `home`, no colour, none of the
/// caller's provider, noesis or OpenTelemetry variables, and an OpenAI
/// provider pointing at `server` (for benchmarks that run the binary).
pub fn command_against(
    program: &std::path::Path,
    dir: &std::path::Path,
    home: &std::path::Path,
    server: &FakeServer,
) -> std::process::Command {
    let mut c = std::process::Command::new(program);
    c.current_dir(dir).env("HOME", home).env("NO_COLOR", "1");
    for (k, _) in std::env::vars_os() {
        let name = k.to_string_lossy();
        if ["LLM_", "NOESIS_", "OPENAI_", "ANTHROPIC_", "GEMINI_", "OLLAMA_", "OTEL_"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            c.env_remove(&k);
        }
    }
    c.env("OPENAI_BASE_URL", server.base_url()).env("OPENAI_API_KEY", "sk-bench");
    c
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Received {
    /// `POST`, `GET`, …
    pub method: String,
    /// The request path.
    pub path: String,
    /// Headers, names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body as text.
    pub body: String,
}

impl Received {
    /// The body parsed as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

struct State {
    replies: Vec<Reply>,
    next: AtomicUsize,
    received: Mutex<Vec<Received>>,
    stop: AtomicBool,
    latency: Duration,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// A running fake server; stops accepting when dropped.
pub struct FakeServer {
    addr: SocketAddr,
    state: Arc<State>,
}

impl FakeServer {
    /// Starts a server on an ephemeral port of 127.0.0.1. Replies are served
    /// in order; the last one repeats.
    pub fn start(replies: Vec<Reply>) -> std::io::Result<FakeServer> {
        FakeServer::start_with(replies, 0, Duration::ZERO)
    }

    /// Like [`FakeServer::start`], on `port` (0 for any) and adding `latency`
    /// before every answer.
    pub fn start_with(replies: Vec<Reply>, port: u16, latency: Duration) -> std::io::Result<FakeServer> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        let addr = listener.local_addr()?;
        let state = Arc::new(State {
            replies,
            next: AtomicUsize::new(0),
            received: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            latency,
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        });
        let st = Arc::clone(&state);
        thread::spawn(move || {
            for conn in listener.incoming() {
                if st.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = conn else { continue };
                let st = Arc::clone(&st);
                thread::spawn(move || serve(stream, &st));
            }
        });
        Ok(FakeServer { addr, state })
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The socket address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// The most requests that were ever being answered at the same time:
    /// received, and their answer not yet written (or abandoned). Shows by
    /// behaviour whether a client's calls overlapped.
    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

/// An OpenAI chat-completion body with `content` as the assistant message.
pub fn chat_completion(content: &str, finish_reason: &str) -> Value {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": finish_reason
        }],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    })
}

fn serve(stream: TcpStream, st: &State) {
    let _ = stream.set_nodelay(true);
    let Ok(read_half) = stream.try_clone() else { return };
    let mut reader = BufReader::new(read_half);
    let mut out = stream;
    loop {
        let Some(req) = read_request(&mut reader) else { return };
        let keep_alive = !req.headers.iter().any(|(k, v)| k == "connection" && v.eq_ignore_ascii_case("close"));
        let is_chat = req.method == "POST";
        let body = if is_chat { req.json() } else { Value::Null };
        let listing = req.method == "GET"
            && (req.path.ends_with("/models") || req.path.ends_with("/api/tags") || req.path.contains("/models?"));
        if let Ok(mut r) = st.received.lock() {
            r.push(req);
        }
        let now = st.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        st.max_in_flight.fetch_max(now, Ordering::SeqCst);
        if !st.latency.is_zero() {
            thread::sleep(st.latency);
        }
        let reply = if is_chat {
            let i = st.next.fetch_add(1, Ordering::SeqCst);
            st.replies.get(i).or_else(|| st.replies.last()).cloned().unwrap_or(Reply::Status(
                500,
                "no replies scripted".into(),
                vec![],
            ))
        } else if listing {
            // Enough for a reachability check (`noesis doctor`).
            Reply::Status(200, json!({"data": [], "models": [], "object": "list"}).to_string(), vec![])
        } else {
            Reply::Status(404, json!({"error": {"message": "not found"}}).to_string(), vec![])
        };
        let mut reply = match reply {
            Reply::Respond(f) => (f.0)(&body),
            other => other,
        };
        // A delayed answer is still being worked on: it stays counted.
        while let Reply::Delay(d, inner) = reply {
            thread::sleep(d);
            reply = *inner;
        }
        // Counted out before the answer goes: once the client has read it,
        // it may send its next request (a capped client frees its permit),
        // and that one must not find this one still counted.
        st.in_flight.fetch_sub(1, Ordering::SeqCst);
        let answered = answer(&mut out, reply);
        if !answered || !keep_alive {
            let _ = out.shutdown(Shutdown::Both);
            return;
        }
    }
}

fn answer(out: &mut TcpStream, reply: Reply) -> bool {
    match reply {
        Reply::Chat(content) => write(out, 200, &chat_completion(&content, "stop").to_string(), &[]),
        Reply::ChatFinish(content, reason) => write(out, 200, &chat_completion(&content, &reason).to_string(), &[]),
        Reply::Status(code, body, headers) => write(out, code, &body, &headers),
        Reply::Delay(d, inner) => {
            thread::sleep(d);
            answer(out, *inner)
        }
        Reply::Close => false,
        // Resolved before answering; one that returns itself says nothing.
        Reply::Respond(_) => write(out, 500, "a responder returned a responder", &[]),
        Reply::Reset => {
            // Linger 0 makes close() send RST instead of FIN.
            let _ = socket2::SockRef::from(&*out).set_linger(Some(Duration::ZERO));
            false
        }
        Reply::Stream(chunks, interval) => stream(out, &chunks, interval, true),
        Reply::StreamCut(chunks, interval) => {
            stream(out, &chunks, interval, false);
            false
        }
        Reply::Truncated(body) => {
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                body.len() + 100
            );
            let _ = out.write_all(head.as_bytes()).and_then(|()| out.write_all(body.as_bytes()));
            let _ = out.flush();
            false
        }
        Reply::Drip(body, interval) => {
            let head =
                format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", body.len());
            if out.write_all(head.as_bytes()).is_err() {
                return false;
            }
            for b in body.as_bytes() {
                thread::sleep(interval);
                if out.write_all(std::slice::from_ref(b)).and_then(|()| out.flush()).is_err() {
                    return false;
                }
            }
            true
        }
    }
}

fn stream(out: &mut TcpStream, chunks: &[String], interval: Duration, finish: bool) -> bool {
    let ndjson = !chunks.is_empty() && chunks.iter().all(|c| c.starts_with('{'));
    let kind = if ndjson { "application/x-ndjson" } else { "text/event-stream" };
    let head = format!("HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\ntransfer-encoding: chunked\r\n\r\n");
    if out.write_all(head.as_bytes()).and_then(|()| out.flush()).is_err() {
        return false;
    }
    for (i, c) in chunks.iter().enumerate() {
        if i > 0 && !interval.is_zero() {
            thread::sleep(interval);
        }
        // A zero-length chunk would end the body early.
        if c.is_empty() {
            continue;
        }
        let frame = format!("{:x}\r\n{c}\r\n", c.len());
        if out.write_all(frame.as_bytes()).and_then(|()| out.flush()).is_err() {
            return false;
        }
    }
    finish && out.write_all(b"0\r\n\r\n").and_then(|()| out.flush()).is_ok()
}

/// SSE text for a list of `(event, data)` pairs; an empty event name
/// leaves the `event:` line out.
pub fn sse(events: &[(&str, Value)]) -> Vec<String> {
    events
        .iter()
        .map(|(name, data)| {
            let data = match data {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            if name.is_empty() { format!("data: {data}\n\n") } else { format!("event: {name}\ndata: {data}\n\n") }
        })
        .collect()
}

/// NDJSON lines for a list of JSON values.
pub fn ndjson(values: &[Value]) -> Vec<String> {
    values.iter().map(|v| format!("{v}\n")).collect()
}

fn write(out: &mut TcpStream, status: u16, body: &str, headers: &[(String, String)]) -> bool {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
        reason(status),
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes()).and_then(|()| out.write_all(body.as_bytes())).and_then(|()| out.flush()).is_ok()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Received> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = Vec::new();
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            let k = k.trim().to_ascii_lowercase();
            let v = v.trim().to_owned();
            if k == "content-length" {
                len = v.parse().ok()?;
            }
            headers.push((k, v));
        }
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some(Received { method, path, headers, body: String::from_utf8_lossy(&body).into_owned() })
}
