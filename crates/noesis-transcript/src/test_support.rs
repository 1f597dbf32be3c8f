//! Helpers shared by the unit tests.

use serde_json::Value;

/// The records as JSONL, one per line.
pub(crate) fn jsonl(records: &[Value]) -> Vec<u8> {
    records.iter().map(|r| r.to_string() + "\n").collect::<String>().into_bytes()
}
