//! Progress, measured rather than guessed: a turn of tool calls makes
//! progress when it adds evidence the run did not have — a file not read
//! before or read with other bytes, a call not made before, a result (a
//! command's output, a test outcome, a module's envelope) unlike the
//! earlier ones of the same call, a new child run. Turns that add nothing are counted; the run tells the
//! model what it keeps repeating, then stops as stalled, before the budget
//! is burnt.
//!
//! Results are compared with durations and clock times blanked out, so a
//! test run that fails the same way in another 0.03 s is no news.

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};

use super::{AgentRun, Entry, StopReason, ToolEvidence};
use crate::record::CallRecord;
use crate::tool::clip;

/// Turns in a row that added nothing, and whether the model was told.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Stall {
    /// Turns of tool calls since the last one that made progress.
    pub(super) idle: u32,
    /// The model was told it is repeating itself; one more idle turn stops
    /// the run.
    pub(super) warned: bool,
}

/// The keys of the calls of earlier turns, folded in once each: a long
/// run asks at every turn, and results (whole files) are not hashed again
/// each time. Not stored: a run read back folds its calls on its next turn.
#[derive(Debug, Clone, Default)]
pub(super) struct Seen {
    /// Calls folded in, from the first.
    folded: usize,
    keys: HashSet<String>,
}

impl PartialEq for Seen {
    fn eq(&self, _: &Seen) -> bool {
        true
    }
}

/// What a call's result adds to what the run knows, as keys: the same key
/// twice is the same knowledge.
fn keys(call: &CallRecord) -> Vec<String> {
    let mut keys: Vec<String> = call
        .evidence
        .iter()
        .filter_map(|e| match e {
            ToolEvidence::File { path, blake3 } => Some(format!("file\0{path}\0{blake3}")),
            ToolEvidence::SubAgent { run_id } => Some(format!("run\0{run_id}")),
            ToolEvidence::Frame { frame_id } => Some(format!("frame\0{frame_id}")),
            // Commands, envelopes and MCP results are judged by the text
            // the model saw (below), which blanks out timings.
            ToolEvidence::Command { .. } | ToolEvidence::Envelope { .. } | ToolEvidence::Mcp { .. } => None,
        })
        .collect();
    // The arguments are part of it: a different action (`mkdir a`, then
    // `mkdir b`) is progress even when both print nothing.
    let result = call.result.as_deref().unwrap_or_default();
    let result = blake3::hash(normalize(result).as_bytes()).to_hex();
    keys.push(format!("result\0{}\0{}\0{result}", call.tool, call.arguments_hash));
    keys
}

/// `text` with durations (`0.03s`, `12 ms`) and clock times (`12:04:59`)
/// blanked out: what differs between two runs of the same thing.
pub(super) fn normalize(text: &str) -> String {
    const UNITS: [&str; 11] = ["ns", "us", "µs", "ms", "seconds", "second", "secs", "sec", "s", "min", "m"];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
        // A digit inside a word (`sha256`, `v2`) is part of the word; the
        // `T` of a timestamp (`2026-12-07T20:16:47`) is not a word.
        out.push_str(&rest[..start]);
        let mut before = out.chars().rev();
        let (prev, prev2) = (before.next(), before.next());
        let inside_word = prev.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !(prev == Some('T') && prev2.is_some_and(|c| c.is_ascii_digit()));
        rest = &rest[start..];
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':')).unwrap_or(rest.len());
        let number = rest[..number_len].trim_end_matches(['.', ':']);
        let after = &rest[number.len()..];
        // hh:mm:ss only: `a.rs:10:5` is a place in a file, and news.
        let parts: Vec<&str> = number.split(':').collect();
        let clock = parts.len() == 3
            && parts[..2].iter().all(|p| p.len() == 2)
            && parts[2].split('.').next().is_some_and(|s| s.len() == 2);
        let unit = after.strip_prefix(' ').unwrap_or(after);
        let duration = UNITS.iter().find(|u| {
            unit.strip_prefix(**u).is_some_and(|tail| !tail.chars().next().is_some_and(char::is_alphanumeric))
        });
        if inside_word || !(clock || duration.is_some()) {
            out.push_str(number);
            rest = after;
            continue;
        }
        out.push('#');
        rest = match duration {
            Some(u) => &unit[u.len()..],
            None => after,
        };
    }
    out.push_str(rest);
    out
}

