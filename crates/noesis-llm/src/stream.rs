//! Decoding streamed answers: bytes → lines (NDJSON) or server-sent events.
//!
//! Pure and incremental: bytes may be split anywhere, including inside a
//! UTF-8 character or between `\r` and `\n`. NDJSON (Ollama) is just the
//! lines, split here (no crate does only that); SSE (OpenAI, Anthropic,
//! Gemini) is decoded by `eventsource-stream`.

use eventsource_stream::Eventsource as _;
use futures_util::{Stream, StreamExt as _};

/// Splits a byte stream into lines without their terminators.
#[derive(Debug, Default)]
pub(crate) struct LineSplitter {
    buf: Vec<u8>,
}

impl LineSplitter {
    /// Feeds bytes; returns the lines they completed.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(bytes);
        let mut lines = Vec::new();
        let mut start = 0;
        while let Some(i) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let end = start + i;
            let line = &self.buf[start..end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            lines.push(String::from_utf8_lossy(line).into_owned());
            start = end + 1;
        }
        self.buf.drain(..start);
        lines
    }

    /// The last line when the stream did not end with a newline.
    pub(crate) fn finish(&mut self) -> Option<String> {
        if self.buf.is_empty() {
            return None;
        }
        let rest = std::mem::take(&mut self.buf);
        let rest = rest.strip_suffix(b"\r").unwrap_or(&rest);
        Some(String::from_utf8_lossy(rest).into_owned())
    }
}

/// One server-sent event (`event` is `message` when the stream names none).
pub(crate) use eventsource_stream::Event as SseEvent;

/// Why an event stream could not be read.
pub(crate) type SseError<E> = eventsource_stream::EventStreamError<E>;

/// A body chunk, or the blank line added after the last one.
enum Chunk<B> {
    Body(B),
    End,
}

impl<B: AsRef<[u8]>> AsRef<[u8]> for Chunk<B> {
    fn as_ref(&self) -> &[u8] {
        match self {
            Chunk::Body(b) => b.as_ref(),
            Chunk::End => b"\n\n",
        }
    }
}

/// Server-sent events (WHATWG `text/event-stream`) from a body that may be
/// split anywhere, `eventsource-stream` doing the parsing. An event the
/// server left open when the body ended (no blank line after it) still
/// counts; a body that is not UTF-8 ends in an error.
pub(crate) fn sse_events<S, B, E>(body: S) -> impl Stream<Item = Result<SseEvent, SseError<E>>>
where
    S: Stream<Item = Result<B, E>>,
    B: AsRef<[u8]>,
{
    // Callers stop at a transport error, so only a body that ended cleanly
    // reaches the closing blank line: a cut-off event never counts.
    body.map(|chunk| chunk.map(Chunk::Body))
        .chain(futures_util::stream::once(std::future::ready(Ok(Chunk::End))))
        .eventsource()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_all(chunks: &[&[u8]]) -> Vec<String> {
        let mut s = LineSplitter::default();
        let mut out: Vec<String> = chunks.iter().flat_map(|c| s.push(c)).collect();
        out.extend(s.finish());
        out
    }

    #[test]
    fn lines_survive_any_split() {
        let text = "data: {\"a\":\"é\"}\r\n\r\nevent: x\ndata: 2\n\nlast";
        let want = vec!["data: {\"a\":\"é\"}", "", "event: x", "data: 2", "", "last"];
        let bytes = text.as_bytes();
        for cut in 0..bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(split_all(&[a, b]), want, "cut at {cut}");
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(split_all(&singles), want);
    }

    /// Events (name, data) or the error that ended the stream, from a body
    /// delivered in `chunks`.
    fn sse_all(chunks: &[&[u8]]) -> Vec<Result<(String, String), String>> {
        let body = futures_util::stream::iter(chunks.iter().map(|c| Ok::<_, std::convert::Infallible>(c.to_vec())));
        let events = sse_events(body).collect::<Vec<_>>();
        // The body is always ready, so the decoder never waits.
        let Some(events) = futures_util::FutureExt::now_or_never(events) else { panic!("the decoder waited") };
        events
            .into_iter()
            .map(|r| {
                r.map(|e| (e.event, e.data)).map_err(|e| match e {
                    SseError::Utf8(_) => "utf8".to_owned(),
                    other => format!("{other:?}"),
                })
            })
            .collect()
    }

    #[test]
    fn sse_groups_data_lines_and_names_events() {
        let text = ": comment\nevent: message_start\ndata: {\"a\":1}\n\ndata:x\ndata: y\n\n\ndata: [DONE]";
        let ev = |name: &str, data: &str| Ok((name.to_owned(), data.to_owned()));
        let want = vec![ev("message_start", "{\"a\":1}"), ev("message", "x\ny"), ev("message", "[DONE]")];
        assert_eq!(sse_all(&[text.as_bytes()]), want);
        let bytes = text.as_bytes();
        for cut in 0..bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(sse_all(&[a, b]), want, "cut at {cut}");
        }
    }

    #[test]
    fn sse_takes_crlf_and_cr_and_reports_bad_utf8() {
        let ev = |data: &str| Ok(("message".to_owned(), data.to_owned()));
        assert_eq!(sse_all(&[b"data: a\r\n\r\ndata: b\r\rdata: c"]), vec![ev("a"), ev("b"), ev("c")]);
        assert_eq!(sse_all(&[b"data: a\n\ndata: \xff\n\n"]), vec![ev("a"), Err("utf8".to_owned())]);
        assert_eq!(sse_all(&[]), vec![]);
    }
}
