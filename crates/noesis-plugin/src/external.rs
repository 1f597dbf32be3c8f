//! Plugins as programs: one process per plugin, speaking JSON lines over
//! stdio. Each request is one line `{"id": N, "method": M, "params": P}`;
//! each reply one line `{"id": N, "result": R}` or `{"id": N, "error":
//! {"message": "..."}}`. The first request is `hello`. A reply that is late,
//! not JSON, for another id or of the wrong shape kills the process and is
//! reported; the next call starts it again.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noesis_frames::{CausalFrame, FrameId, Timestamp};
use serde_json::{Value, json};

use crate::PluginError;
use crate::boundary::{ContextSlice, CoreContext, Parsed, Plugin};

/// The protocol version sent in `hello`.
pub const PROTOCOL: u64 = 1;

/// A reply line longer than this is garbage (and the process is killed).
const MAX_LINE: usize = 64 * 1024 * 1024;

/// How to run an external plugin (`[plugins.NAME]` in `noesis.toml`).
#[derive(Debug, Clone, PartialEq)]
pub struct ExternalSpec {
    /// The plugin's name.
    pub name: String,
    /// Program and arguments (no shell).
    pub command: Vec<String>,
    /// Working directory, if not the current one.
    pub cwd: Option<std::path::PathBuf>,
    /// How long one call may take before the process is killed.
    pub timeout: Duration,
}

