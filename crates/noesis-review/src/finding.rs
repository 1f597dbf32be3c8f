//! The finding, its parts, and the validation of a model's reply.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::fingerprint::{fingerprint, location_key};

/// How much a finding matters, from most to least severe (the derived order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Wrong or unsafe: must be fixed before the change lands.
    Error,
    /// Likely a problem: should be fixed.
    Warning,
    /// Worth a look; fixing it is a judgement call.
    Note,
    /// Context for the reader; nothing to fix.
    Info,
}

impl Severity {
    /// Every severity, most severe first.
    pub const ALL: [Severity; 4] = [Severity::Error, Severity::Warning, Severity::Note, Severity::Info];

    /// The name used in the model's reply, JSON and text output (`"error"`, …, `"info"`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
            Severity::Info => "info",
        }
    }

    /// The severity with this exact name, as the reply schema spells it.
    #[must_use]
    pub fn from_name(name: &str) -> Option<Severity> {
        Severity::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// SARIF 2.1.0 `result.level`: `error`, `warning`, `note`, and `none` for
    /// [`Severity::Info`] (SARIF has no "info" level; `none` with kind
    /// `informational` is its way to say "no action needed").
    #[must_use]
    pub fn sarif_level(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
            Severity::Info => "none",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a finding is about: a lowercase kebab-case word such as `security`.
///
/// Any category is accepted, so a model (or a project) can say `concurrency`
/// or `api-design`; [`Category::COMMON`] lists the ones the reply schema
/// suggests. [`Category::new`] normalises: it lowercases, turns every run of
/// characters other than letters and digits into one `-`, trims `-` at the
/// ends, and maps a few spellings of the common ones onto them (`doc` and
/// `documentation` → `docs`, `test` and `tests` → `testing`, `perf` →
/// `performance`, `maintenance` → `maintainability`). The category is part of
/// the [fingerprint](mod@crate::fingerprint), so one spelling per idea matters.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Category(String);

impl Category {
    /// The categories the reply schema suggests, each described by [`Category::description`].
    pub const COMMON: [&'static str; 7] =
        ["correctness", "security", "performance", "maintainability", "style", "testing", "docs"];

    /// The longest category accepted, in characters after normalising.
    pub const MAX_CHARS: usize = 64;

    /// The normalised category.
    ///
    /// # Errors
    ///
    /// [`Problem::Empty`] when nothing but punctuation is left,
    /// [`Problem::TooLong`] past [`Category::MAX_CHARS`].
    pub fn new(raw: &str) -> Result<Category, Problem> {
        let mut out = String::with_capacity(raw.len());
        let mut dash = false;
        for c in raw.chars() {
            if c.is_alphanumeric() {
                if dash && !out.is_empty() {
                    out.push('-');
                }
                dash = false;
                out.extend(c.to_lowercase());
            } else {
                dash = true;
            }
        }
        let out = match out.as_str() {
            "doc" | "documentation" => "docs".to_owned(),
            "test" | "tests" => "testing".to_owned(),
            "perf" => "performance".to_owned(),
            "maintenance" => "maintainability".to_owned(),
            _ => out,
        };
        if out.is_empty() {
            return Err(Problem::Empty);
        }
        if out.chars().count() > Category::MAX_CHARS {
            return Err(Problem::TooLong { max: Category::MAX_CHARS });
        }
        Ok(Category(out))
    }

    /// The normalised name.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this is one of [`Category::COMMON`].
    #[must_use]
    pub fn is_common(&self) -> bool {
        Category::COMMON.contains(&self.0.as_str())
    }

    /// One line saying what the category covers (SARIF's rule description).
    #[must_use]
    pub fn description(&self) -> String {
        let known = match self.0.as_str() {
            "correctness" => "Code that does the wrong thing: logic errors, unhandled cases, broken invariants.",
            "security" => "Code that can be abused: injection, unchecked input, leaked secrets, unsafe defaults.",
            "performance" => "Code that wastes time or memory: needless work, allocation or blocking.",
            "maintainability" => "Code that is hard to change safely: duplication, tangled structure, unclear names.",
            "style" => "Code that departs from the project's conventions or reads poorly.",
            "testing" => "Missing, weak or misleading tests.",
            "docs" => "Missing, wrong or stale documentation and comments.",
            other => return format!("Review findings in the `{other}` category."),
        };
        known.to_owned()
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Category {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Category::new(&raw).map_err(|p| serde::de::Error::custom(format_args!("category: {p}")))
    }
}

/// What is wrong with one field of a reply or a finding.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Problem {
    /// A required field is absent.
    Missing,
    /// A field the schema does not have.
    Unknown,
    /// The JSON value has the wrong type.
    WrongType {
        /// What the schema wants, e.g. `"a string"`.
        expected: &'static str,
        /// What was there, e.g. `"a number"`.
        found: &'static str,
    },
    /// Nothing is left after trimming and cleaning.
    Empty,
    /// Longer than allowed.
    TooLong {
        /// The most characters allowed.
        max: usize,
    },
    /// Not one of the allowed names (a severity).
    NotOneOf {
        /// The allowed names.
        allowed: &'static [&'static str],
        /// What was there.
        found: String,
    },
    /// A line number below 1 or above `u32::MAX`.
    LineOutOfRange,
    /// `end_line` is before `start_line`.
    EndBeforeStart {
        /// The finding's `start_line`.
        start: u32,
        /// The finding's `end_line`.
        end: u32,
    },
    /// The file is not a path inside the project.
    BadPath {
        /// Why, e.g. `"must be relative to the project root"`.
        reason: &'static str,
    },
}

const SEVERITY_NAMES: &[&str] = &["error", "warning", "note", "info"];

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Missing => f.write_str("missing"),
            Problem::Unknown => f.write_str("not a field of the schema"),
            Problem::WrongType { expected, found } => write!(f, "expected {expected}, found {found}"),
            Problem::Empty => f.write_str("empty"),
            Problem::TooLong { max } => write!(f, "longer than {max} characters"),
            Problem::NotOneOf { allowed, found } => {
                write!(f, "{found:?} is not one of {}", allowed.join(", "))
            }
            Problem::LineOutOfRange => write!(f, "expected a line number from 1 to {}", u32::MAX),
            Problem::EndBeforeStart { start, end } => write!(f, "{end} is before start_line {start}"),
            Problem::BadPath { reason } => f.write_str(reason),
        }
    }
}

