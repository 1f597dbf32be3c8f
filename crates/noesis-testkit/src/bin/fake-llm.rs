//! `fake-llm (--reply FILE | --tool-loop TOOL:N [--tool-args JSON]) [--port N] [--latency-ms N]`:
//! serves the OpenAI chat-completions API on 127.0.0.1, answering every
//! request with FILE's text (or, when FILE is a module test case, its
//! `$example`); or, with `--tool-loop`, as an agent's model would: a call of
//! TOOL with `{"x": k}` (or `--tool-args`) until the conversation holds N tool results, then
//! the answer `done`. Prints the base URL on stdout, then serves until
//! killed.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::Duration;

use noesis_testkit::{FakeServer, Reply};

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut reply, mut port, mut latency, mut tool_loop, mut tool_args) = (None, 0u16, 0u64, None, None);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--reply" => reply = args.next(),
            "--tool-loop" => tool_loop = args.next(),
            "--tool-args" => tool_args = args.next(),
            "--port" => port = args.next().and_then(|p| p.parse().ok()).unwrap_or(0),
            "--latency-ms" => latency = args.next().and_then(|p| p.parse().ok()).unwrap_or(0),
            _ => {
                eprintln!(
                    "usage: fake-llm (--reply FILE | --tool-loop TOOL:N [--tool-args JSON]) [--port N] [--latency-ms N]"
                );
                std::process::exit(2);
            }
        }
    }
    let reply = match (reply, tool_loop) {
        (_, Some(spec)) => {
            let parsed = spec.split_once(':').and_then(|(t, n)| Some((t.to_owned(), n.parse::<usize>().ok()?)));
            let Some((tool, rounds)) = parsed else {
                eprintln!("fake-llm: --tool-loop expects TOOL:N, got `{spec}`");
                std::process::exit(2);
            };
            // The tool name lives as long as the server: leak it once.
            let tool: &'static str = Box::leak(tool.into_boxed_str());
            let fixed = match tool_args.as_deref().map(serde_json::from_str::<serde_json::Value>) {
                None => None,
                Some(Ok(v)) => Some(v),
                Some(Err(e)) => {
                    eprintln!("fake-llm: --tool-args is not JSON: {e}");
                    std::process::exit(2);
                }
            };
            noesis_testkit::tool_loop(
                tool,
                rounds,
                move |k| fixed.clone().unwrap_or_else(|| serde_json::json!({"x": k})),
                "done",
            )
        }
        (Some(path), None) => {
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("fake-llm: {path}: {e}");
                    std::process::exit(2);
                }
            };
            let content = match serde_json::from_str::<serde_json::Value>(&text) {
                Ok(v) if v.get("$example").is_some() => v["$example"].to_string(),
                _ => text,
            };
            Reply::Chat(content)
        }
        (None, None) => {
            eprintln!("fake-llm: --reply FILE or --tool-loop TOOL:N is required");
            std::process::exit(2);
        }
    };
    let server = match FakeServer::start_with(vec![reply], port, Duration::from_millis(latency)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("fake-llm: cannot listen: {e}");
            std::process::exit(1);
        }
    };
    println!("{}", server.base_url());
    loop {
        std::thread::park();
    }
}
