//! Composition end to end: fixture modules written to a temp dir, resolved
//! through the search path, run by `compose::execute`. Dataflow logic runs
//! against an in-process provider that answers per module; timeouts and
//! concurrency run over real HTTP against the fake server.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use noesis_llm::{
    Capabilities, ChatRequest, ChatResponse, EndpointConfig, FinishReason, OpenAiCompatible, Provider, ProviderError,
    RetryPolicy, StructuredMode,
};
use noesis_modules::search::SearchPath;
use noesis_modules::{Module, load_dir, validate_envelope};
use noesis_runtime::compose::{ComposeOptions, ComposeRecord, Outcome, Resolver, SearchResolver, Via, execute};
use noesis_runtime::{RunOptions, run};
use noesis_testkit::{FakeServer, Reply};
use serde_json::{Value, json};

/// A folder of fixture modules.
struct Fixture {
    dir: tempfile::TempDir,
}

const SCHEMA: &str = r#"{"input": {"type": "object"}, "data": {"type": "object", "required": ["rationale"], "properties": {"rationale": {"type": "string"}}}}"#;

impl Fixture {
    fn new() -> Fixture {
        Fixture { dir: tempfile::tempdir().unwrap() }
    }

    /// A module whose prompt starts `MODULE <name>` (how the oracle knows
    /// who asks); `yaml` is added to the manifest.
    fn module(&self, name: &str, yaml: &str, body: &str) -> &Fixture {
        let d = self.dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        let version = if yaml.contains("version:") && !yaml.contains("  version:") { "" } else { "version: 1.0.0\n" };
        let manifest = format!("name: {name}\n{version}responsibility: fixture {name}\ntier: exploration\n{yaml}\n");
        std::fs::write(d.join("module.yaml"), manifest).unwrap();
        std::fs::write(d.join("prompt.md"), format!("MODULE {name}\n{body}\n")).unwrap();
        std::fs::write(d.join("schema.json"), SCHEMA).unwrap();
        self
    }

    /// Writes `file` of module `name` (e.g. to replace its schema).
    fn file(&self, name: &str, file: &str, text: &str) -> &Fixture {
        std::fs::write(self.dir.path().join(name).join(file), text).unwrap();
        self
    }

    fn load(&self, name: &str) -> Arc<Module> {
        Arc::new(load_dir(&self.dir.path().join(name)).unwrap_or_else(|e| panic!("{e}")))
    }

    fn resolver(&self) -> SearchResolver {
        SearchResolver::new(SearchPath { dirs: vec![self.dir.path().to_path_buf()] })
    }
}

fn ok(module: &str, confidence: f64, risk: &str, data: Value) -> Value {
    let mut data = data;
    if data.get("rationale").is_none() {
        data["rationale"] = json!(format!("{module} reasoned"));
    }
    json!({"ok": true, "meta": {"confidence": confidence, "risk": risk, "explain": module}, "data": data})
}

type Answer = dyn Fn(&str, usize) -> Value + Send + Sync;

/// Answers each module by name (the `n`-th call of that module from 0) and
/// keeps every prompt.
struct Oracle {
    answer: Box<Answer>,
    seen: Mutex<Vec<(String, String)>>,
}

impl Oracle {
    fn new(answer: impl Fn(&str, usize) -> Value + Send + Sync + 'static) -> Oracle {
        Oracle { answer: Box::new(answer), seen: Mutex::new(Vec::new()) }
    }

    /// Every module answers `{"from": <name>}` with confidence 0.9, risk low.
    fn plain() -> Oracle {
        Oracle::new(|m, _| ok(m, 0.9, "low", json!({"from": m})))
    }

    fn prompts(&self, module: &str) -> Vec<String> {
        self.seen.lock().unwrap().iter().filter(|(m, _)| m == module).map(|(_, p)| p.clone()).collect()
    }

    fn order(&self) -> Vec<String> {
        self.seen.lock().unwrap().iter().map(|(m, _)| m.clone()).collect()
    }
}

#[async_trait::async_trait]
impl Provider for Oracle {
    fn name(&self) -> &str {
        "oracle"
    }
    fn model(&self) -> &str {
        "o1"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities { json_mode: true, ..Capabilities::default() }
    }
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let prompt = request.messages.last().map(|m| m.content.clone()).unwrap_or_default();
        let module = prompt.lines().next().unwrap_or_default().trim_start_matches("MODULE ").to_owned();
        let n = {
            let mut seen = self.seen.lock().unwrap();
            let n = seen.iter().filter(|(m, _)| *m == module).count();
            seen.push((module.clone(), prompt));
            n
        };
        Ok(ChatResponse {
            text: (self.answer)(&module, n).to_string(),
            model: "o1".into(),
            usage: Some(noesis_llm::Usage { input_tokens: 10, output_tokens: 5 }),
            finish_reason: Some(FinishReason::Stop),
            structured: StructuredMode::Text,
            tool_calls: Vec::new(),
            served_by: None,
        })
    }
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

fn compose(fx: &Fixture, root: &str, provider: &dyn Provider, input: Value) -> ComposeRecord {
    compose_with(fx, root, provider, input, &ComposeOptions::default())
}

fn compose_with(fx: &Fixture, root: &str, provider: &dyn Provider, input: Value, o: &ComposeOptions) -> ComposeRecord {
    let r = block(execute(fx.load(root), &fx.resolver(), provider, input, o));
    assert!(validate_envelope(&r.envelope).is_empty(), "invalid envelope: {:#}", r.envelope);
    assert!(r.steps.iter().all(|s| s.outcome != Outcome::Running), "{:#?}", r.steps);
    r
}

