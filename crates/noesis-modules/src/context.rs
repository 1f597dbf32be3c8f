//! The context protocol, the pure part: what a module declares under
//! `context`, what of the input's `_context` may reach its prompt, secret
//! redaction, the emitted context a reply carries, and key patterns.
//!
//! There is no implicit context: only the types a module lists in
//! `context.accepts` reach its prompt, each checked and filtered (`max_turns`,
//! `fields`, `from_module`) and with secrets redacted, in a section of its
//! own. `_context` never reaches the input-schema check, so closed input
//! schemas still validate.
//!
//! Codes: a malformed standard type is an input error with the JSON pointer
//! of the fault, by the same rule as [`check_input`](crate::check_input)
//! (a missing part E1002, a wrong type E1003, anything else E1001). A type
//! the module requires that is absent (after filtering) is E2007
//! INSUFFICIENT_CONTEXT rather than E1002: it names the remedy (supply more
//! context), the code the spec keeps for exactly this, so a caller or a
//! composition can tell "feed me context" from "your input is malformed".
//!
//! Emitted context is read from the reply's `meta._emitted_context` (meta is
//! the one part of the official envelope open to extra keys; `data` may be
//! closed by the module's schema) or, tolerated, from the reply's top level.
//! It is taken out before the envelope is checked, so the envelope returned
//! never carries it and always validates against the official schema.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::code::ErrorCode;
use crate::envelope::Failure;
use crate::manifest::{ContextMode, Manifest};
use crate::parse::{Found, extract_json};
use crate::prompt::ENVELOPE_INSTRUCTION;

/// The key of the caller's context in a module's input.
pub const CONTEXT_KEY: &str = "_context";

/// The key of the context a reply emits.
pub const EMITTED_KEY: &str = "_emitted_context";

/// What replaces a secret.
pub const REDACTED: &str = "[REDACTED]";

/// How long an emitted entry lives when the module gives no `ttl`: an hour,
/// so nothing is kept forever unless the module asks for it with `-1`.
pub const DEFAULT_EMIT_TTL_SECS: i64 = 3600;

/// The key pattern of an emitted entry that names none.
pub const DEFAULT_KEY_PATTERN: &str = "${module}:${type}";

/// `context.accepts[]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Accept {
    /// The context type (`conversation_history`, `user_profile`, …).
    #[serde(rename = "type")]
    pub kind: String,
    /// The run is refused (E2007) without it.
    #[serde(default)]
    pub required: bool,
    /// For `conversation_history`: keep the last N turns.
    #[serde(default)]
    pub max_turns: Option<usize>,
    /// For object types (`user_profile`, …): keep only these fields.
    #[serde(default)]
    pub fields: Option<Vec<String>>,
    /// For `previous_result`: only results of this module.
    #[serde(default)]
    pub from_module: Option<String>,
    /// The oldest stored entry (seconds) this module may be served; `-1` or
    /// absent: any unexpired one.
    #[serde(default)]
    pub ttl: Option<i64>,
}

/// `context.emits[]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Emit {
    /// The context type.
    #[serde(rename = "type")]
    pub kind: String,
    /// Seconds the entry lives; `-1` persistent; [`DEFAULT_EMIT_TTL_SECS`]
    /// when absent.
    #[serde(default)]
    pub ttl: Option<i64>,
    /// Where it is stored ([`expand_key`]); [`DEFAULT_KEY_PATTERN`] when
    /// absent.
    #[serde(default)]
    pub key_pattern: Option<String>,
}

impl Emit {
    /// The TTL in force, in seconds (`-1` = persistent).
    pub fn ttl_secs(&self) -> i64 {
        self.ttl.unwrap_or(DEFAULT_EMIT_TTL_SECS)
    }

    /// The key pattern in force.
    pub fn pattern(&self) -> &str {
        self.key_pattern.as_deref().unwrap_or(DEFAULT_KEY_PATTERN)
    }
}

/// A module's `context` declaration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContextSpec {
    /// `fork` or `main`.
    pub mode: ContextMode,
    /// The types the module accepts.
    pub accepts: Vec<Accept>,
    /// The types the module emits.
    pub emits: Vec<Emit>,
}

impl ContextSpec {
    /// Reads `manifest.context` (`fork|main` or `{mode, accepts, emits}`).
    /// Loading has already validated the manifest against the official
    /// schema; an entry that still does not read is skipped rather than
    /// failing a run.
    pub fn of(manifest: &Manifest) -> ContextSpec {
        let mut spec = ContextSpec { mode: manifest.context_mode(), ..ContextSpec::default() };
        let Some(Value::Object(ctx)) = &manifest.context else { return spec };
        let items = |k: &str| ctx.get(k).and_then(Value::as_array).cloned().unwrap_or_default();
        spec.accepts = items("accepts").into_iter().filter_map(|v| serde_json::from_value(v).ok()).collect();
        spec.emits = items("emits").into_iter().filter_map(|v| serde_json::from_value(v).ok()).collect();
        spec
    }

    /// The declaration for an accepted type.
    pub fn accept(&self, kind: &str) -> Option<&Accept> {
        self.accepts.iter().find(|a| a.kind == kind)
    }