/// A problem with one field of a model's reply, naming the finding and the field.
///
/// Displays as `findings[2].start_line: expected an integer, found a string`;
/// [`ReviewError::pointer`] gives the JSON pointer (`/findings/2/start_line`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {problem}", self.path())]
pub struct ReviewError {
    index: Option<usize>,
    field: String,
    problem: Problem,
}

impl ReviewError {
    fn new(index: Option<usize>, field: &str, problem: Problem) -> ReviewError {
        ReviewError { index, field: field.to_owned(), problem }
    }

    /// The index of the finding in the reply's `findings`, or `None` for the
    /// reply itself (`summary`, a missing `findings`) and for [`Finding::new`].
    #[must_use]
    pub fn index(&self) -> Option<usize> {
        self.index
    }

    /// The field's name (`"start_line"`); empty when the finding or the reply
    /// as a whole is wrong (not an object).
    #[must_use]
    pub fn field(&self) -> &str {
        &self.field
    }

    /// What is wrong.
    #[must_use]
    pub fn problem(&self) -> &Problem {
        &self.problem
    }

    /// The JSON pointer of the field in the reply: `/findings/2/start_line`,
    /// `/summary`, `/findings/2` for a finding that is not an object, `""` for the reply.
    #[must_use]
    pub fn pointer(&self) -> String {
        let mut p = String::new();
        if let Some(i) = self.index {
            p = format!("/findings/{i}");
        }
        if !self.field.is_empty() {
            p.push('/');
            p.push_str(&self.field.replace('~', "~0").replace('/', "~1"));
        }
        p
    }

    fn path(&self) -> String {
        match (self.index, self.field.as_str()) {
            (Some(i), "") => format!("findings[{i}]"),
            (Some(i), field) => format!("findings[{i}].{field}"),
            (None, "") => "reply".to_owned(),
            (None, field) => field.to_owned(),
        }
    }
}