fn code(r: &ComposeRecord) -> &str {
    r.envelope.pointer("/error/code").and_then(Value::as_str).unwrap_or("(ok)")
}

fn step<'r>(r: &'r ComposeRecord, module: &str) -> &'r noesis_runtime::compose::StepTrace {
    r.steps.iter().find(|s| s.module == module).unwrap_or_else(|| panic!("no step {module}: {:#?}", r.steps))
}

#[test]
fn a_module_without_composition_is_exactly_a_run() {
    let fx = Fixture::new();
    fx.module("solo", "", "Say something.");
    let oracle = Oracle::plain();
    let opts = ComposeOptions {
        run: RunOptions { trace_id: Some("t-1".into()), ..RunOptions::default() },
        ..Default::default()
    };
    let composed = compose_with(&fx, "solo", &oracle, json!({"q": 1}), &opts);
    let direct = block(run(&fx.load("solo"), &oracle, json!({"q": 1}), &opts.run));
    let strip = |mut e: Value| {
        e["meta"].as_object_mut().unwrap().remove("latency_ms");
        e
    };
    assert_eq!(strip(composed.envelope.clone()), strip(direct.envelope));
    assert_eq!(composed.steps.len(), 1);
    assert_eq!(composed.steps[0].via, Via::Root);
    assert_eq!(composed.root.as_ref().unwrap().prompt, direct.prompt);
}