    /// The declaration for an emitted type.
    pub fn emit(&self, kind: &str) -> Option<&Emit> {
        self.emits.iter().find(|e| e.kind == kind)
    }
}

fn pointer_of(parts: &[&str]) -> String {
    parts.iter().map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1"))).collect()
}

fn input_error(code: ErrorCode, parts: &[&str], message: &str) -> Box<Failure> {
    let pointer = pointer_of(parts);
    Box::new(
        Failure::new(code, format!("input {pointer}: {message}"))
            .details(json!({ "pointer": pointer }))
            .suggest("fix the context the caller sends under `_context`"),
    )
}

/// Takes `_context` out of the input: the caller's context, by type. An
/// absent `_context` is an empty one; anything but an object is E1003.
///
/// # Errors
/// E1003 (pointer `/_context`) when `_context` is not an object.
pub fn take_context(input: &mut Value) -> Result<Map<String, Value>, Box<Failure>> {
    let Some(obj) = input.as_object_mut() else { return Ok(Map::new()) };
    match obj.shift_remove(CONTEXT_KEY) {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m),
        Some(_) => Err(input_error(
            ErrorCode::E1003,
            &[CONTEXT_KEY],
            "must be an object keyed by context type (conversation_history, user_profile, …)",
        )),
    }
}

/// The accepted types the caller did not send: what a context store may
/// serve.
pub fn missing<'a>(spec: &'a ContextSpec, context: &Map<String, Value>) -> Vec<&'a Accept> {
    spec.accepts.iter().filter(|a| !context.contains_key(&a.kind)).collect()
}

/// What of the caller's context reaches the prompt.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Prepared {
    /// The accepted types, filtered and redacted, in the caller's order.
    pub context: Map<String, Value>,
    /// Types the caller sent that the module does not accept (dropped).
    pub dropped: Vec<String>,
    /// How many secrets were redacted.
    pub redacted: usize,
}

/// Checks the accepted types, applies `required`, `max_turns`, `fields` and
/// `from_module`, drops every type the module does not accept, and redacts
/// secrets.
///
/// # Errors
/// E1001/E1002/E1003 with the pointer of a malformed standard type; E2007
/// naming a required type that is absent.
pub fn prepare(spec: &ContextSpec, context: Map<String, Value>) -> Result<Prepared, Box<Failure>> {
    let mut out = Prepared::default();
    for (kind, mut value) in context {
        let Some(accept) = spec.accept(&kind) else {
            out.dropped.push(kind);
            continue;
        };
        check_type(&kind, &value)?;
        if !filter(accept, &mut value) {
            continue;
        }
        out.redacted += redact(&mut value);
        out.context.insert(kind, value);
    }
    if let Some(a) = spec.accepts.iter().find(|a| a.required && !out.context.contains_key(&a.kind)) {
        let pointer = pointer_of(&[CONTEXT_KEY, &a.kind]);
        let from = a.from_module.as_ref().map(|m| format!(" from module {m}")).unwrap_or_default();
        return Err(Box::new(
            Failure::new(
                ErrorCode::E2007,
                format!("input {pointer}: this module requires context `{}`{from}, and none was given", a.kind),
            )
            .details(json!({ "pointer": pointer, "context_type": a.kind }))
            .suggest(format!("send `{}` under `_context` in the input", a.kind)),
        ));
    }
    Ok(out)
}

/// Checks a value of a standard type against its shape (other types are
/// free-form).
///
/// # Errors
/// E1002/E1003 with the pointer under `/_context/<type>`.
pub fn check_type(kind: &str, value: &Value) -> Result<(), Box<Failure>> {
    let object = |v: &Value, at: &[&str]| -> Result<(), Box<Failure>> {
        if v.is_object() { Ok(()) } else { Err(input_error(ErrorCode::E1003, at, "must be an object")) }
    };
    match kind {
        "conversation_history" => {
            let Some(turns) = value.as_array() else {
                return Err(input_error(
                    ErrorCode::E1003,
                    &[CONTEXT_KEY, kind],
                    "must be an array of turns {role, content, timestamp}",
                ));
            };
            for (i, turn) in turns.iter().enumerate() {
                let idx = i.to_string();
                let at = [CONTEXT_KEY, kind, idx.as_str()];
                object(turn, &at)?;
                for field in ["role", "content"] {
                    match turn.get(field) {
                        None => {
                            return Err(input_error(
                                ErrorCode::E1002,
                                &[CONTEXT_KEY, kind, &idx, field],
                                "is required in a turn",
                            ));
                        }
                        Some(Value::String(_)) => {}
                        Some(_) => {
                            return Err(input_error(
                                ErrorCode::E1003,
                                &[CONTEXT_KEY, kind, &idx, field],
                                "must be a string",
                            ));
                        }
                    }
                }
                if let Some(t) = turn.get("timestamp")
                    && !(t.is_string() || t.is_number() || t.is_null())
                {
                    return Err(input_error(
                        ErrorCode::E1003,
                        &[CONTEXT_KEY, kind, &idx, "timestamp"],
                        "must be a string or a number",
                    ));
                }
            }
            Ok(())
        }
        "user_profile" | "session_state" | "analysis_cache" | "environment" => object(value, &[CONTEXT_KEY, kind]),
        "previous_result" => match value {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    previous_result(item, &[CONTEXT_KEY, kind, &i.to_string()])?;
                }
                Ok(())
            }
            one => previous_result(one, &[CONTEXT_KEY, kind]),
        },
        _ => Ok(()),
    }
}

