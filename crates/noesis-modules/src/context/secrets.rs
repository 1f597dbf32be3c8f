//! Secret redaction: fields whose name is a secret's, and credential-shaped
//! text anywhere.

use serde_json::{Value, json};

use super::REDACTED;

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
#[cfg(test)]
mod tests {
    use super::*;

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
}
