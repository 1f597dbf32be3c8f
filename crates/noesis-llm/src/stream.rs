//! Decoding streamed answers: bytes → lines → server-sent events.
//!
//! Pure and incremental: bytes may be split anywhere, including inside a
//! UTF-8 character or between `\r` and `\n`. NDJSON (Ollama) is just the
//! lines; SSE (OpenAI, Anthropic, Gemini) groups them into events.

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

/// Groups lines into events (a blank line ends one).
#[derive(Debug, Default)]
pub(crate) struct SseDecoder {
    event: String,
    data: Vec<String>,
}

impl SseDecoder {
    /// Feeds one line; returns the event it completed, if any.
    pub(crate) fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            if self.data.is_empty() {
                self.event.clear();
                return None;
            }
            let data = std::mem::take(&mut self.data).join("\n");
            return Some(SseEvent { event: std::mem::take(&mut self.event), data });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => self.data.push(value.to_owned()),
            "event" => self.event = value.to_owned(),
            _ => {}
        }
        None
    }

    /// The event left open when the stream ended without a blank line.
    pub(crate) fn finish(&mut self) -> Option<SseEvent> {
        self.line("")
    }
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

    #[test]
    fn sse_groups_data_lines_and_names_events() {
        let mut d = SseDecoder::default();
        let mut events = Vec::new();
        for line in
            [": comment", "event: message_start", "data: {\"a\":1}", "", "data:x", "data: y", "", "", "data: [DONE]"]
        {
            events.extend(d.line(line));
        }
        events.extend(d.finish());
        assert_eq!(
            events,
            vec![
                SseEvent { event: "message_start".into(), data: "{\"a\":1}".into() },
                SseEvent { event: String::new(), data: "x\ny".into() },
                SseEvent { event: String::new(), data: "[DONE]".into() },
            ]
        );
    }
}