fn previous_result(v: &Value, at: &[&str]) -> Result<(), Box<Failure>> {
    let Some(obj) = v.as_object() else {
        return Err(input_error(ErrorCode::E1003, at, "must be an object {module, meta, data}"));
    };
    let sub = |k: &'static str| -> Vec<&str> { at.iter().copied().chain([k]).collect() };
    match obj.get("module") {
        None => return Err(input_error(ErrorCode::E1002, &sub("module"), "is required in a previous result")),
        Some(Value::String(_)) => {}
        Some(_) => return Err(input_error(ErrorCode::E1003, &sub("module"), "must be a string")),
    }
    for k in ["meta", "data"] {
        if let Some(x) = obj.get(k)
            && !x.is_object()
        {
            return Err(input_error(ErrorCode::E1003, &sub(k), "must be an object"));
        }
    }
    Ok(())
}

/// Applies the accept's filters; `false` when nothing is left.
fn filter(accept: &Accept, value: &mut Value) -> bool {
    if let (Some(n), Value::Array(turns)) = (accept.max_turns, &mut *value)
        && accept.kind == "conversation_history"
        && turns.len() > n
    {
        turns.drain(..turns.len() - n);
    }
    if let (Some(fields), Value::Object(obj)) = (&accept.fields, &mut *value) {
        obj.retain(|k, _| fields.iter().any(|f| f == k));
    }
    if let Some(from) = &accept.from_module
        && accept.kind == "previous_result"
    {
        let of = |v: &Value| v.get("module").and_then(Value::as_str) == Some(from.as_str());
        match value {
            Value::Array(items) => {
                items.retain(of);
                return !items.is_empty();
            }
            one => return of(one),
        }
    }
    true
}

/// Splits a key into lower-case words: on `_`, `-`, `.`, spaces and camelCase
/// boundaries (`apiKey` → `api`, `key`; `HTTPToken` → `http`, `token`).
fn words(key: &str) -> Vec<String> {
    let chars: Vec<char> = key.chars().collect();
    let mut out = Vec::new();
    let mut cur = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        }
        let prev = i.checked_sub(1).map(|j| chars[j]);
        let next = chars.get(i + 1);
        let boundary = c.is_uppercase()
            && prev.is_some_and(|p| {
                p.is_lowercase() || p.is_ascii_digit() || (p.is_uppercase() && next.is_some_and(|n| n.is_lowercase()))
            });
        if boundary && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Words that make a key secret wherever they stand.
const SECRET_WORDS: &[&str] = &[
    "password",
    "passwd",
    "pwd",
    "passphrase",
    "secret",
    "secrets",
    "credential",
    "credentials",
    "apikey",
    "privatekey",
    "authorization",
    "bearer",
];

/// Words that make a key secret as its head noun (the last word):
/// `access_token`, `api_key`, `basic_auth`, but not `token_count`,
/// `key_pattern` or `max_tokens`.
const SECRET_HEADS: &[&str] = &["token", "key", "auth", "cookie"];

/// Qualifiers that make a `…_key` ordinary data.
const PLAIN_KEYS: &[&str] =
    &["sort", "primary", "foreign", "partition", "cache", "public", "lookup", "group", "row", "hash", "idempotency"];

/// Whether a field of this name holds a secret.
pub fn is_secret_key(key: &str) -> bool {
    let w = words(key);
    if w.iter().any(|x| SECRET_WORDS.contains(&x.as_str())) {
        return true;
    }
    match w.as_slice() {
        [.., q, last] if last == "key" && PLAIN_KEYS.contains(&q.as_str()) => false,
        [.., last] => SECRET_HEADS.contains(&last.as_str()),
        [] => false,
    }
}

fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-_.+/~".contains(c)
}

/// Whether a whitespace-free run of text looks like a credential.
fn secret_shaped(run: &str) -> bool {
    let after = |prefix: &str, min: usize| {
        run.strip_prefix(prefix).is_some_and(|rest| {
            rest.len() >= min
                && rest.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
                && rest.chars().any(|c| c.is_ascii_digit())
        })
    };
    let aws = run.len() == 20
        && run.starts_with("AKIA")
        && run[4..].chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    let jwt = run.starts_with("eyJ") && run.split('.').count() == 3 && run.len() >= 30;
    ["sk-", "ghp_", "gho_", "ghs_", "github_pat_", "xoxb-", "xoxp-"].iter().any(|p| after(p, 20))
        || after("AIza", 30)
        || aws
        || jwt
}

