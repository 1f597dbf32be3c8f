//! The server over a stub [`Modules`]: everything it knows of noesis comes
//! through the traits. (The tests over a real module service are in
//! noesis-serve, which implements them.)

use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_util::future::BoxFuture;
use noesis_modules::{Failure, Module};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{Listed, Mcp, ModuleCall, Modules};

/// Two modules, one that does not load; runs echo what they were asked.
#[derive(Default)]
struct Stub {
    calls: Mutex<Vec<(&'static str, ModuleCall)>>,
}

impl Modules for Stub {
    fn run(&self, call: ModuleCall, _: CancellationToken) -> BoxFuture<'_, Value> {
        self.calls.lock().unwrap().push(("run", call.clone()));
        Box::pin(async move { json!({"ok": true, "data": {"module": call.module}, "meta": {}}) })
    }

    fn compose(&self, call: ModuleCall, _: CancellationToken) -> BoxFuture<'_, Value> {
        self.calls.lock().unwrap().push(("compose", call));
        Box::pin(async { json!({"ok": false, "error": {"code": "E4006", "message": "no"}, "meta": {}}) })
    }

    fn list(&self) -> Vec<Listed> {
        let listed = |name: &str, valid| Listed {
            name: name.into(),
            valid,
            responsibility: Some(format!("{name} does things")),
            summary: json!({"name": name, "valid": valid}),
        };
        vec![listed("meeting-details", true), listed("broken", false)]
    }

    fn info(&self, name: &str) -> Result<Value, Value> {
        Ok(json!({"name": name, "version": "1"}))
    }

    fn module(&self, name: &str) -> Result<Arc<Module>, Value> {
        let found = noesis_modules::search::SearchPath::default().resolve(name).map_err(|e| json!(e.to_string()))?;
        found.load().map(Arc::new).map_err(|e| json!(e.to_string()))
    }

    fn refuse(&self, failure: Failure, _: Instant) -> Value {
        let mut envelope = failure.into_envelope();
        envelope["meta"]["refused_by"] = json!("stub");
        envelope
    }
}

fn answer(mcp: &Arc<Mcp>, message: Value) -> Value {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(mcp.handle_line(&message.to_string())).unwrap()
}

fn call(mcp: &Arc<Mcp>, name: &str, arguments: Value) -> Value {
    let m =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}});
    answer(mcp, m)["result"].clone()
}

#[test]
fn the_server_reaches_noesis_only_through_the_modules_trait() {
    let stub = Arc::new(Stub::default());
    let mcp = Mcp::new(Arc::clone(&stub) as Arc<dyn Modules>);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                      "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    assert_eq!(answer(&mcp, init)["result"]["protocolVersion"], "2025-11-25");

    let r = call(&mcp, "run", json!({"module": "m", "input": {"a": 1}, "args": "x y", "provider": "p", "model": "q"}));
    assert_eq!((&r["isError"], &r["structuredContent"]["data"]["module"]), (&json!(false), &json!("m")), "{r}");
    let expected = ModuleCall {
        module: "m".into(),
        input: Some(json!({"a": 1})),
        args: Some("x y".into()),
        provider: Some("p".into()),
        model: Some("q".into()),
    };
    assert_eq!(stub.calls.lock().unwrap()[0], ("run", expected));
    // A failure envelope from the program is a tool error, with the MCP hint for E4006.
    let r = call(&mcp, "compose", json!({"module": "m"}));
    assert_eq!(r["isError"], true);
    assert!(r["structuredContent"]["error"]["suggestion"].as_str().unwrap().contains("`list`"), "{r}");
    // Bad arguments are refused through the program's `refuse` (2025-11-25).
    let r = call(&mcp, "run", json!({"module": 3}));
    assert_eq!(
        (&r["structuredContent"]["error"]["code"], &r["structuredContent"]["meta"]["refused_by"]),
        (&json!("E1003"), &json!("stub")),
        "{r}"
    );
    assert_eq!(stub.calls.lock().unwrap().len(), 2, "a refused call never reaches the program");

    let r = call(&mcp, "list", json!({}));
    assert_eq!(
        r["structuredContent"]["modules"],
        json!([{"name": "meeting-details", "valid": true}, {"name": "broken", "valid": false}])
    );
    // Only modules that load are resources and prompts.
    let resources = answer(&mcp, json!({"jsonrpc": "2.0", "id": 2, "method": "resources/list"}));
    let uris: Vec<&Value> = resources["result"]["resources"].as_array().unwrap().iter().map(|r| &r["uri"]).collect();
    assert_eq!(uris, [&json!("module://meeting-details")]);
    let prompts = answer(&mcp, json!({"jsonrpc": "2.0", "id": 3, "method": "prompts/list"}));
    let listed = &prompts["result"]["prompts"];
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{prompts}");
    assert_eq!(
        (&listed[0]["name"], &listed[0]["description"]),
        (&json!("meeting-details"), &json!("meeting-details does things"))
    );
    // No `agent` tool without agents.
    let tools = answer(&mcp, json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}));
    assert!(tools["result"]["tools"].as_array().unwrap().iter().all(|t| t["name"] != "agent"), "{tools}");
}
