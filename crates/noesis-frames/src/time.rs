//! Millisecond UTC timestamps, written as RFC 3339 (`2026-11-21T11:03:00.123Z`).

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::FramesError;

/// Milliseconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The system clock, now. The algebra never calls this: it takes the
    /// time as an argument.
    #[must_use]
    pub fn now() -> Timestamp {
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timestamp(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// From milliseconds since the epoch.
    #[must_use]
    pub fn from_millis(ms: i64) -> Timestamp {
        Timestamp(ms)
    }

    /// Milliseconds since the epoch.
    #[must_use]
    pub fn millis(self) -> i64 {
        self.0
    }

    /// This time plus `ms` milliseconds (saturating).
    #[must_use]
    pub fn plus_millis(self, ms: i64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.fff]Z` (UTC only).
    ///
    /// # Errors
    /// [`FramesError::BadTime`] naming the text when it is not of that form.
    pub fn parse(text: &str) -> Result<Timestamp, FramesError> {
        parse(text).ok_or_else(|| FramesError::BadTime(text.to_owned()))
    }
}

fn parse(t: &str) -> Option<Timestamp> {
    // UTC only: a frame's times are compared as numbers, never shown in a
    // zone, so another offset is more likely a mistake than a wish.
    if !(t.ends_with('Z') || t.ends_with("+00:00")) || !t.contains('T') {
        return None;
    }
    let ts: jiff::Timestamp = t.parse().ok()?;
    Some(Timestamp(ts.as_millisecond()))
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // jiff covers years -9999..=9999; a stored value beyond is clamped.
        let ts = jiff::Timestamp::from_millisecond(self.0).unwrap_or(if self.0 < 0 {
            jiff::Timestamp::MIN
        } else {
            jiff::Timestamp::MAX
        });
        write!(f, "{}", ts.strftime("%Y-%m-%dT%H:%M:%S.%3fZ"))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let text = String::deserialize(d)?;
        Timestamp::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::Timestamp;

    #[test]
    fn formats_and_parses() {
        for (ms, text) in [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_123, "2000-02-29T00:00:00.123Z"),
            (1_763_722_980_000, "2025-11-21T11:03:00.000Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
        ] {
            assert_eq!(Timestamp::from_millis(ms).to_string(), text);
            assert_eq!(Timestamp::parse(text).unwrap().millis(), ms);
        }
        assert_eq!(Timestamp::parse("2025-11-21T11:03:00Z").unwrap().millis(), 1_763_722_980_000);
        assert_eq!(Timestamp::parse("2025-11-21T11:03:00.5Z").unwrap().millis(), 1_763_722_980_500);
        assert_eq!(Timestamp::parse("2025-11-21T11:03:00+00:00").unwrap().millis(), 1_763_722_980_000);
        // Beyond what a calendar date can hold: shown clamped, never a panic.
        assert!(Timestamp::from_millis(i64::MAX).to_string().starts_with("9999-12-30T"));
        assert!(
            Timestamp::from_millis(i64::MIN).to_string().contains("9999-01-0"),
            "{}",
            Timestamp::from_millis(i64::MIN)
        );
    }

    #[test]
    fn rejects_other_forms() {
        for bad in [
            "",
            "2025-11-21",
            "2025-13-01T00:00:00Z",
            "2025-11-21T11:03:00",
            "2025-11-21T25:00:00Z",
            "x",
            // The hand-written parser took these as the next month's days.
            "2025-02-30T00:00:00Z",
            "2025-04-31T00:00:00Z",
            "2025-11-21T11:03:00+02:00",
        ] {
            let e = Timestamp::parse(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("`{bad}`")), "{e}");
        }
    }
}