/// Redacts credentials inside free text: the word after `Bearer`/`Basic`,
/// the value after a secret's name and `=` or `:` (`password: hunter2`,
/// `API_KEY=…`), API-key shapes (`sk-…`, `ghp_…`, `AKIA…`, JWTs) and the
/// password of a URL. Returns the text and how many secrets it held.
pub fn redact_text(text: &str) -> (String, usize) {
    let (quoted, q) = redact_quoted_values(text);
    let (out, n) = redact_runs(&quoted);
    (out, n + q)
}

/// `"password": "correct horse battery"`: a quoted value after a secret's
/// name is redacted whole, up to its closing quote, so no word of a
/// passphrase survives. An unclosed quote is left to the word-by-word pass.
fn redact_quoted_values(text: &str) -> (String, usize) {
    let mut out = String::with_capacity(text.len());
    let mut n = 0;
    let mut last = 0;
    let mut i = 0;
    while let Some(off) = text[i..].find(token_char) {
        let start = i + off;
        let end = text[start..].find(|c: char| !token_char(c)).map_or(text.len(), |e| start + e);
        i = end;
        if !is_secret_key(&text[start..end]) {
            continue;
        }
        // Closing quote of the name, the separator, spaces, then the value's quote.
        let rest = &text[end..];
        let after_name = rest.trim_start_matches(['"', '\'']).trim_start();
        let Some(after_sep) = after_name.strip_prefix([':', '=']) else { continue };
        let value = after_sep.trim_start();
        let Some(q) = value.chars().next().filter(|c| *c == '"' || *c == '\'') else { continue };
        let open = text.len() - value.len() + 1;
        let Some(len) = text[open..].find(q) else { continue };
        if len == 0 || text[open..open + len] == *REDACTED {
            continue;
        }
        out.push_str(&text[last..open]);
        out.push_str(REDACTED);
        n += 1;
        last = open + len;
        i = last;
    }
    out.push_str(&text[last..]);
    (out, n)
}

fn redact_runs(text: &str) -> (String, usize) {
    let mut runs = Vec::new();
    let mut i = 0;
    while let Some(off) = text[i..].find(token_char) {
        let start = i + off;
        let end = text[start..].find(|c: char| !token_char(c)).map_or(text.len(), |e| start + e);
        runs.push((start, end));
        i = end;
    }
    let mut out = String::with_capacity(text.len());
    let mut n = 0;
    let mut last = 0;
    // The next run is a secret (with the shortest length that counts).
    let mut pending: Option<usize> = None;
    for (k, &(start, end)) in runs.iter().enumerate() {
        out.push_str(&text[last..start]);
        let run = &text[start..end];
        let scheme = run.eq_ignore_ascii_case("bearer") || run.eq_ignore_ascii_case("basic");
        let gap = &text[end..runs.get(k + 1).map_or(text.len(), |r| r.0)];
        // `[REDACTED]` is already clean: redacting is idempotent.
        let done = run == "REDACTED";
        if !done && ((!scheme && pending.is_some_and(|min| run.len() >= min)) || secret_shaped(run)) {
            out.push_str(REDACTED);
            n += 1;
        } else {
            out.push_str(run);
        }
        pending = if scheme && gap == " " {
            Some(8)
        } else if is_secret_key(run) && matches!(gap.trim_matches([' ', '"', '\'']), "=" | ":") {
            // Quotes around the name or the value (`"password": "…"` in
            // pasted JSON, `token = '…'`) still make it a name and its value.
            Some(1)
        } else if scheme {
            pending
        } else {
            None
        };
        last = end;
    }
    out.push_str(&text[last..]);
    let (out, m) = redact_url_passwords(&out);
    (out, n + m)
}

/// `scheme://user:password@host` → `scheme://user:[REDACTED]@host`.
fn redact_url_passwords(text: &str) -> (String, usize) {
    let mut out = String::with_capacity(text.len());
    let mut n = 0;
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        out.push_str(&rest[..i + 3]);
        let tail = &rest[i + 3..];
        let auth_end = tail.find(|c: char| c.is_whitespace() || c == '/').unwrap_or(tail.len());
        let authority = &tail[..auth_end];
        match authority.rfind('@').and_then(|at| authority[..at].find(':').map(|colon| (colon, at))) {
            Some((colon, at)) if at > colon + 1 && authority[colon + 1..at] != *REDACTED => {
                out.push_str(&authority[..=colon]);
                out.push_str(REDACTED);
                out.push_str(&authority[at..]);
                n += 1;
            }
            _ => out.push_str(authority),
        }
        rest = &tail[auth_end..];
    }
    out.push_str(rest);
    (out, n)
}

/// Redacts secrets at any depth: the value of every field whose name is a
/// secret's ([`is_secret_key`]), and credential-shaped text anywhere
/// ([`redact_text`]). Returns how many were redacted.
pub fn redact(value: &mut Value) -> usize {
    match value {
        Value::Object(obj) => {
            let mut n = 0;
            for (k, v) in obj.iter_mut() {
                if is_secret_key(k) && !v.is_null() && *v != json!(REDACTED) {
                    *v = json!(REDACTED);
                    n += 1;
                } else {
                    n += redact(v);
                }
            }
            n
        }
        Value::Array(items) => items.iter_mut().map(redact).sum(),
        Value::String(s) => {
            let (clean, n) = redact_text(s);
            if n > 0 {
                *s = clean;
            }
            n
        }
        _ => 0,
    }
}

