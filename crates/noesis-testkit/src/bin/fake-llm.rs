//! `fake-llm --reply FILE [--port N] [--latency-ms N]`: serves the OpenAI
//! chat-completions API on 127.0.0.1, answering every request with FILE's
//! text (or, when FILE is a module test case, its `$example`). Prints the
//! base URL on stdout, then serves until killed.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::time::Duration;

use noesis_testkit::{FakeServer, Reply};

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut reply, mut port, mut latency) = (None, 0u16, 0u64);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--reply" => reply = args.next(),
            "--port" => port = args.next().and_then(|p| p.parse().ok()).unwrap_or(0),
            "--latency-ms" => latency = args.next().and_then(|p| p.parse().ok()).unwrap_or(0),
            _ => {
                eprintln!("usage: fake-llm --reply FILE [--port N] [--latency-ms N]");
                std::process::exit(2);
            }
        }
    }
    let Some(path) = reply else {
        eprintln!("fake-llm: --reply FILE is required");
        std::process::exit(2);
    };
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
    let server = match FakeServer::start_with(vec![Reply::Chat(content)], port, Duration::from_millis(latency)) {
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
