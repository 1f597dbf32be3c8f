//! Decoding streamed answers: bytes → lines (NDJSON) or server-sent events.
//!
//! Pure and incremental: bytes may be split anywhere, including inside a
//! UTF-8 character or between `\r` and `\n`. NDJSON (Ollama) is just the
//! lines, split here (no crate does only that); SSE (OpenAI, Anthropic,
//! Gemini) is decoded by `sse-stream`.

use std::future::ready;

use bytes::Buf;
use futures_util::{Stream, StreamExt as _, TryStreamExt as _, stream};
use sse_stream::SseByteStream;

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

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field; empty when absent.
    pub(crate) event: String,
    /// The `data:` lines joined with `\n`.
    pub(crate) data: String,
}

/// Why an event stream could not be read: the body's own error (boxed), or
/// a field value that is not UTF-8.
pub(crate) type SseError = sse_stream::Error;

/// A body chunk, or the blank line added after the last one.
enum Chunk<B> {
    Body(B),
    End(&'static [u8]),
}

impl<B: Buf> Buf for Chunk<B> {
    fn remaining(&self) -> usize {
        match self {
            Chunk::Body(b) => b.remaining(),
            Chunk::End(rest) => rest.len(),
        }
    }

    fn chunk(&self) -> &[u8] {
        match self {
            Chunk::Body(b) => b.chunk(),
            Chunk::End(rest) => rest,
        }
    }