/// The prompt section for the accepted context (empty when there is none)
/// and, for a module that emits context, how to emit it.
pub fn context_section(context: &Map<String, Value>, spec: &ContextSpec) -> String {
    let mut out = String::new();
    if !context.is_empty() {
        out.push_str("\n\n## Context\n\nContext the caller supplied (secrets redacted):\n\n```json\n");
        out.push_str(&serde_json::to_string_pretty(context).unwrap_or_default());
        out.push_str("\n```\n");
    }
    if !spec.emits.is_empty() {
        let kinds: Vec<String> = spec.emits.iter().map(|e| format!("\"{}\"", e.kind)).collect();
        out.push_str("\n\n## Emitting context\n\nTo hand context to later runs, add to `meta` a key \"");
        out.push_str(EMITTED_KEY);
        out.push_str("\": an object keyed by context type, with any of: ");
        out.push_str(&kinds.join(", "));
        out.push_str(". Other types are discarded. Never put secrets in it.\n");
    }
    out
}

/// Places a section before the prompt's closing envelope instruction (or at
/// the end when the prompt has none).
pub fn insert_section(prompt: &str, section: &str) -> String {
    if section.is_empty() {
        return prompt.to_owned();
    }
    match prompt.rfind(ENVELOPE_INSTRUCTION) {
        Some(at) => format!("{}{section}{}", &prompt[..at], &prompt[at..]),
        None => format!("{prompt}{section}"),
    }
}

/// Takes `_emitted_context` out of a model's reply (from `meta`, or
/// tolerated at the top level, `meta` winning per type). Returns the reply
/// to check — re-serialised only when something was taken — where the JSON
/// was found in the original, and what was emitted.
pub fn take_emitted(reply: &str) -> (String, Option<Found>, Option<Value>) {
    let Some((mut env, found)) = extract_json(reply) else { return (reply.to_owned(), None, None) };
    let Some(obj) = env.as_object_mut() else { return (reply.to_owned(), None, None) };
    let top = obj.shift_remove(EMITTED_KEY);
    let in_meta = obj.get_mut("meta").and_then(Value::as_object_mut).and_then(|m| m.shift_remove(EMITTED_KEY));
    let emitted = match (top, in_meta) {
        (None, None) => return (reply.to_owned(), None, None),
        (Some(Value::Object(mut t)), Some(Value::Object(m))) => {
            t.extend(m);
            Some(Value::Object(t))
        }
        (_, Some(m)) => Some(m),
        (t, None) => t,
    };
    (env.to_string(), Some(found), emitted)
}

/// Keeps the emitted entries of types the module declares in `emits`
/// (anything else, or an `_emitted_context` that is not an object, is
/// discarded), with secrets redacted.
pub fn keep_emitted(spec: &ContextSpec, emitted: Option<Value>) -> Map<String, Value> {
    let Some(Value::Object(all)) = emitted else { return Map::new() };
    let mut kept: Map<String, Value> =
        all.into_iter().filter(|(k, v)| spec.emit(k).is_some() && !v.is_null()).collect();
    for v in kept.values_mut() {
        redact(v);
    }
    kept
}

/// The variables of a key pattern.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyVars<'a> {
    /// `${module}`.
    pub module: &'a str,
    /// `${input_hash}`.
    pub input_hash: &'a str,
    /// `${user_id}`; `anonymous` when unknown.
    pub user_id: Option<&'a str>,
    /// `${session_id}`; `none` when unknown.
    pub session_id: Option<&'a str>,
    /// `${type}` (a noesis extension: the emitted type).
    pub kind: &'a str,
}

/// Expands `${module}`, `${input_hash}`, `${user_id}`, `${session_id}` and
/// `${type}`; other text, unknown variables included, is kept as written.
pub fn expand_key(pattern: &str, vars: &KeyVars<'_>) -> String {
    pattern
        .replace("${module}", vars.module)
        .replace("${input_hash}", vars.input_hash)
        .replace("${user_id}", vars.user_id.unwrap_or("anonymous"))
        .replace("${session_id}", vars.session_id.unwrap_or("none"))
        .replace("${type}", vars.kind)
}

/// Whether entries stored under this pattern belong to one user / one
/// session (and are served only to it).
pub fn scoped_by(pattern: &str) -> (bool, bool) {
    (pattern.contains("${user_id}"), pattern.contains("${session_id}"))
}

/// The user and session a context names: `user_profile.user_id` (or
/// `.id`) and `session_state.session_id` (or `.id`), when they are strings.
pub fn identity(context: &Map<String, Value>) -> (Option<String>, Option<String>) {
    let pick = |kind: &str, key: &str| {
        let v = context.get(kind)?;
        v.get(key).or_else(|| v.get("id")).and_then(Value::as_str).map(str::to_owned)
    };
    (pick("user_profile", "user_id"), pick("session_state", "session_id"))
}

