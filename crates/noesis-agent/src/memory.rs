//! A run's working memory across runs of one agent session: the last
//! `capacity` things that happened (what the user asked, what the agent
//! answered, what tools observed, what the loop noted), oldest dropped
//! first. Serialisable, so a session continues in a later process.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// What a memory item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    /// What the user asked.
    User,
    /// What the agent answered.
    Response,
    /// What a tool returned.
    Observation,
    /// A summary of an event (a stop, a correction, a critique).
    Event,
}

/// One remembered thing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryItem {
    /// What it is.
    pub kind: MemoryKind,
    /// Its text.
    pub text: String,
}

/// The last `capacity` items, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryBuffer {
    capacity: usize,
    items: VecDeque<MemoryItem>,
}

/// Characters of one item shown in [`MemoryBuffer::to_context_string`].
const SHOWN_CHARS: usize = 500;

impl MemoryBuffer {
    /// An empty buffer keeping at most `capacity` items (at least one).
    pub fn new(capacity: usize) -> MemoryBuffer {
        MemoryBuffer { capacity: capacity.max(1), items: VecDeque::new() }
    }

    /// Adds an item, dropping the oldest beyond the capacity.
    pub fn push(&mut self, kind: MemoryKind, text: impl Into<String>) {
        self.items.push_back(MemoryItem { kind, text: text.into() });
        while self.items.len() > self.capacity {
            self.items.pop_front();
        }
    }

    /// The last `n` items, oldest first.
    pub fn recent(&self, n: usize) -> Vec<&MemoryItem> {
        self.items.iter().skip(self.items.len().saturating_sub(n)).collect()
    }

    /// How many items it holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The window as text for a prompt: one line per item, each labelled
    /// and cut to a few hundred characters.
    pub fn to_context_string(&self) -> String {
        self.items
            .iter()
            .map(|i| {
                let label = match i.kind {
                    MemoryKind::User => "user",
                    MemoryKind::Response => "agent",
                    MemoryKind::Observation => "observed",
                    MemoryKind::Event => "event",
                };
                let one_line = i.text.replace(['\n', '\r'], " ");
                format!("[{label}] {}", crate::tool::clip(&one_line, SHOWN_CHARS))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_capacity_items_in_order() {
        let mut m = MemoryBuffer::new(3);
        for i in 0..5 {
            m.push(MemoryKind::Observation, format!("o{i}"));
        }
        assert_eq!(m.len(), 3);
        let texts: Vec<&str> = m.recent(10).iter().map(|i| i.text.as_str()).collect();
        assert_eq!(texts, ["o2", "o3", "o4"]);
        assert_eq!(m.recent(1)[0].text, "o4");
        assert!(m.recent(0).is_empty());
        assert_eq!(MemoryBuffer::new(0).capacity, 1);
    }

    #[test]
    fn renders_one_labelled_line_per_item_and_round_trips() {
        let mut m = MemoryBuffer::new(4);
        m.push(MemoryKind::User, "fix\nthe bug");
        m.push(MemoryKind::Response, "done");
        m.push(MemoryKind::Event, "x".repeat(600));
        let text = m.to_context_string();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "[user] fix the bug");
        assert_eq!(lines[1], "[agent] done");
        assert!(lines[2].starts_with("[event] xxx") && lines[2].ends_with('…') && lines[2].chars().count() < 520);
        let back: MemoryBuffer = serde_json::from_value(serde_json::to_value(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }
}