    fn advance(&mut self, n: usize) {
        match self {
            Chunk::Body(b) => b.advance(n),
            Chunk::End(rest) => *rest = rest.get(n..).unwrap_or_default(),
        }
    }
}

/// Server-sent events (WHATWG `text/event-stream`) from a body that may be
/// split anywhere, `sse-stream` doing the parsing. Blocks without data
/// (only `event:`, `id:` or `retry:`) are not events. An event the server
/// left open when the body ended (no blank line after it) still counts.
pub(crate) fn sse_events<S, B, E>(body: S) -> impl Stream<Item = Result<SseEvent, SseError>>
where
    S: Stream<Item = Result<B, E>>,
    B: Buf,
    E: std::error::Error + Send + Sync + 'static,
{
    // The decoder ends at a body error, so only a body that ended cleanly
    // reaches the closing blank line: a cut-off event never counts.
    let body = body.map(|chunk| chunk.map(Chunk::Body)).chain(stream::once(ready(Ok(Chunk::End(b"\n\n")))));
    SseByteStream::new(body).try_filter_map(|block| {
        ready(Ok(block.data.map(|data| SseEvent { event: block.event.unwrap_or_default(), data })))
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

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
        let body = stream::iter(chunks.iter().map(|c| Ok::<_, std::convert::Infallible>(*c)));
        let events = sse_events(body).collect::<Vec<_>>();
        // The body is always ready, so the decoder never waits.
        let Some(events) = futures_util::FutureExt::now_or_never(events) else { panic!("the decoder waited") };
        events
            .into_iter()
            .map(|r| {
                r.map(|e| (e.event, e.data)).map_err(|e| match e {
                    SseError::Utf8Parse(_) => "utf8".to_owned(),
                    other => format!("{other:?}"),
                })
            })
            .collect()
    }

    #[test]
    fn sse_groups_data_lines_and_names_events() {
        let text = ": comment\nevent: message_start\ndata: {\"a\":1}\n\ndata:x\ndata: y\n\n\ndata: [DONE]";
        let ev = |name: &str, data: &str| Ok((name.to_owned(), data.to_owned()));
        let want = vec![ev("message_start", "{\"a\":1}"), ev("", "x\ny"), ev("", "[DONE]")];
        assert_eq!(sse_all(&[text.as_bytes()]), want);
        let bytes = text.as_bytes();
        for cut in 0..bytes.len() {
            let (a, b) = bytes.split_at(cut);
            assert_eq!(sse_all(&[a, b]), want, "cut at {cut}");
        }
    }

    #[test]
    fn sse_takes_crlf_and_cr_and_reports_bad_utf8() {
        let ev = |data: &str| Ok((String::new(), data.to_owned()));
        assert_eq!(sse_all(&[b"data: a\r\n\r\ndata: b\r\rdata: c"]), vec![ev("a"), ev("b"), ev("c")]);
        assert_eq!(sse_all(&[b"data: a\n\ndata: \xff\n\n"]), vec![ev("a"), Err("utf8".to_owned())]);
        assert_eq!(sse_all(&[]), vec![]);
        // A leading BOM is dropped, even split across chunks (a decoder this
        // replaced panicked on it).
        assert_eq!(sse_all(&[b"\xef\xbb", b"\xbfdata: a"]), vec![ev("a")]);
        // Blocks without data are not events; an empty data line is one.
        assert_eq!(sse_all(&[b"event: x\nid: 1\n\ndata:\n\n"]), vec![ev("")]);
    }

    /// Bytes shaped like event streams (and NDJSON), with the corners that
    /// break decoders: CR, CRLF split across chunks, comments, fields with no
    /// colon, multi-byte and invalid UTF-8, a BOM.
    fn streamish() -> impl Strategy<Value = Vec<u8>> {
        let piece = prop_oneof![
            Just(&b"data: "[..]),
            Just(&b"data:"[..]),
            Just(&b"data"[..]),
            Just(&b"event: ping"[..]),
            Just(&b"id: 7"[..]),
            Just(&b"retry: 10"[..]),
            Just(&b": comment"[..]),
            Just(&b"{\"a\":1}"[..]),
            Just(&b"[DONE]"[..]),
            Just(&b"\n"[..]),
            Just(&b"\r"[..]),
            Just(&b"\r\n"[..]),
            Just(&b"\n\n"[..]),
            Just("é😀".as_bytes()),
            Just(&b"\xef\xbb\xbf"[..]),
            Just(&b"\xff"[..]),
            Just(&b"\xe2\x82"[..]),
            Just(&b" "[..]),
        ];
        prop_oneof![
            proptest::collection::vec(piece, 0..40).prop_map(|ps| ps.concat()),
            proptest::collection::vec(any::<u8>(), 0..256),
        ]
    }

    /// `bytes` cut at `cuts` (positions taken modulo its length).
    fn split_at(bytes: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
        let mut at: Vec<usize> =
            cuts.iter().map(|c| if bytes.is_empty() { 0 } else { c % (bytes.len() + 1) }).collect();
        at.sort_unstable();
        let mut chunks = Vec::new();
        let mut start = 0;
        for end in at {
            chunks.push(bytes[start..end].to_vec());
            start = end;
        }
        chunks.push(bytes[start..].to_vec());
        chunks
    }

    /// Lines as NDJSON readers see them: split on LF, a CR before it
    /// dropped, invalid UTF-8 replaced, a last unterminated line kept.
    fn lines_model(bytes: &[u8]) -> Vec<String> {
        let mut pieces: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
        let last = pieces.pop().filter(|p| !p.is_empty());
        pieces
            .into_iter()
            .chain(last)
            .map(|l| String::from_utf8_lossy(l.strip_suffix(b"\r").unwrap_or(l)).into_owned())
            .collect()
    }

    proptest! {
        #[test]
        fn prop_sse_events_do_not_depend_on_where_the_body_is_split(
            bytes in streamish(),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
        ) {
            let whole = sse_all(&[&bytes]);
            let chunks = split_at(&bytes, &cuts);
            let parts: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
            prop_assert_eq!(sse_all(&parts), whole.clone());
            let singles: Vec<&[u8]> = bytes.chunks(1).collect();
            prop_assert_eq!(sse_all(&singles), whole);
        }

        #[test]
        fn prop_ndjson_lines_do_not_depend_on_where_the_body_is_split(
            bytes in streamish(),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
        ) {
            let chunks = split_at(&bytes, &cuts);
            let parts: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
            let want = lines_model(&bytes);
            prop_assert_eq!(split_all(&parts), want.clone());
            prop_assert_eq!(split_all(&[&bytes]), want);
        }
    }
}