struct Running {
    child: Child,
    /// Requests go to a writer thread that owns the plugin's stdin, so a
    /// plugin that stops reading blocks that thread, never the caller.
    requests: Option<mpsc::Sender<Vec<u8>>>,
    lines: Receiver<Result<String, String>>,
    next_id: u64,
    stderr_reader: Option<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Stops the process (closing its stdin first) and reaps it.
    fn stop(&mut self) {
        self.requests = None;
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The exit status once the process has ended, waiting at most `limit`;
    /// killed when it is still running then.
    fn ended(&mut self, limit: Duration) -> String {
        let deadline = std::time::Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.to_string(),
                Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                Ok(None) => {
                    self.stop();
                    return "closed its output and was stopped".to_owned();
                }
                Err(e) => return e.to_string(),
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

fn write_requests(mut stdin: ChildStdin, requests: &Receiver<Vec<u8>>) {
    for line in requests {
        if stdin.write_all(&line).and_then(|()| stdin.flush()).is_err() {
            return;
        }
    }
}

/// A plugin run as a program.
pub struct ExternalPlugin {
    spec: ExternalSpec,
    running: Mutex<Option<Running>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

impl ExternalPlugin {
    /// A plugin that starts its program on first use.
    #[must_use]
    pub fn new(spec: ExternalSpec) -> ExternalPlugin {
        ExternalPlugin { spec, running: Mutex::new(None), stderr: Arc::new(Mutex::new(VecDeque::new())) }
    }

    fn stderr_tail(&self) -> String {
        let lines = self.stderr.lock().map(|l| l.iter().cloned().collect::<Vec<_>>().join("\n")).unwrap_or_default();
        if lines.is_empty() { String::new() } else { format!("\nits stderr ended with:\n{lines}") }
    }

    fn start(&self) -> Result<Running, PluginError> {
        let name = &self.spec.name;
        let Some((program, args)) = self.spec.command.split_first() else {
            return Err(PluginError::Spawn { plugin: name.clone(), reason: "no command configured".into() });
        };
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        if let Some(dir) = &self.spec.cwd {
            cmd.current_dir(dir);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| PluginError::Spawn { plugin: name.clone(), reason: format!("`{program}`: {e}") })?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(PluginError::Spawn { plugin: name.clone(), reason: "no pipes".into() });
        };
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || read_lines(stdout, &tx));
        let tail = Arc::clone(&self.stderr);
        if let Ok(mut t) = tail.lock() {
            t.clear();
        }
        let stderr_reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Ok(mut t) = tail.lock() {
                    if t.len() == 20 {
                        t.pop_front();
                    }
                    t.push_back(line);
                }
            }
        });
        let (requests, queue) = mpsc::channel::<Vec<u8>>();
        std::thread::spawn(move || write_requests(stdin, &queue));
        // Dropped on any failure below, which stops the process.
        let mut running =
            Running { child, requests: Some(requests), lines, next_id: 0, stderr_reader: Some(stderr_reader) };
        let hello = self.exchange(&mut running, "hello", &json!({"protocol": PROTOCOL, "plugin": name}))?;
        if hello.get("protocol").and_then(Value::as_u64) != Some(PROTOCOL) {
            return Err(PluginError::Garbage {
                plugin: name.clone(),
                method: "hello".into(),
                detail: format!(
                    "it speaks protocol {}, noesis speaks {PROTOCOL}",
                    hello.get("protocol").unwrap_or(&Value::Null)
                ),
            });
        }
        Ok(running)
    }

    /// One request and its reply on a running process.
    fn exchange(&self, running: &mut Running, method: &str, params: &Value) -> Result<Value, PluginError> {
        let plugin = self.spec.name.clone();
        let id = running.next_id;
        running.next_id += 1;
        let mut line = json!({"id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        let sent = running.requests.as_ref().is_some_and(|r| r.send(line.into_bytes()).is_ok());
        if !sent {
            return Err(PluginError::Crashed {
                plugin,
                method: method.into(),
                detail: format!("its input is closed{}", self.stderr_tail()),
            });
        }
        let reply = match running.lines.recv_timeout(self.spec.timeout) {
            Ok(Ok(line)) => line,
            Ok(Err(why)) => return Err(PluginError::Garbage { plugin, method: method.into(), detail: why }),
            Err(RecvTimeoutError::Timeout) => {
                return Err(PluginError::Timeout { plugin, method: method.into(), after: self.spec.timeout });
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = running.ended(Duration::from_secs(2));
                // Its stderr is complete once the reader sees the pipe close
                // (a child of the plugin may hold it open: wait a little only).
                if let Some(reader) = running.stderr_reader.take() {
                    for _ in 0..100 {
                        if reader.is_finished() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                return Err(PluginError::Crashed {
                    plugin,
                    method: method.into(),
                    detail: format!("it exited ({status}){}", self.stderr_tail()),
                });
            }
        };
        let garbage = |detail: String| PluginError::Garbage { plugin: plugin.clone(), method: method.into(), detail };
        let v: Value =
            serde_json::from_str(&reply).map_err(|e| garbage(format!("not JSON ({e}): {}", clip(&reply))))?;
        if v.get("id").and_then(Value::as_u64) != Some(id) {
            return Err(garbage(format!("a reply for id {} (expected {id})", v.get("id").unwrap_or(&Value::Null))));
        }
        if let Some(err) = v.get("error") {
            let message = err.get("message").and_then(Value::as_str).map_or_else(|| err.to_string(), str::to_owned);
            return Err(PluginError::Failed { plugin, method: method.into(), message });
        }
        v.get("result").cloned().ok_or_else(|| garbage("a reply with neither result nor error".into()))
    }

    /// Calls `method`, starting the program if needed; any failure other
    /// than the plugin's own error reply kills it.
    fn call(&self, method: &str, params: &Value) -> Result<Value, PluginError> {
        let mut guard = self.running.lock().map_err(|_| PluginError::Crashed {
            plugin: self.spec.name.clone(),
            method: method.into(),
            detail: "an earlier call panicked".into(),
        })?;
        if guard.is_none() {
            *guard = Some(self.start()?);
        }
        let Some(running) = guard.as_mut() else { unreachable!("started above") };
        let out = self.exchange(running, method, params);
        if matches!(out, Err(ref e) if !matches!(e, PluginError::Failed { .. })) {
            // Dropping it stops the process.
            guard.take();
        }
        out
    }
}

fn clip(s: &str) -> String {
    let shown = crate::head(s, 200);
    if shown.len() < s.len() { format!("{shown}…") } else { s.to_owned() }
}

/// Reads newline-terminated lines (bounded) and hands them over.
fn read_lines(stdout: impl Read, tx: &mpsc::Sender<Result<String, String>>) {
    let mut reader = BufReader::new(stdout);
    loop {
        let mut buf = Vec::new();
        match reader.by_ref().take(MAX_LINE as u64 + 1).read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let msg = if buf.len() > MAX_LINE {
            Err(format!("a reply line over {MAX_LINE} bytes"))
        } else {
            String::from_utf8(buf)
                .map(|s| s.trim_end_matches(['\n', '\r']).to_owned())
                .map_err(|_| "a reply that is not UTF-8".to_owned())
        };
        let stop = msg.is_err();
        if tx.send(msg).is_err() || stop {
            return;
        }
    }
}

fn string_list(v: &Value, field: &str) -> Result<Vec<String>, String> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| i.as_str().map(str::to_owned).ok_or_else(|| format!("`{field}` must hold strings")))
            .collect(),
        Some(_) => Err(format!("`{field}` must be an array of strings")),
    }
}