/// The parts of a finding before validation: what [`Finding::new`] takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFinding {
    /// How much it matters.
    pub severity: Severity,
    /// Normalised by [`Category::new`].
    pub category: String,
    /// Path relative to the project root; `\` becomes `/`, `.` segments go.
    pub file: String,
    /// First line, 1-based.
    pub start_line: u32,
    /// Last line, at least `start_line`.
    pub end_line: u32,
    /// One line naming the problem.
    pub title: String,
    /// What is wrong and why it matters.
    pub message: String,
    /// The condition under which the finding is resolved.
    pub resolves_when: String,
}

/// One validated code-review finding.
///
/// Built only by [`Finding::new`], [`Finding::from_model`] or deserialising
/// (which validates the same way), so every finding holds: a normalised
/// [`Category`]; a project-relative `file` with `/` separators and no `.` or
/// `..` segments; `1 <= start_line <= end_line`; a non-empty one-line
/// `title` and `resolves_when`; a non-empty `message`; no control characters
/// other than the message's line breaks (model text reaches terminals); and
/// the [`fingerprint`](crate::fingerprint()) of its category and title,
/// always computed here, never taken from input.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Finding {
    severity: Severity,
    category: Category,
    file: String,
    start_line: u32,
    end_line: u32,
    title: String,
    message: String,
    resolves_when: String,
    fingerprint: String,
}

/// The fields of a finding in the model's reply, in schema order.
const FIELDS: [&str; 8] =
    ["severity", "category", "file", "start_line", "end_line", "title", "message", "resolves_when"];

impl Finding {
    /// Validates and cleans `parts` into a finding.
    ///
    /// # Errors
    ///
    /// Every problem found, each naming the field (and no finding index).
    pub fn new(parts: &NewFinding) -> Result<Finding, Vec<ReviewError>> {
        build(None, parts)
    }

    /// Validates one element of the reply's `findings` array (the finding at
    /// `index`), as [`findings_schema`] describes it, and cleans it as
    /// [`Finding::new`] does. Every problem is returned, each naming `index`
    /// and the field.
    ///
    /// Beyond the schema: the file must be a path inside the project, lines
    /// at most `u32::MAX` with `end_line >= start_line`, and text fields
    /// non-empty after cleaning. An integer written as `12.0` is accepted, as
    /// JSON Schema does.
    ///
    /// # Errors
    ///
    /// Every problem found, each naming `index` and the field; the JSON types
    /// are checked first, the rest only once they are right.
    pub fn from_model(index: usize, value: &Value) -> Result<Finding, Vec<ReviewError>> {
        let at = Some(index);
        let Some(obj) = value.as_object() else {
            return Err(vec![ReviewError::new(at, "", wrong_type("an object", value))]);
        };
        let mut errors: Vec<ReviewError> = obj
            .keys()
            .filter(|k| !FIELDS.contains(&k.as_str()))
            .map(|k| ReviewError::new(at, k, Problem::Unknown))
            .collect();
        let severity = string_field(obj, at, "severity", &mut errors).and_then(|s| {
            let found = Severity::from_name(s);
            if found.is_none() {
                let problem = Problem::NotOneOf { allowed: SEVERITY_NAMES, found: s.to_owned() };
                errors.push(ReviewError::new(at, "severity", problem));
            }
            found
        });
        let category = string_field(obj, at, "category", &mut errors);
        let file = string_field(obj, at, "file", &mut errors);
        let start_line = line_field(obj, at, "start_line", &mut errors);
        let end_line = line_field(obj, at, "end_line", &mut errors);
        let title = string_field(obj, at, "title", &mut errors);
        let message = string_field(obj, at, "message", &mut errors);
        let resolves_when = string_field(obj, at, "resolves_when", &mut errors);
        let (
            Some(severity),
            Some(category),
            Some(file),
            Some(start_line),
            Some(end_line),
            Some(title),
            Some(message),
            Some(resolves_when),
        ) = (severity, category, file, start_line, end_line, title, message, resolves_when)
        else {
            return Err(errors);
        };
        let parts = NewFinding {
            severity,
            category: category.to_owned(),
            file: file.to_owned(),
            start_line,
            end_line,
            title: title.to_owned(),
            message: message.to_owned(),
            resolves_when: resolves_when.to_owned(),
        };
        match build(at, &parts) {
            Ok(finding) if errors.is_empty() => Ok(finding),
            Ok(_) => Err(errors),
            Err(more) => {
                errors.extend(more);
                Err(errors)
            }
        }
    }