/// A composition is one trace: a `compose` span with each step's
/// `run_module` span under it (its model call under that), and every step
/// keeps the ids of its span for its frame.
#[test]
fn a_composition_is_one_trace_with_a_span_per_step() {
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    let fx = Fixture::new();
    fx.module("parent", "", "Facts: @call:facts({\"topic\": \"rust\"})\nDone.").module("facts", "", "List facts.");
    let exporter = InMemorySpanExporter::default();
    let traces = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
    let _guard = tracing::subscriber::set_default(noesis_trace::subscriber(&traces, false));
    let r = compose(&fx, "parent", &Oracle::plain(), json!({}));
    assert_eq!(code(&r), "(ok)");
    traces.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    let top = spans.iter().find(|s| s.name == "compose parent").unwrap_or_else(|| panic!("{names:?}"));
    let under = |parent: &opentelemetry_sdk::trace::SpanData| -> Vec<String> {
        let mut v: Vec<String> = spans
            .iter()
            .filter(|s| s.parent_span_id == parent.span_context.span_id())
            .map(|s| s.name.to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(under(top), ["run_module facts", "run_module parent"], "{names:?}");
    for module in ["facts", "parent"] {
        let span = spans.iter().find(|s| s.name == format!("run_module {module}")).unwrap();
        assert_eq!(under(span), ["chat o1"]);
        let ids = step(&r, module).span.clone().unwrap_or_else(|| panic!("{module} kept no span ids"));
        assert_eq!(ids.span_id, span.span_context.span_id().to_string());
        assert_eq!(ids.trace_id, top.span_context.trace_id().to_string());
    }
}

#[test]
fn call_runs_the_child_first_and_injects_its_envelope() {
    let fx = Fixture::new();
    fx.module(
        "parent",
        "",
        "Facts: @call:facts({\"topic\": \"rust\"})\nSummary: @call:summary(three short words)\nDone.",
    )
    .module("facts", "", "List facts about ${topic}.")
    .module("summary", "", "Summarise: $ARGUMENTS");
    let oracle = Oracle::new(|m, _| match m {
        "facts" => ok(m, 0.8, "low", json!({"facts": ["$INPUT stays literal", "ownership"]})),
        _ => ok(m, 0.9, "none", json!({"from": m})),
    });
    let r = compose(&fx, "parent", &oracle, json!({}));
    assert_eq!(code(&r), "(ok)", "{:#}", r.envelope);
    assert_eq!(oracle.order(), vec!["facts", "summary", "parent"]);
    assert!(oracle.prompts("facts")[0].contains("List facts about rust."));
    assert!(oracle.prompts("summary")[0].contains("Summarise: three short words"));
    let parent_prompt = &oracle.prompts("parent")[0];
    assert!(!parent_prompt.contains("@call:"), "{parent_prompt}");
    // The child's envelope, as JSON, where the directive was; its `$` is
    // escaped so the prompt builder did not expand `$INPUT`.
    let line = parent_prompt.lines().find(|l| l.starts_with("Facts: ")).unwrap();
    let injected: Value = serde_json::from_str(line.trim_start_matches("Facts: ")).unwrap();
    assert_eq!(injected["data"]["facts"][0], "$INPUT stays literal");
    assert_eq!(injected["ok"], true);
    let facts = step(&r, "facts");
    assert_eq!((facts.depth, facts.parent, &facts.via), (1, Some(0), &Via::Call));
    assert_eq!(facts.input["topic"], "rust");
    assert_eq!(r.steps[0].depth, 0);
    // meta.usage adds up the three runs.
    assert_eq!(r.envelope["meta"]["usage"]["calls"], 3);
    assert_eq!(r.envelope["meta"]["usage"]["input_tokens"], 30);
}

#[test]
fn a_failed_required_call_aborts_before_the_parent_runs() {
    let fx = Fixture::new();
    fx.module("parent", "", "@call:broken").module("broken", "", "x");
    let oracle = Oracle::new(|m, _| match m {
        "broken" => {
            json!({"ok": false, "meta": {"confidence": 0.0, "risk": "high", "explain": "no"}, "error": {"code": "E2004", "message": "cannot"}})
        }
        _ => ok(m, 0.9, "low", json!({})),
    });
    let r = compose(&fx, "parent", &oracle, json!({}));
    assert_eq!(code(&r), "E2004");
    assert_eq!(oracle.order(), vec!["broken"], "the parent's model is never asked");
    // An optional one is replaced by null instead.
    fx.module(
        "lenient",
        "composition:\n  requires:\n    - name: broken\n      optional: true",
        "Got: @call:broken end",
    );
    let r = compose(&fx, "lenient", &oracle, json!({}));
    assert_eq!(code(&r), "(ok)", "{:#}", r.envelope);
    assert!(oracle.prompts("lenient")[0].contains("Got: null end"));
}

const PIPELINE: &str = r#"composition:
  pattern: sequential
  dataflow:
    - from: input
      to: analyzer
      mapping:
        code: "$.source"
    - from: analyzer.output
      to: scanner
      mapping:
        findings: "$.data.findings"
        confidence: "$.meta.confidence"
      condition: "$.meta.risk != 'none'"
    - from: [analyzer.output, scanner.output]
      to: output"#;

#[test]
fn sequential_dataflow_maps_values_and_merges_the_output() {
    let fx = Fixture::new();
    fx.module("pipeline", PIPELINE, "orchestrates").module("analyzer", "", "analyze").module("scanner", "", "scan");
    let oracle = Oracle::new(|m, _| match m {
        "analyzer" => ok(m, 0.9, "medium", json!({"findings": [1, 2], "lang": "py"})),
        _ => ok(m, 0.7, "low", json!({"secure": false})),
    });
    let r = compose(&fx, "pipeline", &oracle, json!({"source": "x = 1"}));
    assert_eq!(code(&r), "(ok)", "{:#}", r.envelope);
    assert_eq!(oracle.order(), vec!["analyzer", "scanner"], "the pipeline's own prompt does not run");
    assert_eq!(step(&r, "analyzer").input, json!({"code": "x = 1"}));
    assert_eq!(step(&r, "scanner").input, json!({"findings": [1, 2], "confidence": 0.9}));
    assert_eq!(step(&r, "scanner").via, Via::Dataflow { index: 1 });
    let data = &r.envelope["data"];
    assert_eq!((data["lang"].clone(), data["secure"].clone()), (json!("py"), json!(false)));
    assert_eq!(data["rationale"], "scanner reasoned", "later wins in a merge");
    assert_eq!(r.envelope["meta"]["confidence"], 0.7, "min over the sources");
    assert_eq!(r.envelope["meta"]["risk"], "medium", "max over the sources");
    assert!(r.envelope["meta"]["explain"].as_str().unwrap().contains("analyzer, scanner"));
    assert_eq!(r.envelope["meta"]["trace_id"], r.steps[0].envelope["meta"]["trace_id"]);
}

#[test]
fn a_false_condition_skips_the_step_with_its_reason() {
    let fx = Fixture::new();
    fx.module("pipeline", PIPELINE, "orchestrates").module("analyzer", "", "analyze").module("scanner", "", "scan");
    let oracle = Oracle::new(|m, _| ok(m, 0.95, "none", json!({"findings": []})));
    let r = compose(&fx, "pipeline", &oracle, json!({"source": "x"}));
    assert_eq!(code(&r), "(ok)", "{:#}", r.envelope);
    assert_eq!(oracle.order(), vec!["analyzer"]);
    match &step(&r, "scanner").outcome {
        Outcome::Skipped { reason } => assert!(reason.contains("$.meta.risk != 'none'"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // Only the analyzer fed the output.
    assert_eq!(r.envelope["meta"]["confidence"], 0.95);
    // Every condition false: nothing ran at all.
    fx.module(
        "never",
        "composition:\n  dataflow:\n    - from: input\n      to: analyzer\n      condition: \"exists($.nothing)\"",
        "x",
    );
    let r = compose(&fx, "never", &oracle, json!({}));
    assert_eq!(code(&r), "E2004", "{:#}", r.envelope);
}

fn aggregate(how: &str) -> String {
    format!(
        "composition:\n  pattern: parallel\n  dataflow:\n    - from: input\n      to: [a, b, c]\n    - from: [a.output, b.output, c.output]\n      to: output\n      aggregate: {how}"
    )
}

#[test]
fn each_aggregate() {
    let fx = Fixture::new();
    fx.module("a", "", "a").module("b", "", "b").module("c", "", "c");
    fx.module("merge", &aggregate("merge"), "m").module("array", &aggregate("array"), "m").module(
        "first",
        &aggregate("first"),
        "m",
    );
    let oracle = Oracle::new(|m, _| match m {
        "a" => ok(m, 0.9, "low", json!({"shared": {"x": 1}, "a": true})),
        "b" => ok(m, 0.6, "high", json!({"shared": {"y": 2}, "b": true})),
        _ => ok(m, 0.8, "none", json!({"c": true})),
    });
    let merged = compose(&fx, "merge", &oracle, json!({}));
    assert_eq!(merged.envelope["data"]["shared"], json!({"x": 1, "y": 2}));
    assert!(merged.envelope["data"]["a"] == true && merged.envelope["data"]["c"] == true);
    assert_eq!(
        (merged.envelope["meta"]["confidence"].clone(), merged.envelope["meta"]["risk"].clone()),
        (json!(0.6), json!("high"))
    );
    let array = compose(&fx, "array", &oracle, json!({}));
    let results = array.envelope["data"]["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    assert_eq!(
        (results[0]["a"].clone(), results[1]["b"].clone(), results[2]["c"].clone()),
        (json!(true), json!(true), json!(true))
    );
    assert!(array.envelope["data"]["rationale"].as_str().unwrap().contains("a: a reasoned"));
    let first = compose(&fx, "first", &oracle, json!({}));
    assert_eq!(first.envelope["data"]["a"], true);
    assert!(first.envelope["data"].get("b").is_none());
}

const ROUTER: &str = r#"composition:
  pattern: conditional
  dataflow:
    - from: input
      to: quick-check
    - from: quick-check.output
      to: deep-analysis
      mapping:
        hint: "$.data.hint"
  routing:
    - condition: "$.quick-check.meta.confidence > 0.9"
      next: null
    - condition: "$.quick-check.meta.confidence > 0.5 && $.input.mode == 'thorough'"
      next: deep-analysis
    - condition: "!exists($.nothing)"
      next: explore"#;

#[test]
fn conditional_routing_picks_the_first_rule_that_holds() {
    let fx = Fixture::new();
    fx.module("router", ROUTER, "routes")
        .module("quick-check", "", "q")
        .module("deep-analysis", "", "d")
        .module("explore", "", "e");
    let with_confidence = |c: f64| {
        Oracle::new(move |m, _| match m {
            "quick-check" => ok(m, c, "low", json!({"hint": "look at main"})),
            _ => ok(m, 0.8, "medium", json!({"from": m})),
        })
    };
    let o = with_confidence(0.95);
    let r = compose(&fx, "router", &o, json!({"mode": "thorough"}));
    assert_eq!(o.order(), vec!["quick-check"]);
    assert_eq!(r.envelope["data"]["hint"], "look at main", "next: null keeps the current result");

    let o = with_confidence(0.7);
    let r = compose(&fx, "router", &o, json!({"mode": "thorough"}));
    assert_eq!(o.order(), vec!["quick-check", "deep-analysis"]);
    assert_eq!(step(&r, "deep-analysis").via, Via::Route { index: 1 });
    assert_eq!(step(&r, "deep-analysis").input, json!({"hint": "look at main"}), "fed by its dataflow step");
    assert_eq!(r.envelope["data"]["from"], "deep-analysis");

    let o = with_confidence(0.7);
    let r = compose(&fx, "router", &o, json!({"mode": "fast"}));
    assert_eq!(o.order(), vec!["quick-check", "explore"]);
    // A routed module with no dataflow step gets the input and the result it was routed on.
    let input = &step(&r, "explore").input;
    assert_eq!(input["mode"], "fast");
    assert_eq!(input["_context"]["previous_result"]["module"], "quick-check");
    assert_eq!(input["_context"]["previous_result"]["data"]["hint"], "look at main");
}

#[test]
fn iterative_repeats_until_the_stop_condition() {
    let fx = Fixture::new();
    fx.module(
        "refine",
        "composition:\n  pattern: iterative\n  iteration:\n    max_iterations: 6\n    stop_condition: \"$.meta.confidence >= 0.8\"",
        "Refine.",
    );
    let oracle = Oracle::new(|m, n| ok(m, 0.5 + 0.1 * n as f64, "low", json!({"round": n})));
    let r = compose(&fx, "refine", &oracle, json!({"draft": "v0"}));
    assert_eq!(code(&r), "(ok)", "{:#}", r.envelope);
    assert_eq!(oracle.order().len(), 4, "rounds at 0.5, 0.6, 0.7, 0.8");
    assert_eq!(r.envelope["data"]["round"], 3);
    assert_eq!(r.envelope["meta"]["iterations"], 4);
    let rounds: Vec<_> = r.steps.iter().filter(|s| s.via == Via::Prompt).collect();
    assert_eq!(rounds.iter().map(|s| s.round).collect::<Vec<_>>(), vec![Some(0), Some(1), Some(2), Some(3)]);
    assert_eq!(rounds[1].input["_context"]["previous_result"]["data"]["round"], 0);
    assert_eq!(rounds[1].input["draft"], "v0", "each round starts from the original input");

    // The limit ends it when the condition never holds.
    fx.module(
        "capped",
        "composition:\n  pattern: iterative\n  iteration:\n    max_iterations: 3\n    continue_condition: \"$.iteration < 100\"",
        "x",
    );
    let r = compose(&fx, "capped", &Oracle::plain(), json!({}));
    assert_eq!(r.envelope["meta"]["iterations"], 3);
}

#[test]
fn optional_fallback_and_version_ranges() {
    let fx = Fixture::new();
    let yaml = r#"composition:
  requires:
    - name: missing
      optional: true
    - name: old
      version: "^2.0.0"
      fallback: modern
    - name: flaky
      fallback: steady
  dataflow:
    - from: input
      to: [missing, old, flaky]
    - from: [missing.output, old.output, flaky.output]
      to: output
      aggregate: array"#;
    fx.module("root", yaml, "r")
        .module("old", "version: 1.4.0", "o")
        .module("modern", "", "m")
        .module("flaky", "", "f")
        .module("steady", "", "s");
    let oracle = Oracle::new(|m, _| match m {
        "flaky" => {
            json!({"ok": false, "meta": {"confidence": 0.0, "risk": "high", "explain": "x"}, "error": {"code": "E4001", "message": "down"}})
        }
        _ => ok(m, 0.9, "low", json!({"from": m})),
    });
    let r = compose(&fx, "root", &oracle, json!({}));
    assert_eq!(code(&r), "(ok)", "{:#}", r.envelope);
    let results = &r.envelope["data"]["results"];
    assert_eq!(
        results,
        &json!([null, {"from": "modern", "rationale": "modern reasoned"}, {"from": "steady", "rationale": "steady reasoned"}])
    );
    assert!(matches!(&step(&r, "missing").outcome, Outcome::Skipped { reason } if reason.contains("not found")));
    match &step(&r, "old").outcome {
        Outcome::FellBack { code, to } => assert_eq!((code.as_str(), to.as_str()), ("E4006", "modern")),
        other => panic!("{other:?}"),
    }
    assert!(step(&r, "old").envelope["error"]["message"].as_str().unwrap().contains("1.4.0"));
    assert_eq!(step(&r, "modern").via, Via::Fallback { of: "old".into() });
    assert!(matches!(&step(&r, "flaky").outcome, Outcome::FellBack { code, .. } if code == "E4001"));
    assert!(!oracle.order().contains(&"old".to_owned()), "a version mismatch never runs");

    // Without a fallback a mismatch is E4006 for a required step, and the
    // composition stops with it.
    fx.module("strict", "composition:\n  requires:\n    - name: old\n      version: \">=2.0.0 <3.0.0\"\n  dataflow:\n    - from: input\n      to: old", "s");
    let r = compose(&fx, "strict", &oracle, json!({}));
    assert_eq!(code(&r), "E4006", "{:#}", r.envelope);
    assert!(r.envelope["error"]["message"].as_str().unwrap().contains(">=2.0.0 <3.0.0"));
}

#[test]
fn a_required_failure_carries_what_succeeded_as_partial_data() {
    let fx = Fixture::new();
    fx.module(
        "chain",
        "composition:\n  dataflow:\n    - from: input\n      to: first\n    - from: first.output\n      to: second\n    - from: second.output\n      to: output",
        "c",
    )
    .module("first", "", "1")
    .module("second", "", "2");
    let oracle = Oracle::new(|m, _| match m {
        "second" => {
            json!({"ok": false, "meta": {"confidence": 0.0, "risk": "high", "explain": "x"}, "error": {"code": "E2007", "message": "need more"}})
        }
        _ => ok(m, 0.9, "low", json!({"from": m})),
    });
    let r = compose(&fx, "chain", &oracle, json!({}));
    assert_eq!(code(&r), "E2007");
    assert_eq!(r.envelope["partial_data"]["first"]["from"], "first");
}

#[test]
fn cycles_are_e4004_by_call_by_composition_and_mixed() {
    let fx = Fixture::new();
    let oracle = Oracle::plain();
    // @call only: a → b → a
    fx.module("a", "", "@call:b").module("b", "", "@call:a");
    let r = compose(&fx, "a", &oracle, json!({}));
    assert_eq!(code(&r), "E4004", "{:#}", r.envelope);
    assert!(r.envelope["error"]["message"].as_str().unwrap().contains("a → b → a"));
    assert!(oracle.order().is_empty(), "nothing reached a model");
    // composition only: c → d → c
    let to = |m: &str| format!("composition:\n  dataflow:\n    - from: input\n      to: {m}");
    fx.module("c", &to("d"), "c").module("d", &to("c"), "d");
    let r = compose(&fx, "c", &oracle, json!({}));
    assert_eq!(code(&r), "E4004");
    assert!(r.envelope["error"]["message"].as_str().unwrap().contains("c → d → c"));
    // mixed: e (composition) → f (@call) → g (composition) → e
    fx.module("e", &to("f"), "e").module("f", "", "@call:g").module("g", &to("e"), "g");
    let r = compose(&fx, "e", &oracle, json!({}));
    assert_eq!(code(&r), "E4004");
    assert!(r.envelope["error"]["message"].as_str().unwrap().contains("e → f → g → e"), "{:#}", r.envelope);
    assert_eq!(step(&r, "g").depth, 2);
    // A module may call the same child twice, side by side: that is no cycle.
    fx.module("twice", "", "@call:leaf and @call:leaf").module("leaf", "", "l");
    assert_eq!(code(&compose(&fx, "twice", &oracle, json!({}))), "(ok)");
}

#[test]
fn depth_beyond_max_depth_is_e4005() {
    let fx = Fixture::new();
    for i in 0..8 {
        fx.module(&format!("n{i}"), "", &format!("@call:n{}", i + 1));
    }
    fx.module("n8", "", "leaf");
    let oracle = Oracle::plain();
    let r = compose(&fx, "n0", &oracle, json!({}));
    assert_eq!(code(&r), "E4005", "{:#}", r.envelope);
    assert!(r.envelope["error"]["message"].as_str().unwrap().contains("(5)"));
    assert_eq!(r.steps.iter().map(|s| s.depth).max(), Some(6), "the refused step is at depth 6");
    assert!(oracle.order().is_empty());
    // The root's max_depth governs, across @call and composition together.
    fx.module("shallow", "composition:\n  max_depth: 2\n  dataflow:\n    - from: input\n      to: n6", "s");
    let r = compose(&fx, "shallow", &oracle, json!({}));
    assert_eq!(code(&r), "E4005");
    assert!(r.envelope["error"]["message"].as_str().unwrap().contains("shallow → n6 → n7 → n8"));
    // Deep enough: eight levels with max_depth 8 run.
    fx.module("deep", "composition:\n  max_depth: 9\n  dataflow:\n    - from: input\n      to: n0", "d");
    assert_eq!(code(&compose(&fx, "deep", &oracle, json!({}))), "(ok)");
}

#[test]
fn a_child_allowed_more_than_its_caller_is_e4007() {
    let fx = Fixture::new();
    fx.module("caller", "", "@call:fetcher").module("fetcher", "policies:\n  network: allow", "f");
    let oracle = Oracle::plain();
    let r = compose(&fx, "caller", &oracle, json!({}));
    assert_eq!(code(&r), "E4007", "{:#}", r.envelope);
    let msg = r.envelope["error"]["message"].as_str().unwrap();
    assert!(msg.contains("network") && msg.contains("caller"), "{msg}");
    assert!(oracle.order().is_empty());
    assert!(matches!(&step(&r, "fetcher").outcome, Outcome::Failed { code } if code == "E4007"));
    // A child that asks for nothing more than its caller runs.
    fx.module("quiet", "policies:\n  network: deny", "q").module("caller2", "", "@call:quiet");
    assert_eq!(code(&compose(&fx, "caller2", &oracle, json!({}))), "(ok)");
}

#[test]
fn fork_keeps_what_a_child_emits_and_main_shares_it() {
    let fx = Fixture::new();
    let emitting = |mode: &str| format!("context:\n  mode: {mode}\n  emits:\n    - type: session_state");
    fx.module("forked", &emitting("fork"), "f").module("shared", &emitting("main"), "s").module("reader", "", "r");
    let flow = |first: &str| {
        format!("composition:\n  dataflow:\n    - from: input\n      to: {first}\n    - from: input\n      to: reader")
    };
    fx.module("via-fork", &flow("forked"), "x").module("via-main", &flow("shared"), "x");
    let oracle = Oracle::new(|m, _| {
        let mut e = ok(m, 0.9, "low", json!({}));
        e["meta"]["_emitted_context"] = json!({"session_state": {"set_by": m}});
        e
    });
    let input = json!({"_context": {"user_profile": {"name": "ada"}}});
    let main = compose(&fx, "via-main", &oracle, input.clone());
    assert_eq!(code(&main), "(ok)", "{:#}", main.envelope);
    let seen = &step(&main, "reader").input["_context"];
    assert_eq!(seen["session_state"]["set_by"], "shared", "main: later steps see it");
    assert_eq!(seen["user_profile"]["name"], "ada", "the caller's own context is passed down");
    assert_eq!(main.emitted_context.as_ref().unwrap()["session_state"]["set_by"], "shared", "and it goes up");

    let fork = compose(&fx, "via-fork", &oracle, input);
    let seen = &step(&fork, "reader").input["_context"];
    assert!(seen.get("session_state").is_none(), "fork: it stays with the child: {seen}");
    assert_eq!(seen["user_profile"]["name"], "ada", "a forked child still saw a copy");
    assert!(fork.emitted_context.is_none());
}

// ---- over real HTTP ----

fn http(server: &FakeServer) -> OpenAiCompatible {
    let mut cfg = EndpointConfig::openai("gpt-4o-mini");
    cfg.base_url = server.base_url();
    cfg.api_key = Some("sk-test".into());
    cfg.http.timeout = Duration::from_secs(30);
    cfg.http.retry =
        RetryPolicy { max_retries: 0, base_delay: Duration::from_millis(5), max_delay: Duration::from_millis(5) };
    OpenAiCompatible::new(cfg).unwrap()
}

fn chat(module: &str) -> Reply {
    Reply::Chat(ok(module, 0.9, "low", json!({"from": module})).to_string())
}

#[test]
fn parallel_steps_really_overlap() {
    let fx = Fixture::new();
    fx.module("a", "", "a").module("b", "", "b").module("c", "", "c");
    fx.module("fan", &aggregate("array"), "fan");
    let slow = Reply::Delay(Duration::from_millis(400), Box::new(chat("any")));
    let server = FakeServer::start(vec![slow]).unwrap();
    let r = compose(&fx, "fan", &http(&server), json!({}));
    assert_eq!(code(&r), "(ok)", "{:#}", r.envelope);
    assert_eq!(server.received().len(), 3);
    assert_eq!(server.max_in_flight(), 3, "all three calls were open at once");
    // The same steps in sequence never overlap: the check can fail.
    fx.module(
        "chain",
        "composition:\n  pattern: sequential\n  dataflow:\n    - from: input\n      to: [a, b, c]",
        "chain",
    );
    let server = FakeServer::start(vec![Reply::Delay(Duration::from_millis(50), Box::new(chat("any")))]).unwrap();
    let r = compose(&fx, "chain", &http(&server), json!({}));
    assert_eq!(code(&r), "(ok)");
    assert_eq!(server.max_in_flight(), 1);
}

#[test]
fn a_failed_parallel_step_cancels_its_siblings_in_flight() {
    let fx = Fixture::new();
    fx.module("a", "", "a").module("b", "", "b").module("c", "", "c");
    fx.module("fan", &aggregate("array"), "fan");
    let failing = json!({"ok": false, "meta": {"confidence": 0.0, "risk": "high", "explain": "no"},
                         "error": {"code": "E2004", "message": "nothing to do"}});
    // Whichever call arrives first fails after 300 ms (by then all three are
    // in flight); the other two would take 5 s.
    let slow = Reply::Delay(Duration::from_secs(5), Box::new(chat("any")));
    let fail = Reply::Delay(Duration::from_millis(300), Box::new(Reply::Chat(failing.to_string())));
    let server = FakeServer::start(vec![fail, slow]).unwrap();
    let r = compose(&fx, "fan", &http(&server), json!({}));
    assert_eq!(code(&r), "E2004", "the first failure is the answer, not its siblings' cancellation: {:#}", r.envelope);
    assert_eq!(server.received().len(), 3, "all three were started together");
    // The siblings' replies would have been valid: cancelled outcomes show
    // they were dropped in flight, not waited for.
    let outcomes: Vec<&Outcome> = ["a", "b", "c"].iter().map(|m| &step(&r, m).outcome).collect();
    let failed = outcomes.iter().filter(|o| matches!(o, Outcome::Failed { code } if code == "E2004")).count();
    let cancelled = outcomes.iter().filter(|o| matches!(o, Outcome::TimedOut)).count();
    assert_eq!((failed, cancelled), (1, 2), "{outcomes:?}");
}

#[test]
fn a_step_timeout_cancels_the_call_in_flight() {
    let fx = Fixture::new();
    fx.module(
        "impatient",
        "composition:\n  requires:\n    - name: slow\n      timeout_ms: 300\n  dataflow:\n    - from: input\n      to: slow",
        "i",
    )
    .module("slow", "", "s");
    let server = FakeServer::start(vec![Reply::Delay(Duration::from_secs(5), Box::new(chat("slow")))]).unwrap();
    let r = compose(&fx, "impatient", &http(&server), json!({}));
    // The reply would have been valid after 5 s: E2002 and a timed-out step
    // show the run stopped waiting for it.
    assert_eq!(code(&r), "E2002", "{:#}", r.envelope);
    assert!(r.envelope["error"]["message"].as_str().unwrap().contains("timeout_ms of 300 ms"));
    assert_eq!(step(&r, "slow").outcome, Outcome::TimedOut);
    assert_eq!(server.received().len(), 1, "the call was made");
}

#[test]
fn the_total_timeout_cancels_in_flight_calls_and_starts_nothing_more() {
    let fx = Fixture::new();
    fx.module(
        "bounded",
        "composition:\n  timeout_ms: 400\n  requires:\n    - name: late\n      optional: true\n  dataflow:\n    - from: input\n      to: slow\n    - from: input\n      to: late",
        "b",
    )
    .module("slow", "", "s")
    .module("late", "", "l");
    let server = FakeServer::start(vec![Reply::Delay(Duration::from_secs(5), Box::new(chat("slow")))]).unwrap();
    let r = compose(&fx, "bounded", &http(&server), json!({}));
    assert_eq!(code(&r), "E2002", "{:#}", r.envelope);
    assert_eq!(r.envelope["error"]["details"]["scope"], "composition");
    assert_eq!(step(&r, "slow").outcome, Outcome::TimedOut);
    assert_eq!(server.received().len(), 1, "nothing started after the deadline");

    // A caller's own deadline (ComposeOptions::timeout) overrides the module's.
    fx.module("roomy", "composition:\n  timeout_ms: 60000\n  dataflow:\n    - from: input\n      to: slow", "r");
    let server = FakeServer::start(vec![Reply::Delay(Duration::from_secs(5), Box::new(chat("slow")))]).unwrap();
    let o = ComposeOptions { timeout: Some(Duration::from_millis(300)), ..Default::default() };
    let r = compose_with(&fx, "roomy", &http(&server), json!({}), &o);
    assert_eq!(code(&r), "E2002", "{:#}", r.envelope);
    assert_eq!(r.envelope["error"]["details"]["scope"], "composition");
    assert_eq!(step(&r, "slow").outcome, Outcome::TimedOut);
}

#[test]
fn execute_is_send_for_servers() {
    fn is_send<T: Send>(_: &T) {}
    let fx = Fixture::new();
    fx.module("solo", "", "x");
    let resolver = fx.resolver();
    let oracle = Oracle::plain();
    let options = ComposeOptions::default();
    let fut = execute(fx.load("solo"), &resolver, &oracle, json!({}), &options);
    is_send(&fut);
    drop(fut);
}

#[test]
fn the_search_resolver_caches_and_reports_missing_modules() {
    let fx = Fixture::new();
    fx.module("here", "", "x");
    let r = fx.resolver();
    let a = r.resolve("here").unwrap();
    let b = r.resolve("here").unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    let missing = r.resolve("nowhere").unwrap_err();
    assert_eq!(missing.code.as_str(), "E4006");
}

// ---- each failure a composition itself decides, with its code ----

#[test]
fn an_invalid_composition_block_is_e1004_naming_the_field() {
    let fx = Fixture::new();
    fx.module("lost", "", "x");
    // The loader refuses such a block, so only a module built in code
    // (a host's own) can bring one: a conditional without routing rules.
    let mut module = (*fx.load("lost")).clone();
    module.manifest.composition = Some(json!({"pattern": "conditional"}));
    let oracle = Oracle::plain();
    let r = block(execute(Arc::new(module), &fx.resolver(), &oracle, json!({}), &ComposeOptions::default()));
    assert_eq!(code(&r), "E1004", "{:#}", r.envelope);
    assert_eq!(r.envelope["error"]["details"]["fields"], json!(["/composition/routing"]));
    assert!(validate_envelope(&r.envelope).is_empty(), "{:#}", r.envelope);
    assert!(oracle.order().is_empty(), "nothing reached a model");
}

#[test]
fn a_dataflow_whose_steps_wait_on_each_other_is_e4004() {
    let fx = Fixture::new();
    fx.module("a", "", "a").module("b", "", "b");
    fx.module(
        "knot",
        "composition:\n  pattern: parallel\n  dataflow:\n    - from: b.output\n      to: a\n    - from: a.output\n      to: b",
        "k",
    );
    let oracle = Oracle::plain();
    let r = compose(&fx, "knot", &oracle, json!({}));
    assert_eq!(code(&r), "E4004", "{:#}", r.envelope);
    assert!(
        r.envelope["error"]["message"].as_str().unwrap().contains("circular dataflow: a → b → a"),
        "{:#}",
        r.envelope
    );
    assert!(oracle.order().is_empty());
}

#[test]
fn a_step_given_something_other_than_an_object_is_e1001() {
    let fx = Fixture::new();
    // `missing` is optional and absent, so what it "outputs" is null.
    fx.module(
        "gap",
        "composition:\n  requires:\n    - name: missing\n      optional: true\n  dataflow:\n    - from: input\n      to: missing\n    - from: missing.output\n      to: after",
        "g",
    )
    .module("after", "", "a");
    let oracle = Oracle::plain();
    let r = compose(&fx, "gap", &oracle, json!({}));
    assert_eq!(code(&r), "E1001", "{:#}", r.envelope);
    assert!(r.envelope["error"]["message"].as_str().unwrap().contains("null as its input"), "{:#}", r.envelope);
    assert!(matches!(&step(&r, "after").outcome, Outcome::Failed { code } if code == "E1001"));
    assert!(oracle.order().is_empty());
}

#[test]
fn a_composed_result_outside_the_roots_data_schema_is_e3001_with_partial_data() {
    let fx = Fixture::new();
    fx.module("a", "", "a").module(
        "strict-root",
        "schema_strictness: medium\ncomposition:\n  dataflow:\n    - from: input\n      to: a\n    - from: a.output\n      to: output",
        "s",
    );
    fx.file(
        "strict-root",
        "schema.json",
        r#"{"input": {"type": "object"}, "data": {"type": "object", "required": ["rationale", "verdict"]}}"#,
    );
    let r = compose(&fx, "strict-root", &Oracle::plain(), json!({}));
    assert_eq!(code(&r), "E3001", "{:#}", r.envelope);
    assert!(r.envelope["error"]["message"].as_str().unwrap().contains("`strict-root`'s data schema"));
    assert_eq!(r.envelope["partial_data"]["from"], "a", "what was composed is kept");
}

#[test]
fn a_module_on_the_search_path_that_does_not_load_is_e4006() {
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.dir.path().join("wreck")).unwrap();
    std::fs::write(fx.dir.path().join("wreck/module.yaml"), "name: [broken\n").unwrap();
    // The caller lives elsewhere, so `wreck` can only come from the search path.
    let elsewhere = tempfile::tempdir().unwrap();
    module_in(elsewhere.path(), "caller", "@call:wreck");
    let caller = Arc::new(load_dir(&elsewhere.path().join("caller")).unwrap());
    let r = block(execute(caller, &fx.resolver(), &Oracle::plain(), json!({}), &ComposeOptions::default()));
    assert_eq!(code(&r), "E4006", "{:#}", r.envelope);
    assert!(
        r.envelope["error"]["message"].as_str().unwrap().contains("was found but cannot be loaded"),
        "{:#}",
        r.envelope
    );
}

// ---- a child beside its caller ----

/// Writes module `name` into `dir/name`, its prompt `MODULE <name>` then `body`.
fn module_in(dir: &std::path::Path, name: &str, body: &str) {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("module.yaml"),
        format!("name: {name}\nversion: 1.0.0\nresponsibility: r\ntier: exploration\n"),
    )
    .unwrap();
    std::fs::write(d.join("prompt.md"), format!("MODULE {name}\n{body}\n")).unwrap();
    std::fs::write(d.join("schema.json"), SCHEMA).unwrap();
}

#[test]
fn a_child_beside_its_caller_is_found_before_the_search_path() {
    let elsewhere = tempfile::tempdir().unwrap();
    let pair = elsewhere.path().join("pair");
    module_in(&pair, "analyzer", "Analyse, then: @call:spec");
    module_in(&pair, "spec", "the spec beside its caller");
    let analyzer = || Arc::new(load_dir(&pair.join("analyzer")).unwrap());
    let run_with = |resolver: &SearchResolver| {
        let oracle = Oracle::plain();
        let r = block(execute(analyzer(), resolver, &oracle, json!({}), &ComposeOptions::default()));
        (r, oracle.prompts("spec"))
    };

    // No search path at all: the sibling answers.
    let (r, prompts) = run_with(&SearchResolver::new(SearchPath { dirs: Vec::new() }));
    assert_eq!(code(&r), "(ok)", "{:#}", r.envelope);
    assert_eq!(step(&r, "spec").outcome, Outcome::Ok);
    assert!(prompts[0].contains("the spec beside its caller"), "{prompts:?}");

    // The search path holds another `spec`: the sibling still wins.
    let path = tempfile::tempdir().unwrap();
    module_in(path.path(), "spec", "the spec on the search path");
    let on_path = || SearchResolver::new(SearchPath { dirs: vec![path.path().to_path_buf()] });
    let (_, prompts) = run_with(&on_path());
    assert!(prompts[0].contains("the spec beside its caller"), "{prompts:?}");

    // No sibling: the search path is used.
    std::fs::remove_dir_all(pair.join("spec")).unwrap();
    let (r, prompts) = run_with(&on_path());
    assert_eq!(code(&r), "(ok)", "{:#}", r.envelope);
    assert!(prompts[0].contains("the spec on the search path"), "{prompts:?}");
    // ...and with neither, the call names the missing module.
    let (r, _) = run_with(&SearchResolver::new(SearchPath { dirs: Vec::new() }));
    assert_eq!(code(&r), "E4006", "{:#}", r.envelope);
}

#[test]
fn a_sibling_that_does_not_load_is_e4006_not_silently_skipped() {
    let elsewhere = tempfile::tempdir().unwrap();
    module_in(elsewhere.path(), "analyzer", "@call:spec");
    std::fs::create_dir_all(elsewhere.path().join("spec")).unwrap();
    std::fs::write(elsewhere.path().join("spec/module.yaml"), "name: [broken\n").unwrap();
    let resolver = SearchResolver::new(SearchPath { dirs: Vec::new() });
    let analyzer = Arc::new(load_dir(&elsewhere.path().join("analyzer")).unwrap());
    let r = block(execute(analyzer, &resolver, &Oracle::plain(), json!({}), &ComposeOptions::default()));
    assert_eq!(code(&r), "E4006", "{:#}", r.envelope);
    assert!(r.envelope["error"]["message"].as_str().unwrap().contains("beside its caller cannot be loaded"));
}