impl Plugin for ExternalPlugin {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn transform_input(&self, raw: &Value, ctx: &CoreContext<'_>) -> Result<ContextSlice, PluginError> {
        let method = "transform_input";
        let r = self.call(method, &json!({"raw": raw, "context": ctx.to_json()}))?;
        let bad =
            |detail: String| PluginError::Garbage { plugin: self.spec.name.clone(), method: method.into(), detail };
        let text = r.get("text").and_then(Value::as_str).ok_or_else(|| bad("`text` must be a string".into()))?;
        Ok(ContextSlice {
            text: text.to_owned(),
            input: r.get("input").cloned().unwrap_or(Value::Null),
            files: string_list(&r, "files").map_err(bad)?,
        })
    }

    fn parse_output(&self, raw: &Value, frame: &CausalFrame) -> Result<Parsed, PluginError> {
        let method = "parse_output";
        let r = self.call(method, &json!({"raw": raw, "frame": frame}))?;
        let bad =
            |detail: String| PluginError::Garbage { plugin: self.spec.name.clone(), method: method.into(), detail };
        let conclusion =
            r.get("conclusion").and_then(Value::as_str).ok_or_else(|| bad("`conclusion` must be a string".into()))?;
        let confidence = r
            .get("confidence")
            .and_then(Value::as_f64)
            .filter(|c| (0.0..=1.0).contains(c))
            .ok_or_else(|| bad("`confidence` must be a number from 0 to 1".into()))?;
        let mut parsed = Parsed::new(conclusion, confidence, r.get("data").cloned().unwrap_or(Value::Null));
        let also = r.get("also").cloned().unwrap_or(Value::Null);
        for f in string_list(&also, "files").map_err(|e| bad(format!("also: {e}")))? {
            parsed = parsed.also_file(f);
        }
        for f in string_list(&also, "frames").map_err(|e| bad(format!("also: {e}")))? {
            parsed = parsed.also_frame(FrameId::parse(&f).map_err(|e| bad(format!("also.frames: {e}")))?);
        }
        if let Some(t) = also.get("expires_at").filter(|v| !v.is_null()) {
            let t = t.as_str().ok_or_else(|| bad("also.expires_at must be an RFC 3339 time".into()))?;
            parsed = parsed.expires_at(Timestamp::parse(t).map_err(|e| bad(format!("also.expires_at: {e}")))?);
        }
        Ok(parsed)
    }

    fn store(&self, parsed: &Parsed, frame: &CausalFrame) -> Result<(), PluginError> {
        self.call("store", &json!({"parsed": parsed, "frame": frame})).map(|_| ())
    }
}
