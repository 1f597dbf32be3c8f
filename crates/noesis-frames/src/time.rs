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
    let t = t.strip_suffix('Z').or_else(|| t.strip_suffix("+00:00"))?;
    let (date, time) = t.split_once('T')?;
    let mut d = date.splitn(3, '-');
    let (y, m, day): (i64, i64, i64) = (d.next()?.parse().ok()?, d.next()?.parse().ok()?, d.next()?.parse().ok()?);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut h = hms.splitn(3, ':');
    let (hh, mm, ss): (i64, i64, i64) = (h.next()?.parse().ok()?, h.next()?.parse().ok()?, h.next()?.parse().ok()?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 || hh < 0 || mm < 0 {
        return None;
    }
    let ms = if frac.is_empty() {
        0
    } else {
        if !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let digits: String = frac.chars().chain("000".chars()).take(3).collect();
        digits.parse::<i64>().ok()?
    };
    let days = days_from_civil(y, m, day);
    Some(Timestamp(((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000 + ms))
}

/// Days since 1970-01-01 for a proleptic Gregorian date (H. Hinnant's
/// algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { yoe + era * 400 + 1 } else { yoe + era * 400 }, m, d)
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days = self.0.div_euclid(86_400_000);
        let rest = self.0.rem_euclid(86_400_000);
        let (y, m, d) = civil_from_days(days);
        let (h, rest) = (rest / 3_600_000, rest % 3_600_000);
        let (mi, rest) = (rest / 60_000, rest % 60_000);
        let (s, ms) = (rest / 1000, rest % 1000);
        write!(f, "{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z")
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
    }

    #[test]
    fn rejects_other_forms() {
        for bad in ["", "2025-11-21", "2025-13-01T00:00:00Z", "2025-11-21T11:03:00", "2025-11-21T25:00:00Z", "x"] {
            let e = Timestamp::parse(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("`{bad}`")), "{e}");
        }
    }
}