/// RFC 8785 canonical JSON (`serde_jcs`; object keys sorted at every depth,
/// no whitespace), so equal inputs hash alike. The same text the cassette
/// keys of `noesis-llm` and frame digests of `noesis-frames` are made of.
pub fn canonical_json(value: &Value) -> String {
    // A `Value` always serialises; the fallback only keeps this total.
    serde_jcs::to_string(value).unwrap_or_else(|_| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: Value) -> ContextSpec {
        let m: Manifest = serde_json::from_value(json!({"name": "m", "context": v})).unwrap();
        ContextSpec::of(&m)
    }

    fn ctx(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    fn code_and_pointer(e: &Failure) -> (&'static str, String) {
        (e.code.as_str(), e.details.as_ref().unwrap()["pointer"].as_str().unwrap().to_owned())
    }

    #[test]
    fn spec_reads_both_spellings() {
        assert_eq!(spec(json!("fork")).mode, ContextMode::Fork);
        let s = spec(
            json!({"mode": "fork", "accepts": [{"type": "user_profile", "required": true, "fields": ["name"]}, {"bad": 1}],
            "emits": [{"type": "session_state", "ttl": -1, "key_pattern": "s:${session_id}"}]}),
        );
        assert_eq!(s.mode, ContextMode::Fork);
        assert_eq!(s.accepts.len(), 1, "the unreadable entry is skipped");
        assert!(s.accept("user_profile").unwrap().required);
        assert_eq!(s.emit("session_state").unwrap().ttl_secs(), -1);
        assert_eq!(spec(json!({"emits": [{"type": "x"}]})).emits[0].ttl_secs(), DEFAULT_EMIT_TTL_SECS);
        assert_eq!(spec(json!({"emits": [{"type": "x"}]})).emits[0].pattern(), DEFAULT_KEY_PATTERN);
    }

    #[test]
    fn take_context_removes_it_from_the_input() {
        let mut input = json!({"code": "x", "_context": {"user_profile": {"name": "a"}}});
        let c = take_context(&mut input).unwrap();
        assert_eq!(input, json!({"code": "x"}));
        assert_eq!(c["user_profile"]["name"], "a");
        let mut none = json!({"code": "x"});
        assert!(take_context(&mut none).unwrap().is_empty());
        let e = take_context(&mut json!({"_context": [1]})).unwrap_err();
        assert_eq!(code_and_pointer(&e), ("E1003", "/_context".into()));
    }

    #[test]
    fn only_accepted_types_reach_the_prompt() {
        let s = spec(json!({"accepts": [{"type": "user_profile"}]}));
        let p =
            prepare(&s, ctx(json!({"user_profile": {"name": "a"}, "session_state": {"x": 1}, "custom": 3}))).unwrap();
        assert_eq!(p.context.keys().collect::<Vec<_>>(), ["user_profile"]);
        assert_eq!(p.dropped, ["session_state", "custom"]);
        // No declaration at all: nothing gets through.
        let p = prepare(&ContextSpec::default(), ctx(json!({"user_profile": {"name": "a"}}))).unwrap();
        assert!(p.context.is_empty());
    }

    #[test]
    fn required_missing_is_e2007_with_the_pointer() {
        let s = spec(json!({"accepts": [{"type": "conversation_history", "required": true}]}));
        let e = prepare(&s, Map::new()).unwrap_err();
        assert_eq!(code_and_pointer(&e), ("E2007", "/_context/conversation_history".into()));
        assert!(e.message.contains("requires context `conversation_history`"), "{}", e.message);
        // A previous result from another module does not count.
        let s = spec(json!({"accepts": [{"type": "previous_result", "required": true, "from_module": "a"}]}));
        let e = prepare(&s, ctx(json!({"previous_result": {"module": "b", "data": {}}}))).unwrap_err();
        assert_eq!(e.code, ErrorCode::E2007);
        assert!(e.message.contains("from module a"));
    }

    #[test]
    fn malformed_standard_types_name_the_pointer() {
        let s = spec(
            json!({"accepts": [{"type": "conversation_history"}, {"type": "user_profile"}, {"type": "previous_result"}, {"type": "free"}]}),
        );
        let cases = [
            (json!({"conversation_history": "hi"}), ("E1003", "/_context/conversation_history")),
            (
                json!({"conversation_history": [{"role": "user"}]}),
                ("E1002", "/_context/conversation_history/0/content"),
            ),
            (
                json!({"conversation_history": [{"role": "user", "content": "a"}, {"role": 1, "content": "b"}]}),
                ("E1003", "/_context/conversation_history/1/role"),
            ),
            (
                json!({"conversation_history": [{"role": "user", "content": "a", "timestamp": []}]}),
                ("E1003", "/_context/conversation_history/0/timestamp"),
            ),
            (json!({"user_profile": "ann"}), ("E1003", "/_context/user_profile")),
            (json!({"previous_result": {"data": {}}}), ("E1002", "/_context/previous_result/module")),
            (json!({"previous_result": {"module": "m", "data": 3}}), ("E1003", "/_context/previous_result/data")),
            (json!({"previous_result": [{"module": "m"}, 2]}), ("E1003", "/_context/previous_result/1")),
        ];
        for (c, (code, pointer)) in cases {
            let e = prepare(&s, ctx(c.clone())).unwrap_err();
            assert_eq!(code_and_pointer(&e), (code, pointer.to_owned()), "{c}");
        }
        assert!(prepare(&s, ctx(json!({"free": 3, "conversation_history": []}))).is_ok());
        // A malformed type the module does not accept is dropped, not judged.
        assert!(prepare(&ContextSpec::default(), ctx(json!({"user_profile": 3}))).is_ok());
    }

    #[test]
    fn filters_apply() {
        let s = spec(json!({"accepts": [
            {"type": "conversation_history", "max_turns": 2},
            {"type": "user_profile", "fields": ["name", "lang"]},
            {"type": "previous_result", "from_module": "a"}
        ]}));
        let turns: Vec<Value> = (0..5).map(|i| json!({"role": "user", "content": format!("t{i}")})).collect();
        let p = prepare(
            &s,
            ctx(json!({
                "conversation_history": turns,
                "user_profile": {"name": "ann", "lang": "en", "email": "a@x"},
                "previous_result": [{"module": "a", "data": {"v": 1}}, {"module": "b", "data": {"v": 2}}]
            })),
        )
        .unwrap();
        let contents: Vec<&str> = p.context["conversation_history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["content"].as_str().unwrap())
            .collect();
        assert_eq!(contents, ["t3", "t4"]);
        assert_eq!(p.context["user_profile"], json!({"name": "ann", "lang": "en"}));
        assert_eq!(p.context["previous_result"], json!([{"module": "a", "data": {"v": 1}}]));
        let p = prepare(&s, ctx(json!({"previous_result": {"module": "b", "data": {}}}))).unwrap();
        assert!(!p.context.contains_key("previous_result"));
    }

    #[test]
    fn secret_keys() {
        for k in [
            "password",
            "db_password",
            "passwd",
            "userPassword",
            "api_key",
            "apiKey",
            "apikey",
            "API_KEY",
            "access_token",
            "accessToken",
            "refresh-token",
            "token",
            "client_secret",
            "secretValue",
            "credentials",
            "aws_credential",
            "private_key",
            "key",
            "Authorization",
            "basic_auth",
            "session_cookie",
            "HTTPToken",
        ] {
            assert!(is_secret_key(k), "{k} should be secret");
        }
        for k in [
            "max_tokens",
            "maxTokens",
            "tokens",
            "token_count",
            "token_limit",
            "keyboard",
            "key_pattern",
            "keys",
            "monkey",
            "primary_key",
            "sort_key",
            "public_key",
            "author",
            "authority",
            "name",
            "tokenizer",
            "passage",
            "secretary_of",
            "turkey",
        ] {
            assert!(!is_secret_key(k), "{k} should not be secret");
        }
        assert_eq!(words("parseHTTPResponse_v2-code"), ["parse", "http", "response", "v2", "code"]);
    }

    #[test]
    fn secrets_are_redacted_at_any_depth() {
        let mut v = json!({
            "name": "ann",
            "max_tokens": 100,
            "keyboard": "dvorak",
            "settings": {"nested": [{"api_key": "abc123", "theme": "dark"}], "password": {"old": "x", "new": "y"}},
            "note": "call with Authorization: Bearer abcdef123456.xyz please",
            "env": "OPENAI_API_KEY=sk-proj-1234567890abcdefghijABCD and ghp_0123456789abcdefghijklmnop",
            "db": "postgres://app:hunter2@db.internal:5432/main",
            "safe": "sk-learn is a library; task-1 done; bearer of news"
        });
        let n = redact(&mut v);
        assert_eq!(v["name"], "ann");
        assert_eq!(v["max_tokens"], 100);
        assert_eq!(v["keyboard"], "dvorak");
        assert_eq!(v["settings"]["nested"][0], json!({"api_key": REDACTED, "theme": "dark"}));
        assert_eq!(v["settings"]["password"], REDACTED);
        assert_eq!(v["note"], "call with Authorization: Bearer [REDACTED] please");
        assert_eq!(v["env"], "OPENAI_API_KEY=[REDACTED] and [REDACTED]");
        assert_eq!(v["db"], "postgres://app:[REDACTED]@db.internal:5432/main");
        assert_eq!(v["safe"], "sk-learn is a library; task-1 done; bearer of news");
        assert_eq!(n, 6);
        let text = v.to_string();
        for secret in ["abc123", "hunter2", "abcdef123456", "sk-proj", "ghp_0123"] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
        // Redacting twice changes nothing more.
        assert_eq!(redact(&mut v), 0);
    }

    #[test]
    fn secret_shapes() {
        assert_eq!(redact_text("AKIAIOSFODNN7EXAMPLE").1, 1);
        assert_eq!(redact_text("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl").1, 1);
        assert_eq!(redact_text("AKIA is a prefix").1, 0);
        assert_eq!(redact_text("see https://example.com/a:b@c").1, 0, "no user info");
        assert_eq!(redact_text("no secrets, just text: 12345678901234567890").1, 0);
        assert_eq!(redact_text("login with password: hunter2 today").0, "login with password: [REDACTED] today");
        assert_eq!(redact_text("export API_KEY=abc; max_tokens=5").0, "export API_KEY=[REDACTED]; max_tokens=5");
        assert_eq!(redact_text("token_count: 5").0, "token_count: 5");
    }

    #[test]
    fn secrets_in_quoted_text_are_redacted() {
        // Pasted JSON or code in a conversation turn: the name is quoted.
        let cases = [
            (r#"{"password": "hunter2"}"#, r#"{"password": "[REDACTED]"}"#),
            (r#"{"api_key":"abc123","n":1}"#, r#"{"api_key":"[REDACTED]","n":1}"#),
            ("password = 'hunter2'", "password = '[REDACTED]'"),
            ("{'token': 'abc'}", "{'token': '[REDACTED]'}"),
        ];
        for (text, want) in cases {
            assert_eq!(redact_text(text), (want.to_owned(), 1), "{text}");
        }
        // A passphrase is redacted whole, not its first word only.
        let phrase = r#"{"password": "correct horse battery", "note": "keep"}"#;
        assert_eq!(redact_text(phrase), (r#"{"password": "[REDACTED]", "note": "keep"}"#.to_owned(), 1));
        let phrase = "secret = 'two words' and more";
        assert_eq!(redact_text(phrase), ("secret = '[REDACTED]' and more".to_owned(), 1));
        let plain = r#"{"max_tokens": 5, "token", "x"}"#;
        assert_eq!(redact_text(plain), (plain.to_owned(), 0));
    }

    #[test]
    fn section_sits_before_the_envelope_instruction() {
        let s = spec(json!({"emits": [{"type": "session_state"}]}));
        let section = context_section(&ctx(json!({"user_profile": {"name": "ann"}})), &s);
        assert!(section.contains("## Context") && section.contains("\"name\": \"ann\""));
        assert!(section.contains("_emitted_context") && section.contains("\"session_state\""));
        let prompt = format!("Do it.{ENVELOPE_INSTRUCTION}");
        let out = insert_section(&prompt, &section);
        assert!(out.starts_with("Do it.\n\n## Context"));
        assert!(out.ends_with(ENVELOPE_INSTRUCTION));
        assert_eq!(insert_section(&prompt, ""), prompt);
        assert!(context_section(&Map::new(), &ContextSpec::default()).is_empty());
    }

    #[test]
    fn emitted_context_is_taken_from_meta_or_top_level() {
        let reply = r#"{"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "e", "_emitted_context": {"session_state": {"step": 2}}}, "data": {"rationale": "r"}}"#;
        let (text, found, emitted) = take_emitted(reply);
        assert_eq!(emitted, Some(json!({"session_state": {"step": 2}})));
        assert!(found.is_some());
        let env: Value = serde_json::from_str(&text).unwrap();
        assert!(env["meta"].get(EMITTED_KEY).is_none());
        assert!(crate::validate_envelope(&env).is_empty());

        let top = r#"Here: ```json
{"ok": true, "meta": {"confidence": 0.9, "risk": "low", "explain": "e"}, "data": {"rationale": "r"}, "_emitted_context": {"a": 1, "b": 2}}
```"#;
        let (text, _, emitted) = take_emitted(top);
        assert_eq!(emitted, Some(json!({"a": 1, "b": 2})));
        assert!(crate::validate_envelope(&serde_json::from_str(&text).unwrap()).is_empty());

        let plain = r#"{"ok": true}"#;
        assert_eq!(take_emitted(plain), (plain.to_owned(), None, None));
        assert_eq!(take_emitted("no json").2, None);
    }

    #[test]
    fn only_declared_emits_are_kept() {
        let s = spec(json!({"emits": [{"type": "session_state"}]}));
        let kept = keep_emitted(
            &s,
            Some(json!({"session_state": {"step": 2, "token": "t0ps3cret"}, "user_profile": {"x": 1}})),
        );
        assert_eq!(Value::Object(kept), json!({"session_state": {"step": 2, "token": REDACTED}}));
        assert!(keep_emitted(&s, Some(json!([1]))).is_empty());
        assert!(keep_emitted(&s, None).is_empty());
    }

    #[test]
    fn key_patterns_expand() {
        let vars =
            KeyVars { module: "m", input_hash: "abc", user_id: Some("u1"), session_id: None, kind: "session_state" };
        assert_eq!(
            expand_key("${module}:${input_hash}:${user_id}:${session_id}:${type}", &vars),
            "m:abc:u1:none:session_state"
        );
        assert_eq!(expand_key("${other}", &vars), "${other}");
        assert_eq!(expand_key("u:${user_id}", &KeyVars::default()), "u:anonymous");
        assert_eq!(scoped_by("x:${user_id}"), (true, false));
        assert_eq!(scoped_by("${session_id}${user_id}"), (true, true));
    }

    #[test]
    fn identity_and_canonical_json() {
        let c = ctx(json!({"user_profile": {"user_id": "u1"}, "session_state": {"id": "s9"}}));
        assert_eq!(identity(&c), (Some("u1".into()), Some("s9".into())));
        assert_eq!(identity(&Map::new()), (None, None));
        assert_eq!(canonical_json(&json!({"b": 1, "a": {"d": 2, "c": [3]}})), r#"{"a":{"c":[3],"d":2},"b":1}"#);
    }
}
