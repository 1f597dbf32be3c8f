//! Semver versions and the ranges `composition.requires[].version` uses.
//!
//! A range is one or more comparators separated by spaces, all of which must
//! hold: `1.2.3` or `=1.2.3` (exact), `>=1.2.3`, `>1.2.3`, `<2.0.0`,
//! `<=2.0.0`, `^1.2.3` (same left-most non-zero part: `>=1.2.3 <2.0.0`,
//! `^0.2.3` = `>=0.2.3 <0.3.0`), `~1.2.3` (`>=1.2.3 <1.3.0`) and `*` (any).
//! Missing parts count as wildcards (`^1` = `>=1.0.0 <2.0.0`, `1.2` =
//! `>=1.2.0 <1.3.0`, `x` and `*` allowed in a part). A pre-release version
//! (`1.0.0-rc.1`) sorts before its release, by the semver rules.

use std::cmp::Ordering;
use std::fmt;

/// A semver version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// Major.
    pub major: u64,
    /// Minor.
    pub minor: u64,
    /// Patch.
    pub patch: u64,
    /// The pre-release identifiers (`rc.1` → `["rc", "1"]`); build metadata
    /// is dropped, as semver orders it.
    pub pre: Vec<String>,
}

/// A version or a range that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}`: {message}")]
pub struct VersionError {
    /// The text given.
    pub text: String,
    /// What is wrong.
    pub message: String,
}

fn bad<T>(text: &str, message: impl Into<String>) -> Result<T, VersionError> {
    Err(VersionError { text: text.to_owned(), message: message.into() })
}

impl Version {
    /// Parses `1.2.3`, `v1.2.3`, `1.2.3-rc.1+build`.
    pub fn parse(text: &str) -> Result<Version, VersionError> {
        let t = text.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let t = t.split_once('+').map_or(t, |(v, _)| v);
        let (core, pre) = match t.split_once('-') {
            Some((c, p)) => (c, p.split('.').map(str::to_owned).collect::<Vec<_>>()),
            None => (t, Vec::new()),
        };
        if pre.iter().any(String::is_empty) {
            return bad(text, "empty pre-release identifier");
        }
        let parts: Vec<&str> = core.split('.').collect();
        if parts.len() != 3 {
            return bad(text, "a version is MAJOR.MINOR.PATCH");
        }
        let mut nums = [0u64; 3];
        for (n, p) in nums.iter_mut().zip(&parts) {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return bad(text, format!("`{p}` is not a number"));
            }
            *n = p
                .parse()
                .map_err(|_| VersionError { text: text.to_owned(), message: format!("`{p}` is too large") })?;
        }
        Ok(Version { major: nums[0], minor: nums[1], patch: nums[2], pre })
    }

    fn new(major: u64, minor: u64, patch: u64) -> Version {
        Version { major, minor, patch, pre: Vec::new() }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)?;
        if !self.pre.is_empty() {
            write!(f, "-{}", self.pre.join("."))?;
        }
        Ok(())
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Version) -> Ordering {
        (self.major, self.minor, self.patch).cmp(&(other.major, other.minor, other.patch)).then_with(|| {
            match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => compare_pre(&self.pre, &other.pre),
            }
        })
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Version) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

