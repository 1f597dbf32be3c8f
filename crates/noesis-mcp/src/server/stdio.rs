//! The server's input over a byte stream (`noesis mcp` reads stdin): one
//! JSON-RPC message a line, each line bounded, read on a blocking thread
//! and handed to [`super::Mcp::serve`] through a channel.

use std::io::{BufRead, Read};

use tokio::sync::mpsc;

/// Reads lines from `input` into `lines` until the input ends or nobody
/// receives them. A line longer than `max_line` bytes is skipped without
/// being kept and refused on `refusals` (a JSON-RPC error with a null id).
/// Blocking: run it on a thread of its own.
pub fn read_lines(
    mut input: impl BufRead,
    max_line: usize,
    lines: &mpsc::Sender<Vec<u8>>,
    refusals: &mpsc::UnboundedSender<String>,
) {
    loop {
        let mut line = Vec::new();
        match (&mut input).take(max_line as u64 + 1).read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if line.len() > max_line && !line.ends_with(b"\n") {
            // Skip the rest of the message without keeping it.
            let ended = skip_line(&mut input);
            let refusal = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {
                "code": -32600,
                "message": format!("a message longer than {max_line} bytes was dropped (noesis mcp --max-line)"),
            }});
            if refusals.send(refusal.to_string()).is_err() || !ended {
                break;
            }
            continue;
        }
        if lines.blocking_send(line).is_err() {
            break;
        }
    }
}

/// Reads up to the end of the current line, keeping nothing; false at the
/// end of input.
fn skip_line(input: &mut impl BufRead) -> bool {
    loop {
        let (used, ended) = match input.fill_buf() {
            Ok([]) | Err(_) => return false,
            Ok(buf) => match buf.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (buf.len(), false),
            },
        };
        input.consume(used);
        if ended {
            return true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(input: &[u8], max_line: usize) -> (Vec<String>, Vec<String>) {
        let (tx, mut rx) = mpsc::channel(16);
        let (refuse, mut refused) = mpsc::unbounded_channel();
        read_lines(std::io::BufReader::with_capacity(4, input), max_line, &tx, &refuse);
        drop((tx, refuse));
        let mut lines = Vec::new();
        while let Ok(l) = rx.try_recv() {
            lines.push(String::from_utf8(l).unwrap());
        }
        let mut errors = Vec::new();
        while let Ok(e) = refused.try_recv() {
            errors.push(e);
        }
        (lines, errors)
    }

    #[test]
    fn a_long_line_is_dropped_and_refused_and_reading_goes_on() {
        let (lines, errors) = read(b"{\"a\":1}\n0123456789abcdef\n{}\nlast", 10);
        assert_eq!(lines, ["{\"a\":1}\n", "{}\n", "last"]);
        assert_eq!(errors.len(), 1);
        let e: serde_json::Value = serde_json::from_str(&errors[0]).unwrap();
        assert_eq!(e["error"]["code"], -32600);
        assert_eq!(e["id"], serde_json::Value::Null);
    }

    #[test]
    fn a_long_line_at_the_end_of_input_ends_the_reading() {
        let (lines, errors) = read(b"{}\n0123456789abcdef", 10);
        assert_eq!((lines.len(), errors.len()), (1, 1));
    }

    #[test]
    fn a_line_of_exactly_the_limit_passes() {
        let (lines, errors) = read(b"012345678\n", 10);
        assert_eq!((lines, errors.len()), (vec!["012345678\n".to_owned()], 0));
    }
}