    /// How much it matters.
    #[must_use]
    pub fn severity(&self) -> Severity {
        self.severity
    }

    /// What it is about.
    #[must_use]
    pub fn category(&self) -> &Category {
        &self.category
    }

    /// The file, relative to the project root, `/`-separated.
    #[must_use]
    pub fn file(&self) -> &str {
        &self.file
    }

    /// First line, 1-based.
    #[must_use]
    pub fn start_line(&self) -> u32 {
        self.start_line
    }

    /// Last line, 1-based, at least [`Finding::start_line`].
    #[must_use]
    pub fn end_line(&self) -> u32 {
        self.end_line
    }

    /// One line naming the problem.
    #[must_use]
    pub fn title(&self) -> &str {
        &self.title
    }

    /// What is wrong and why (may span lines).
    #[must_use]
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The condition under which the finding is resolved.
    #[must_use]
    pub fn resolves_when(&self) -> &str {
        &self.resolves_when
    }

    /// The file-independent [fingerprint](crate::fingerprint()) of the
    /// category and title: what repeats are counted by.
    #[must_use]
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// The [location key](crate::location_key) (`file#fingerprint`): this
    /// issue in this file, whatever its lines.
    #[must_use]
    pub fn location_key(&self) -> String {
        location_key(&self.file, &self.fingerprint)
    }
}

/// The serialised form (what [`Finding`] serialises to), checked on the way in.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FindingRepr {
    severity: Severity,
    category: String,
    file: String,
    start_line: u32,
    end_line: u32,
    title: String,
    message: String,
    resolves_when: String,
    /// Recomputed, never trusted.
    #[serde(default, rename = "fingerprint")]
    _fingerprint: Option<String>,
}

impl<'de> Deserialize<'de> for Finding {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let r = FindingRepr::deserialize(d)?;
        let parts = NewFinding {
            severity: r.severity,
            category: r.category,
            file: r.file,
            start_line: r.start_line,
            end_line: r.end_line,
            title: r.title,
            message: r.message,
            resolves_when: r.resolves_when,
        };
        Finding::new(&parts).map_err(|errors| {
            let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
            serde::de::Error::custom(all.join("; "))
        })
    }
}

fn build(at: Option<usize>, parts: &NewFinding) -> Result<Finding, Vec<ReviewError>> {
    let mut errors = Vec::new();
    let mut check = |field: &str, problem: Problem| errors.push(ReviewError::new(at, field, problem));
    let category = Category::new(&parts.category).map_err(|p| check("category", p)).ok();
    let file = clean_path(&parts.file).map_err(|p| check("file", p)).ok();
    let title = non_empty(clean_line(&parts.title)).map_err(|p| check("title", p)).ok();
    let message = non_empty(clean_text(&parts.message)).map_err(|p| check("message", p)).ok();
    let resolves_when = non_empty(clean_line(&parts.resolves_when)).map_err(|p| check("resolves_when", p)).ok();
    for (field, line) in [("start_line", parts.start_line), ("end_line", parts.end_line)] {
        if line == 0 {
            errors.push(ReviewError::new(at, field, Problem::LineOutOfRange));
        }
    }
    if parts.start_line > 0 && parts.end_line > 0 && parts.end_line < parts.start_line {
        let problem = Problem::EndBeforeStart { start: parts.start_line, end: parts.end_line };
        errors.push(ReviewError::new(at, "end_line", problem));
    }
    match (category, file, title, message, resolves_when) {
        (Some(category), Some(file), Some(title), Some(message), Some(resolves_when)) if errors.is_empty() => {
            let fingerprint = fingerprint(&category, &title);
            Ok(Finding {
                severity: parts.severity,
                category,
                file,
                start_line: parts.start_line,
                end_line: parts.end_line,
                title,
                message,
                resolves_when,
                fingerprint,
            })
        }
        _ => Err(errors),
    }
}