impl AgentRun {
    /// Counts turn `turn` as progress or not, and warns or stops the run
    /// when it has made none for `stall_steps` turns.
    pub(super) fn watch_progress(&mut self, turn: u32) {
        // Calls are recorded turn by turn: those before the first of this
        // turn are the earlier ones.
        let first = self.calls.iter().position(|c| c.turn >= turn).unwrap_or(self.calls.len());
        for c in self.calls.get(self.seen.folded..first).unwrap_or_default() {
            self.seen.keys.extend(keys(c));
        }
        self.seen.folded = self.seen.folded.max(first);
        let earlier = &self.seen.keys;
        let progress =
            self.calls[first..].iter().filter(|c| c.turn == turn).flat_map(keys).any(|k| !earlier.contains(&k));
        if progress {
            self.stall = Stall::default();
            return;
        }
        self.stall.idle += 1;
        let limit = self.config.limits.stall_steps.max(1);
        if self.stall.idle < limit {
            return;
        }
        let repeated = self.repeated_calls();
        if self.stall.warned {
            let idle = self.stall.idle;
            self.stop(
                StopReason::Stalled,
                format!("{idle} turns in a row added nothing new, after a warning; repeated: {repeated}"),
            );
            return;
        }
        self.stall.warned = true;
        self.entries.push(Entry::Note {
            content: format!(
                "Your last {} turns added nothing new: no file you had not read, no changed file, no new result. \
You repeated: {repeated}. Doing it again will not help: change your approach, or give your final answer. \
One more turn without progress stops the run.",
                self.stall.idle
            ),
        });
    }

    /// A new answer is progress too.
    pub(super) fn answered(&mut self) {
        self.stall = Stall::default();
    }

    /// The calls of the idle turns, each once, with how often it came.
    fn repeated_calls(&self) -> String {
        let mut turns: Vec<u32> = self.calls.iter().map(|c| c.turn).collect();
        turns.dedup();
        let idle: Vec<u32> = turns.iter().rev().take(self.stall.idle as usize).copied().collect();
        let mut seen: BTreeMap<String, (usize, u32)> = BTreeMap::new();
        for (order, c) in self.calls.iter().filter(|c| idle.contains(&c.turn)).enumerate() {
            let shown = format!("`{}` {}", c.tool, clip(&c.arguments.to_string(), 120));
            seen.entry(shown).or_insert((order, 0)).1 += 1;
        }
        let mut calls: Vec<(String, usize, u32)> = seen.into_iter().map(|(s, (o, n))| (s, o, n)).collect();
        calls.sort_by_key(|(_, order, _)| *order);
        calls
            .into_iter()
            .map(|(s, _, n)| if n > 1 { format!("{s} ({n} times)") } else { s })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::normalize;

    #[test]
    fn timings_are_blanked_and_other_numbers_kept() {
        for (text, expect) in [
            ("1 failed, 2 passed in 0.03s", "1 failed, 2 passed in #"),
            ("1 failed, 2 passed in 0.04s", "1 failed, 2 passed in #"),
            ("finished in 12 ms.", "finished in #."),
            ("at 12:04:59 it broke", "at # it broke"),
            ("took 3.5 seconds", "took #"),
            ("2 failed", "2 failed"),
            ("line 10: x = 5", "line 10: x = 5"),
            ("a.rs:10:5: error", "a.rs:10:5: error"),
            ("2026-12-07T20:16:47.123Z", "2026-12-07T#Z"),
            ("sha256 md5 v2s", "sha256 md5 v2s"),
            ("3 services started", "3 services started"),
            ("ratio 1.5", "ratio 1.5"),
            ("", ""),
            ("µs 5µs", "µs #"),
        ] {
            assert_eq!(normalize(text), expect, "{text:?}");
        }
    }
}
