//! The dashboard through the binary: `noesis ui` and `noesis serve` on a
//! store prepared with real sessions, module runs and an agent run whose
//! texts are hostile; pages fetched over a real socket.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Stdio};

use noesis_testkit::{FakeServer, Reply};

use crate::support::{Work, output};

pub(crate) struct Page {
    pub(crate) status: u16,
    headers: String,
    pub(crate) body: String,
}

fn http(base: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Page {
    let addr = base.trim_start_matches("http://").trim_end_matches('/');
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let mut req =
        format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    Page { status, headers: head.to_ascii_lowercase(), body: body.to_owned() }
}

pub(crate) fn get(base: &str, path: &str) -> Page {
    http(base, "GET", path, &[("accept", "text/html")], "")
}

pub(crate) struct Running(Child);

/// A `noesis ui`: its process, its base URL, and the one-time sign-in link
/// it printed.
pub(crate) struct Ui {
    _running: Running,
    pub(crate) base: String,
    pub(crate) link: String,
}

impl Ui {
    /// Opens the sign-in link as a browser would: the session cookie
    /// (`noesis_session=ID`).
    pub(crate) fn sign_in(&self) -> String {
        let path = self.link.trim_start_matches(&self.base);
        let page = http(&self.base, "GET", path, &[("accept", "text/html")], "");
        assert_eq!(page.status, 303, "{}", page.body);
        let line = page.headers.lines().find(|l| l.starts_with("set-cookie:")).unwrap();
        line.split_once(':').unwrap().1.trim().split(';').next().unwrap().to_owned()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `noesis ui --port 0`: it and its base URL.
pub(crate) fn ui(work: &Work) -> (Ui, String) {
    let ui = ui_with(work, &[]);
    let base = ui.base.clone();
    (ui, base)
}

/// [`ui`] with more arguments.
fn ui_with(work: &Work, extra: &[&str]) -> Ui {
    let mut child = work
        .noesis_std()
        .args(["ui", "--port", "0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("http://127.0.0.1:") && line.contains("/login?once="), "{line}");
    let link = line.trim().to_owned();
    let base = link.split("/login").next().unwrap().to_owned();
    Ui { _running: Running(child), base, link }
}

fn frames(work: &Work) -> Vec<serde_json::Value> {
    output(work.noesis_bare().args(["frames", "list", "--json"])).json().as_array().unwrap().clone()
}

const EVIL_TASK: &str = "<img src=x onerror=alert(1)> [click](javascript:alert(2))";
const EVIL_ANSWER: &str = "<script>alert(3)</script><a href=\"javascript:alert(4)\">go</a>";

/// A store with two sessions (a.py changed between them) and an agent run
/// with hostile texts that read a.py (so the second session invalidated
/// it); returns the run's root frame.
pub(crate) fn prepare(work: &Work) -> serde_json::Value {
    work.write("a.py", "a = 1\n");
    assert_eq!(output(work.noesis_bare().args(["session", "start", "--prompt", "first look"])).code, 0);
    let server = FakeServer::start(vec![
        Reply::Status(
            200,
            noesis_testkit::tool_call_completion("r1", "read_file", &serde_json::json!({"path": "a.py"})).to_string(),
            vec![],
        ),
        Reply::Chat(EVIL_ANSWER.into()),
    ])
    .unwrap();
    let o = output(
        work.noesis_bare()
            .env("OPENAI_BASE_URL", server.base_url())
            .env("OPENAI_API_KEY", "sk-test")
            .args(["agent", EVIL_TASK, "--run-id", "evil"]),
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    work.write("a.py", "a = 2\n");
    assert_eq!(output(work.noesis_bare().args(["session", "start", "--prompt", "second look"])).code, 0);
    let all = frames(work);
    let root = all.iter().find(|f| f["query"] == EVIL_TASK).unwrap();
    assert_eq!(root["status"], "invalidated");

    root.clone()
}

#[test]
fn sessions_trees_and_frames_render_escaped_under_the_csp() {
    let work = Work::new();
    let root = prepare(&work);
    // A run paused for approval.
    let server = FakeServer::start(vec![Reply::Status(
        200,
        noesis_testkit::tool_call_completion("w1", "write_file", &serde_json::json!({"path": "b.txt", "content": "x"}))
            .to_string(),
        vec![],
    )])
    .unwrap();
    let o =
        output(work.noesis_bare().env("OPENAI_BASE_URL", server.base_url()).env("OPENAI_API_KEY", "sk-test").args([
            "agent",
            "Write b.txt",
            "--run-id",
            "paused",
        ]));
    assert_eq!(o.code, 3, "{}", o.stderr);
    let (_ui, base) = ui(&work);
    let index = get(&base, "/");
    assert_eq!(index.status, 200, "{}", index.body);
    assert!(
        index.headers.contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{}",
        index.headers
    );
    assert!(
        index.headers.contains("x-frame-options: deny") && index.headers.contains("x-content-type-options: nosniff")
    );
    assert!(index.body.contains("first look") && index.body.contains("second look"), "{}", index.body);
    // The second session: what changed, what it invalidated and why.
    // Newest first: the first session listed is the second one.
    let second = index.body.split("href=\"/sessions/").nth(1).unwrap().split('"').next().unwrap().to_owned();
    let page = get(&base, &format!("/sessions/{second}"));
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("Changed (1)") && page.body.contains(">a.py<"), "{}", page.body);
    assert!(page.body.contains("file a.py changed"), "the reason is shown: {}", page.body);
    // The agent run's frame: hostile text shown as text, never as markup.
    let id = root["frame_id"].as_str().unwrap();
    let page = get(&base, &format!("/frames/{id}"));
    assert_eq!(page.status, 200);
    for raw in ["<img src=x", "<script>alert", "href=\"javascript:", "<a href=\"javascript"] {
        assert!(!page.body.contains(raw), "`{raw}` reached the page: {}", page.body);
    }
    assert!(page.body.contains("&lt;img src=x onerror=alert(1)&gt;"), "{}", page.body);
    assert!(page.body.contains("&lt;script&gt;alert(3)&lt;/script&gt;"), "{}", page.body);
    assert_eq!(page.body.matches("<script").count(), 1, "only our own script file");
    assert!(page.body.contains("status-invalidated\">invalidated<"), "a word, not only a colour");
    assert!(page.body.contains("changed since"), "the evidence file changed since: {}", page.body);
    assert!(page.body.contains("model turn 1") && page.body.contains("read_file"), "the tree below it");
    // Search by text, file and status.
    let found = get(&base, "/frames?text=model+turn&status=invalidated");
    assert_eq!(found.status, 200);
    assert!(found.body.contains("model turn 1") && !found.body.contains("first look"), "{}", found.body);
    let by_file = get(&base, "/frames?file=a.py");
    assert!(by_file.body.contains("read_file"), "{}", by_file.body);
    assert_eq!(get(&base, "/frames?status=nonsense").status, 400);
    assert_eq!(get(&base, "/frames/not-a-frame").status, 404);
    assert_eq!(get(&base, "/sessions/nope").status, 404);
    // Agent runs: the list, a finished run's timeline, a paused run's decision.
    let runs = get(&base, "/runs");
    assert_eq!(runs.status, 200);
    assert!(runs.body.contains("href=\"/runs/evil\"") && runs.body.contains("awaiting_approval"), "{}", runs.body);
    let evil = get(&base, "/runs/evil");
    assert_eq!(evil.status, 200);
    assert!(evil.body.contains("<code>read_file</code>") && evil.body.contains(">completed<"), "{}", evil.body);
    assert!(evil.body.contains("&lt;script&gt;alert(3)") && !evil.body.contains("<script>alert"), "{}", evil.body);
    assert!(evil.body.contains(&format!("href=\"/frames/{id}\"")), "the run links its frame");
    let paused = get(&base, "/runs/paused");
    assert!(paused.body.contains("Waiting for a decision (1)"), "{}", paused.body);
    assert!(paused.body.contains("noesis agent approve paused w1 --hash "), "{}", paused.body);
    assert_eq!(get(&base, "/runs/nope").status, 404);
    // Usage: the two runs' model calls, charted as SVG, under the CSP.
    let usage = get(&base, "/usage");
    assert_eq!(usage.status, 200);
    assert!(usage.headers.contains("content-security-policy"), "{}", usage.headers);
    assert!(usage.body.contains("<svg class=\"chart\"") && usage.body.contains("model call(s)"), "{}", usage.body);
    assert!(usage.body.contains("<td>openai/"), "{}", usage.body);
    let episodes = get(&base, "/episodes");
    assert!(episodes.status == 200 && episodes.body.contains("No episodes yet"), "{}", episodes.body);
    let js = get(&base, "/assets/app.js");
    assert!(js.status == 200 && js.headers.contains("text/javascript"), "{}", js.headers);
}

#[test]
fn off_loopback_rules_every_page_and_api_needs_the_token_and_a_browser_signs_in() {
    let work = Work::new();
    let mut child = work
        .noesis_std()
        .args(["serve", "--port", "0", "--token", "s3cret-token", "--provider", "test"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    while !line.contains("listening on") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "the server did not start");
    }
    let _running = Running(child);
    let base = line.split("listening on ").nth(1).unwrap().split(' ').next().unwrap().to_owned();
    for path in ["/", "/frames", "/frames/x", "/sessions/x", "/assets/app.js", "/modules"] {
        let page = get(&base, path);
        assert_eq!(page.status, 401, "{path}");
        assert!(page.body.contains("name=\"token\""), "a browser is asked for the token: {path}");
    }
    let api = http(&base, "GET", "/modules", &[], "");
    assert_eq!(api.status, 401);
    assert!(api.body.contains("E4007"));
    let bearer = http(&base, "GET", "/", &[("authorization", "Bearer s3cret-token")], "");
    assert_eq!(bearer.status, 200);
    let wrong = http(&base, "POST", "/login", &[("content-type", "application/x-www-form-urlencoded")], "token=nope");
    assert_eq!(wrong.status, 401);
    assert!(!wrong.headers.contains("set-cookie"));
    let signed =
        http(&base, "POST", "/login", &[("content-type", "application/x-www-form-urlencoded")], "token=s3cret-token");
    assert_eq!(signed.status, 303);
    assert!(
        signed.headers.contains("set-cookie: noesis_session=")
            && signed.headers.contains("httponly")
            && signed.headers.contains("samesite=strict")
            && !signed.headers.contains("secure"),
        "{}",
        signed.headers
    );
    // The cookie holds a session id the server made, never the token.
    assert!(!signed.headers.contains("s3cret-token"), "{}", signed.headers);
    let line = signed.headers.lines().find(|l| l.starts_with("set-cookie:")).unwrap();
    let session = line.split_once(':').unwrap().1.trim().split(';').next().unwrap().to_owned();
    let page = http(&base, "GET", "/", &[("accept", "text/html"), ("cookie", &session)], "");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.headers.contains("content-security-policy"));
    for stale in ["noesis_session=old", "noesis_session=s3cret-token", "noesis_token=s3cret-token"] {
        let page = http(&base, "GET", "/", &[("accept", "text/html"), ("cookie", stale)], "");
        assert_eq!(page.status, 401, "{stale}");
    }
}

#[test]
fn a_module_runs_from_a_form_generated_from_its_input_schema() {
    let work = Work::new();
    let modules = crate::support::example_module("code-simplifier").parent().unwrap().to_string_lossy().into_owned();
    let ui = ui_with(&work, &["--modules", &modules, "--provider", "test"]);
    let (base, cookie) = (ui.base.clone(), ui.sign_in());
    let list = get(&base, "/catalog");
    assert_eq!(list.status, 200);
    assert!(
        list.body.contains("href=\"/catalog/code-simplifier\"") && list.body.contains("task-prioritizer"),
        "{}",
        list.body
    );
    let form = get(&base, "/catalog/code-simplifier");
    assert_eq!(form.status, 200);
    assert!(
        form.body.contains("<form class=\"run\" method=\"post\" action=\"/catalog/code-simplifier\">"),
        "{}",
        form.body
    );
    assert!(form.body.contains("<textarea name=\"code\""), "a field per input property: {}", form.body);
    assert!(form.body.contains("Input schema") && form.body.contains("Data schema"));
    let form_type = ("content-type", "application/x-www-form-urlencoded");
    // Not signed in: the sign-in page, and nothing runs.
    let refused = http(&base, "POST", "/catalog/code-simplifier", &[form_type, ("accept", "text/html")], "code=x");
    assert!(refused.status == 401 && refused.body.contains("name=\"token\""), "{}", refused.body);
    let ran = http(
        &base,
        "POST",
        "/catalog/code-simplifier",
        &[form_type, ("cookie", &cookie)],
        "code=x+%3D+1+%2B+0&language=python",
    );
    assert_eq!(ran.status, 200, "{}", ran.body);
    assert!(ran.body.contains("status-completed\">ok<"), "{}", ran.body);
    assert!(ran.body.contains("&quot;ok&quot;: true"), "the envelope, escaped: {}", ran.body);
    assert!(ran.body.contains(">x = 1 + 0</textarea>"), "the form keeps what was sent");
    // From another site: refused before anything runs.
    let evil = http(
        &base,
        "POST",
        "/catalog/code-simplifier",
        &[form_type, ("cookie", &cookie), ("origin", "https://evil.example")],
        "code=x",
    );
    assert_eq!(evil.status, 403);
    assert_eq!(get(&base, "/catalog/no-such-module").status, 404);
}

#[test]
fn a_suspended_frame_is_resumed_from_its_page() {
    let work = Work::new();
    work.write("a.py", "a = 1\n");
    assert_eq!(output(work.noesis_bare().args(["session", "start", "--prompt", "look"])).code, 0);
    // A frame set aside (as a pivot leaves one), written straight into the store.
    let project = noesis_frames::project::identify(work.path()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let id = rt.block_on(async {
        let store = noesis_store::open(&work.path().join(".noesis/noesis.db").to_string_lossy()).await.unwrap();
        let frame = noesis_frames::Draft {
            status: Some(noesis_frames::Status::Suspended),
            ..noesis_frames::Draft::new("an approach set aside")
        }
        .into_frame(&project.project_id, None, None, noesis_frames::Timestamp::now())
        .unwrap();
        store.insert_frames(std::slice::from_ref(&frame)).await.unwrap();
        frame.frame_id.to_string()
    });
    let (ui, base) = ui(&work);
    let cookie = ui.sign_in();
    let page = get(&base, &format!("/frames/{id}"));
    assert!(page.body.contains(&format!("action=\"/frames/{id}/resume\"")), "{}", page.body);
    let cross = http(
        &base,
        "POST",
        &format!("/frames/{id}/resume"),
        &[("cookie", &cookie), ("origin", "https://evil.example")],
        "",
    );
    assert_eq!(cross.status, 403);
    let unsigned = http(&base, "POST", &format!("/frames/{id}/resume"), &[], "");
    assert_eq!(unsigned.status, 401, "no credential, no change");
    let resumed = http(&base, "POST", &format!("/frames/{id}/resume"), &[("cookie", &cookie)], "");
    assert_eq!(resumed.status, 303);
    assert!(resumed.headers.contains(&format!("location: /frames/{id}")), "{}", resumed.headers);
    let shown = output(work.noesis_bare().args(["frames", "show", &id, "--json"])).json();
    assert_eq!(shown["status"], "active");
    assert_eq!(shown["timestamps"]["history"].as_array().unwrap().last().unwrap()["reason"], "resumed");
    let again = http(&base, "POST", &format!("/frames/{id}/resume"), &[("cookie", &cookie)], "");
    assert_eq!(again.status, 409, "only a suspended frame resumes");
}

/// Module runs count in /usage: each run's frame carries what it spent.
#[test]
fn module_runs_count_in_the_usage_page() {
    let work = Work::new();
    let reply = serde_json::json!({"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "removed + 0"},
        "data": {"simplified_code": "x = 1", "changes": [], "behavior_equivalence": true, "summary": "s", "rationale": "r"}})
    .to_string();
    let llm = FakeServer::start(vec![Reply::Chat(reply)]).unwrap();
    for _ in 0..2 {
        let o = output(
            work.noesis_bare()
                .args(["run", "code-simplifier", "--input", r#"{"code": "x = 1 + 0"}"#])
                .env("OPENAI_BASE_URL", llm.base_url())
                .env("OPENAI_API_KEY", "sk-test"),
        );
        assert_eq!(o.code, 0, "{}", o.stderr);
    }
    let (_ui, base) = ui(&work);
    let page = get(&base, "/usage");
    assert_eq!(page.status, 200);
    // Two runs of one call each; the fake server reports 11 tokens in and
    // 7 out per call.
    assert!(page.body.contains("2 model call(s), 22 input and 14 output tokens"), "{}", page.body);
    assert!(page.body.contains("<svg class=\"chart\""), "{}", page.body);
}

/// `noesis ui` prints a link that trades itself, once, for a session
/// cookie; the cookie is a session id, neither that link's secret nor the
/// server's token.
#[test]
fn the_ui_link_signs_a_browser_in_once_with_a_session_cookie() {
    let work = Work::new();
    let (ui, _) = ui(&work);
    let secret = ui.link.split("once=").nth(1).unwrap().to_owned();
    assert_eq!(secret.len(), 64, "{}", ui.link);
    let path = ui.link.trim_start_matches(&ui.base).to_owned();
    let first = http(&ui.base, "GET", &path, &[("accept", "text/html")], "");
    assert_eq!(first.status, 303, "{}", first.body);
    assert!(first.headers.contains("location: /"), "{}", first.headers);
    let line = first.headers.lines().find(|l| l.starts_with("set-cookie:")).unwrap().to_owned();
    assert!(line.contains("httponly") && line.contains("samesite=strict") && line.contains("path=/"), "{line}");
    let cookie = line.split_once(':').unwrap().1.trim().split(';').next().unwrap().to_owned();
    let session = cookie.strip_prefix("noesis_session=").unwrap();
    assert_eq!(session.len(), 64, "{line}");
    let token_dir = work.path().join(".noesis/serve");
    let token_file = std::fs::read_dir(&token_dir).unwrap().next().unwrap().unwrap().path();
    let token = std::fs::read_to_string(token_file).unwrap().trim().to_owned();
    assert!(session != secret && session != token, "the cookie is a session id: {line}");
    let again = http(&ui.base, "GET", &path, &[("accept", "text/html")], "");
    assert_eq!(again.status, 401, "the link works once");
    assert!(!again.headers.contains("set-cookie"), "{}", again.headers);
    // The session changes what the link's secret cannot.
    let form_type = ("content-type", "application/x-www-form-urlencoded");
    let with = http(&ui.base, "POST", "/frames/nope/resume", &[form_type, ("cookie", &cookie)], "");
    assert_eq!(with.status, 409, "signed in, the frame is looked up: {}", with.body);
    let with_secret = format!("noesis_session={secret}");
    let without = http(&ui.base, "POST", "/frames/nope/resume", &[form_type, ("cookie", &with_secret)], "");
    assert_eq!(without.status, 401);
}