fn non_empty(s: String) -> Result<String, Problem> {
    if s.is_empty() { Err(Problem::Empty) } else { Ok(s) }
}

/// Characters that never reach output: control characters (the caller keeps
/// line breaks where it wants them) and the bidirectional overrides and
/// isolates that can make a terminal show text other than what it is.
fn is_hidden(c: char) -> bool {
    c.is_control() || matches!(c, '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// One line: every run of whitespace becomes one space, hidden characters go, ends trimmed.
pub(crate) fn clean_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for word in s.split(|c: char| c.is_whitespace() || c.is_control()) {
        let word: String = word.chars().filter(|c| !is_hidden(*c)).collect();
        if !word.is_empty() {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&word);
        }
    }
    out
}

/// Lines: `\r\n` and `\r` become `\n`, tabs four spaces, hidden characters go,
/// each line loses its trailing whitespace, blank lines at either end go.
pub(crate) fn clean_text(s: &str) -> String {
    let s = s.replace("\r\n", "\n").replace('\r', "\n");
    let lines: Vec<String> = s
        .split('\n')
        .map(|line| {
            let line: String = line.replace('\t', "    ").chars().filter(|c| !is_hidden(*c)).collect();
            line.trim_end().to_owned()
        })
        .collect();
    let first = lines.iter().position(|l| !l.is_empty());
    let last = lines.iter().rposition(|l| !l.is_empty());
    match (first, last) {
        (Some(first), Some(last)) => lines[first..=last].join("\n"),
        _ => String::new(),
    }
}

/// A project-relative path with `/` separators and no `.`, `..` or empty segments.
fn clean_path(raw: &str) -> Result<String, Problem> {
    let s = raw.trim();
    if s.is_empty() {
        return Err(Problem::Empty);
    }
    if s.chars().any(is_hidden) {
        return Err(Problem::BadPath { reason: "has control characters" });
    }
    let s = s.replace('\\', "/");
    let bytes = s.as_bytes();
    let drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
    if s.starts_with('/') || s.starts_with("~/") || s == "~" || drive || s.contains("://") {
        return Err(Problem::BadPath { reason: "must be relative to the project root" });
    }
    let mut segments = Vec::new();
    for seg in s.split('/') {
        match seg {
            "" | "." => {}
            ".." => return Err(Problem::BadPath { reason: "must not leave the project (`..`)" }),
            seg => segments.push(seg),
        }
    }
    if segments.is_empty() {
        return Err(Problem::BadPath { reason: "names no file" });
    }
    Ok(segments.join("/"))
}

fn wrong_type(expected: &'static str, found: &Value) -> Problem {
    Problem::WrongType { expected, found: noesis_json::type_name(found) }
}

fn string_field<'v>(
    obj: &'v Map<String, Value>,
    at: Option<usize>,
    name: &str,
    errors: &mut Vec<ReviewError>,
) -> Option<&'v str> {
    match obj.get(name) {
        None => {
            errors.push(ReviewError::new(at, name, Problem::Missing));
            None
        }
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            errors.push(ReviewError::new(at, name, wrong_type("a string", other)));
            None
        }
    }
}

fn line_field(obj: &Map<String, Value>, at: Option<usize>, name: &str, errors: &mut Vec<ReviewError>) -> Option<u32> {
    let Some(v) = obj.get(name) else {
        errors.push(ReviewError::new(at, name, Problem::Missing));
        return None;
    };
    let Value::Number(n) = v else {
        errors.push(ReviewError::new(at, name, wrong_type("an integer", v)));
        return None;
    };
    let line = if let Some(u) = n.as_u64() {
        Some(u)
    } else if n.is_i64() {
        // Negative: an integer, but no line.
        None
    } else {
        let f = n.as_f64().unwrap_or(f64::NAN);
        if f.fract() != 0.0 || !f.is_finite() {
            errors.push(ReviewError::new(at, name, wrong_type("an integer", v)));
            return None;
        }
        // A whole number in range converts exactly; anything else is out of range.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        (f >= 1.0 && f <= f64::from(u32::MAX)).then_some(f as u64)
    };
    let line = line.and_then(|l| u32::try_from(l).ok()).filter(|l| *l >= 1);
    if line.is_none() {
        errors.push(ReviewError::new(at, name, Problem::LineOutOfRange));
    }
    line
}

