//! The MCP server of `noesis mcp` (`noesis_mcp::server`) over this
//! crate: [`Service`] is the modules it serves, [`McpAgents`] its `agent`
//! tool. The tests here drive the whole server over a real `Service`.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use noesis_agent::AgentRun;
use noesis_agent::events::Event;
use noesis_mcp::server::{AgentTask, Agents, Listed, ModuleCall, Modules};
use noesis_modules::{Failure, Module};
use noesis_runtime::CancellationToken;
use serde_json::Value;

use crate::agents::{AgentRequest, AgentRuns, RequestLimits};
use crate::service::{RunRequest, Service, refuse};

fn request(call: ModuleCall) -> RunRequest {
    let ModuleCall { module, input, args, provider, model } = call;
    RunRequest { module, input, args, provider, model }
}

impl Modules for Service {
    fn run(&self, call: ModuleCall, cancel: CancellationToken) -> BoxFuture<'_, Value> {
        Box::pin(Service::run(self, request(call), None, Some(cancel)))
    }

    fn compose(&self, call: ModuleCall, cancel: CancellationToken) -> BoxFuture<'_, Value> {
        Box::pin(Service::compose(self, request(call), None, Some(cancel)))
    }

    fn list(&self) -> Vec<Listed> {
        Service::list(self)
            .into_iter()
            .map(|m| Listed {
                name: m.name.clone(),
                valid: m.valid,
                responsibility: m.responsibility.clone(),
                summary: serde_json::to_value(&m).unwrap_or(Value::Null),
            })
            .collect()
    }

    fn info(&self, name: &str) -> Result<Value, Value> {
        Service::info(self, name)
    }

    fn module(&self, name: &str) -> Result<Arc<Module>, Value> {
        Service::module(self, name)
    }

    fn refuse(&self, failure: Failure, started: Instant) -> Value {
        refuse(failure, started)
    }
}

/// [`AgentRuns`] as the MCP server's `agent` tool.
pub struct McpAgents(pub Arc<AgentRuns>);

impl std::fmt::Debug for McpAgents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpAgents").finish_non_exhaustive()
    }
}

impl Agents for McpAgents {
    fn start(&self, task: AgentTask) -> BoxFuture<'_, Result<String, String>> {
        let AgentTask { task, approve, tools, max_turns } = task;
        let request = AgentRequest {
            task,
            approve: Some(approve),
            tools,
            limits: RequestLimits { max_turns, ..Default::default() },
            ..Default::default()
        };
        Box::pin(async move { self.0.start(request).await.map_err(|(_, message)| message) })
    }

    fn follow<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move { self.0.follow(id).await.map_err(|(_, message)| message) })
    }

    fn wait<'a>(
        &'a self,
        id: &'a str,
        each: &'a mut (dyn FnMut(&Event) + Send),
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<AgentRun, String>> {
        Box::pin(self.0.wait(id, each, cancel))
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.0.shutdown())
    }
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

    use noesis_mcp::server::{Mcp, PROTOCOL_VERSIONS};

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