fn compare_pre(a: &[String], b: &[String]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let o = match (x.parse::<u64>(), y.parse::<u64>()) {
            (Ok(m), Ok(n)) => m.cmp(&n),
            (Ok(_), Err(_)) => Ordering::Less,
            (Err(_), Ok(_)) => Ordering::Greater,
            (Err(_), Err(_)) => x.cmp(y),
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmp {
    Ge,
    Gt,
    Lt,
    Le,
}

/// A version range: every comparator must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionReq {
    text: String,
    comparators: Vec<(Cmp, Version)>,
}

impl fmt::Display for VersionReq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `1`, `1.2`, `1.2.3`, with `x`/`*` parts: the numbers given (a wildcard
/// ends them) and the pre-release of a full version.
fn partial(text: &str, whole: &str) -> Result<(Vec<u64>, Vec<String>), VersionError> {
    let t = text.strip_prefix('v').unwrap_or(text);
    let t = t.split_once('+').map_or(t, |(v, _)| v);
    let mut nums = Vec::new();
    let (core, pre) = match t.split_once('-') {
        Some((c, p)) => (c, p.split('.').map(str::to_owned).collect()),
        None => (t, Vec::new()),
    };
    if pre.iter().any(String::is_empty) {
        return bad(whole, format!("`{text}`: empty pre-release identifier"));
    }
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() > 3 {
        return bad(whole, format!("`{text}` has more than three parts"));
    }
    let mut wild = false;
    for p in &parts {
        if matches!(*p, "x" | "X" | "*") {
            wild = true;
            continue;
        }
        if wild {
            return bad(whole, format!("`{text}`: a number after a wildcard"));
        }
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return bad(whole, format!("`{p}` is not a number"));
        }
        nums.push(
            p.parse().map_err(|_| VersionError { text: whole.to_owned(), message: format!("`{p}` is too large") })?,
        );
    }
    if !pre.is_empty() && nums.len() < 3 {
        return bad(whole, format!("`{text}`: a pre-release needs a full version"));
    }
    Ok((nums, pre))
}

fn full(nums: &[u64], pre: Vec<String>) -> Version {
    let at = |i: usize| nums.get(i).copied().unwrap_or(0);
    Version { major: at(0), minor: at(1), patch: at(2), pre }
}

/// The version just past every version that starts with `nums`
/// (`[1, 2]` → `1.3.0`); `None` when there is none (no parts given).
fn next_after(nums: &[u64]) -> Option<Version> {
    match nums {
        [] => None,
        [m] => Some(Version::new(m.saturating_add(1), 0, 0)),
        [m, n] => Some(Version::new(*m, n.saturating_add(1), 0)),
        [m, n, p] => Some(Version::new(*m, *n, p.saturating_add(1))),
        _ => None,
    }
}

impl VersionReq {
    /// Parses a range.
    pub fn parse(text: &str) -> Result<VersionReq, VersionError> {
        let words: Vec<&str> = text.split_whitespace().collect();
        if words.is_empty() {
            return bad(text, "the range is empty");
        }
        let mut comparators = Vec::new();
        let mut i = 0;
        while i < words.len() {
            let word = words[i];
            i += 1;
            let op_len = word.bytes().take_while(|b| b"<>=^~".contains(b)).count();
            let (op, mut rest) = word.split_at(op_len);
            // `>= 1.0.0`: an operator may stand apart from its version.
            if rest.is_empty() && !op.is_empty() {
                let Some(next) = words.get(i) else { return bad(text, format!("`{op}` needs a version")) };
                rest = next;
                i += 1;
            }
            let (nums, pre) = partial(rest, text)?;
            let lower = full(&nums, pre.clone());
            match op {
                "" | "=" => {
                    if nums.len() == 3 {
                        comparators.push((Cmp::Ge, lower.clone()));
                        comparators.push((Cmp::Le, lower));
                    } else {
                        if !nums.is_empty() {
                            comparators.push((Cmp::Ge, lower));
                        }
                        if let Some(up) = next_after(&nums) {
                            comparators.push((Cmp::Lt, up));
                        }
                    }
                }
                ">=" => comparators.push((Cmp::Ge, lower)),
                ">" => match nums.len() {
                    3 => comparators.push((Cmp::Gt, lower)),
                    // `>1.2` means past every 1.2.x.
                    _ => match next_after(&nums) {
                        Some(up) => comparators.push((Cmp::Ge, up)),
                        None => return bad(text, "`>*` matches nothing"),
                    },
                },
                "<" => comparators.push((Cmp::Lt, lower)),
                "<=" if nums.len() == 3 => comparators.push((Cmp::Le, lower)),
                "<=" => comparators.extend(next_after(&nums).map(|up| (Cmp::Lt, up))),
                "~" => {
                    comparators.push((Cmp::Ge, lower));
                    let up = match nums.as_slice() {
                        [] => None,
                        [m] => Some(Version::new(m.saturating_add(1), 0, 0)),
                        [m, n, ..] => Some(Version::new(*m, n.saturating_add(1), 0)),
                    };
                    comparators.extend(up.map(|u| (Cmp::Lt, u)));
                }
                "^" => {
                    comparators.push((Cmp::Ge, lower));
                    let up = match nums.as_slice() {
                        [] => None,
                        [m] => Some(Version::new(m.saturating_add(1), 0, 0)),
                        [0, n] => Some(Version::new(0, n.saturating_add(1), 0)),
                        [m, _] => Some(Version::new(m.saturating_add(1), 0, 0)),
                        [0, 0, p] => Some(Version::new(0, 0, p.saturating_add(1))),
                        [0, n, _] => Some(Version::new(0, n.saturating_add(1), 0)),
                        [m, ..] => Some(Version::new(m.saturating_add(1), 0, 0)),
                    };
                    comparators.extend(up.map(|u| (Cmp::Lt, u)));
                }
                other => return bad(text, format!("unknown operator `{other}`")),
            }
        }
        Ok(VersionReq { text: text.trim().to_owned(), comparators })
    }

    /// Whether `v` satisfies every comparator.
    pub fn matches(&self, v: &Version) -> bool {
        self.comparators.iter().all(|(cmp, bound)| match cmp {
            Cmp::Ge => v >= bound,
            Cmp::Gt => v > bound,
            Cmp::Lt => v < bound,
            Cmp::Le => v <= bound,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(range: &str, version: &str) -> bool {
        let r = VersionReq::parse(range).unwrap_or_else(|e| panic!("{e}"));
        r.matches(&Version::parse(version).unwrap())
    }

    #[test]
    fn ranges() {
        let cases: &[(&str, &str, bool)] = &[
            ("1.2.3", "1.2.3", true),
            ("1.2.3", "1.2.4", false),
            ("=1.2.3", "1.2.3", true),
            (">=1.0.0", "1.0.0", true),
            (">=1.0.0", "0.9.9", false),
            (">= 1.0.0", "2.0.0", true),
            (">1.0.0", "1.0.0", false),
            (">1.0.0", "1.0.1", true),
            ("<2.0.0", "1.99.0", true),
            ("<2.0.0", "2.0.0", false),
            ("<=2.0.0", "2.0.0", true),
            ("^1.2.3", "1.9.0", true),
            ("^1.2.3", "1.2.2", false),
            ("^1.2.3", "2.0.0", false),
            ("^0.2.3", "0.2.9", true),
            ("^0.2.3", "0.3.0", false),
            ("^0.0.3", "0.0.3", true),
            ("^0.0.3", "0.0.4", false),
            ("^1", "1.5.0", true),
            ("^1", "2.0.0", false),
            ("^0.2", "0.2.7", true),
            ("^0.2", "0.3.0", false),
            ("~1.2.3", "1.2.9", true),
            ("~1.2.3", "1.3.0", false),
            ("~1.2.3", "1.2.2", false),
            ("~1", "1.9.9", true),
            ("~1", "2.0.0", false),
            ("*", "0.0.1", true),
            ("1.x", "1.4.0", true),
            ("1.x", "2.0.0", false),
            ("1.2", "1.2.9", true),
            ("1.2", "1.3.0", false),
            (">1.2", "1.2.9", false),
            (">1.2", "1.3.0", true),
            ("<=1.2", "1.2.9", true),
            ("<=1.2", "1.3.0", false),
            (">=1.0.0 <2.0.0", "1.5.0", true),
            (">=1.0.0 <2.0.0", "2.0.0", false),
            (">=1.0.0 <1.0.0", "1.0.0", false),
            ("^1.0.0", "1.1.0-rc.1", true),
            ("1.0.0", "1.0.0-rc.1", false),
            ("<1.0.0", "1.0.0-rc.1", true),
            ("v1.0.0", "1.0.0", true),
        ];
        for (range, version, want) in cases {
            assert_eq!(check(range, version), *want, "{range} vs {version}");
        }
    }

    #[test]
    fn ordering_follows_semver() {
        let order = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0"];
        for w in order.windows(2) {
            assert!(Version::parse(w[0]).unwrap() < Version::parse(w[1]).unwrap(), "{} < {}", w[0], w[1]);
        }
        assert_eq!(Version::parse("1.2.3+build.5").unwrap().to_string(), "1.2.3");
    }

    #[test]
    fn bad_input_is_an_error() {
        for bad in ["", "abc", "1.2.3.4", ">=", "^x.1", "1.-2", "!1.0.0", "1.0.0-", "99999999999999999999999.0.0"] {
            assert!(VersionReq::parse(bad).is_err(), "{bad:?} should not parse");
        }
        for bad in ["1.2", "1.2.x", "a.b.c", "1.2.3-", ""] {
            assert!(Version::parse(bad).is_err(), "{bad:?} should not parse");
        }
    }
}