/// A model's reply, validated: the findings that passed and the summary.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Reply {
    /// The findings that validated, in the reply's order.
    pub findings: Vec<Finding>,
    /// The reply's summary, cleaned like a message (empty if absent).
    pub summary: String,
}

/// Validates a model's reply `{ "findings": [...], "summary": "..." }`.
///
/// Returns what could be used and every problem found, rather than stopping
/// at the first: a finding with any problem is left out of
/// [`Reply::findings`] and its problems (each naming the finding's index and
/// the field) are in the list. An empty list means the reply matched
/// [`findings_schema`] and every finding validated; the caller decides
/// whether to use a partial reply or ask the model again with the errors.
#[must_use]
pub fn parse_reply(value: &Value) -> (Reply, Vec<ReviewError>) {
    let mut reply = Reply::default();
    let mut errors = Vec::new();
    let Some(obj) = value.as_object() else {
        errors.push(ReviewError::new(None, "", wrong_type("an object", value)));
        return (reply, errors);
    };
    for key in obj.keys().filter(|k| !matches!(k.as_str(), "findings" | "summary")) {
        errors.push(ReviewError::new(None, key, Problem::Unknown));
    }
    match obj.get("findings") {
        None => errors.push(ReviewError::new(None, "findings", Problem::Missing)),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                match Finding::from_model(i, item) {
                    Ok(f) => reply.findings.push(f),
                    Err(e) => errors.extend(e),
                }
            }
        }
        Some(other) => errors.push(ReviewError::new(None, "findings", wrong_type("an array", other))),
    }
    match obj.get("summary") {
        None => errors.push(ReviewError::new(None, "summary", Problem::Missing)),
        Some(Value::String(s)) => reply.summary = clean_text(s),
        Some(other) => errors.push(ReviewError::new(None, "summary", wrong_type("a string", other))),
    }
    (reply, errors)
}

/// The JSON Schema (draft-07) of the reply a review model must give:
/// `{ "findings": [ {severity, category, file, start_line, end_line, title,
/// message, resolves_when} ], "summary": "…" }`, every property required,
/// `additionalProperties: false` throughout. The descriptions are written
/// for the model; the title's asks it to leave out what changes between
/// sightings, which is what makes [fingerprints](crate::fingerprint()) match.
#[must_use]
pub fn findings_schema() -> Value {
    let text = |description: &str| json!({"type": "string", "minLength": 1, "description": description});
    let line = |description: &str| json!({"type": "integer", "minimum": 1, "description": description});
    json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Code review",
        "type": "object",
        "additionalProperties": false,
        "required": ["findings", "summary"],
        "properties": {
            "findings": {
                "type": "array",
                "description": "One entry per distinct problem in the change; empty when there is nothing to report.",
                "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": FIELDS,
                    "properties": {
                        "severity": {
                            "type": "string",
                            "enum": SEVERITY_NAMES,
                            "description": "error: wrong or unsafe, must be fixed; warning: likely a problem, should be fixed; note: worth a look; info: context, nothing to fix."
                        },
                        "category": text(
                            "One lowercase word or kebab-case phrase; use correctness, security, performance, maintainability, style, testing or docs when one fits."
                        ),
                        "file": text("The file's path relative to the project root, with / separators."),
                        "start_line": line("The first line (1-based) the finding is about."),
                        "end_line": line("The last line (1-based), at least start_line; equal to it for one line."),
                        "title": text(
                            "One line naming the kind of problem in general terms, without line numbers, quoted values or names that only apply here, so the same mistake elsewhere gets the same title."
                        ),
                        "message": text("What is wrong here and why it matters."),
                        "resolves_when": text(
                            "The checkable condition under which this finding is resolved, e.g. 'the error is returned to the caller instead of unwrapped'."
                        ),
                    }
                }
            },
            "summary": {"type": "string", "description": "A short overall assessment of the change."}
        }
    })
}
