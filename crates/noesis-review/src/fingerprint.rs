//! Fingerprints: the same issue, seen again, gets the same one.
//!
//! # The rule (version 1)
//!
//! [`normalise`] turns a finding's title into the words that identify the
//! issue, leaving out what changes between sightings:
//!
//! 1. **Quoted spans go**, quotes and contents: `"…"`, `'…'`, `` `…` ``,
//!    `“…”`, `‘…’`. They hold values, identifiers and snippets that differ from
//!    one place to the next (`` `read_config` unwraps `` and `` `load_state`
//!    unwraps `` are one lesson). A quote opens only where no letter or digit
//!    precedes it and closes only where none follows, so the apostrophe in
//!    `doesn't` is not a quote; an unmatched quote is punctuation. If nothing
//!    but quoted text is left, the quotes go and their contents stay.
//! 2. **Lowercase** (Unicode).
//! 3. **Digits go** (line numbers, `item2`, `v1.2`), wherever they stand.
//! 4. **Everything else that is not a letter is a space** (punctuation,
//!    `_`, `/`, `::`), and runs of whitespace become one space, trimmed.
//!
//! Words are never dropped, reordered or stemmed: a different wording of the
//! substance is a different issue. The title is asked of the model in general
//! terms (see [`findings_schema`](crate::findings_schema)) so this has
//! something stable to work on.
//!
//! [`fingerprint`] is the first 16 hex digits (64 bits) of the blake3 hash of
//! a version tag, the [`Category`] and the normalised text. **The file is not
//! part of it**: a fingerprint names a kind of mistake, and the same mistake in
//! three files is what [promotion](crate::repeats) looks for. Where a finding
//! was seen is [`location_key`]: the file and the fingerprint, for "we flagged
//! this here last time". Neither includes line numbers, which move.

use crate::finding::Category;

/// The rule's version: a change to [`normalise`] or to what is hashed gets a
/// new one. It names the fingerprint in SARIF `partialFingerprints`.
pub const FINGERPRINT_VERSION: &str = "noesis/v1";

const QUOTES: [(char, char); 5] =
    [('"', '"'), ('\'', '\''), ('`', '`'), ('\u{201C}', '\u{201D}'), ('\u{2018}', '\u{2019}')];

/// The text [`fingerprint`] hashes: quoted spans, digits, punctuation, case
/// and spacing taken out, as the [module documentation](self) describes.
#[must_use]
pub fn normalise(text: &str) -> String {
    let unquoted = words(&drop_quoted(text));
    if unquoted.is_empty() { words(text) } else { unquoted }
}

/// The fingerprint of an issue: 16 lowercase hex digits from the category and
/// the normalised title (or message), independent of file and lines.
#[must_use]
pub fn fingerprint(category: &Category, title: &str) -> String {
    let mut hasher = blake3::Hasher::new();
    for part in [FINGERPRINT_VERSION, category.as_str(), &normalise(title)] {
        hasher.update(part.as_bytes());
        // A separator no part contains, so the parts cannot run into each other.
        hasher.update(&[0]);
    }
    hasher.finalize().to_hex()[..16].to_owned()
}

/// Where an issue was seen: `file#fingerprint`, for a file as
/// [`Finding::file`](crate::Finding::file) has it (project-relative, `/`).
#[must_use]
pub fn location_key(file: &str, fingerprint: &str) -> String {
    format!("{file}#{fingerprint}")
}

/// Steps 2–4: lowercase letters, one space between words.
fn words(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    for c in text.chars() {
        if c.is_numeric() {
            continue;
        }
        if c.is_alphabetic() {
            if space && !out.is_empty() {
                out.push(' ');
            }
            space = false;
            out.extend(c.to_lowercase());
        } else {
            space = true;
        }
    }
    out
}

/// Step 1: each quoted span becomes a space.
///
/// Linear: a span that closes is skipped whole, and once a search for a
/// closing quote has run to the end, that quote is not searched for again.
fn drop_quoted(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let word = |i: Option<usize>| i.and_then(|i| chars.get(i)).is_some_and(|c| c.is_alphanumeric());
    let mut unclosed = [false; QUOTES.len()];
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let end = QUOTES
            .iter()
            .position(|(open, _)| *open == c)
            .filter(|&q| !unclosed[q] && !word(i.checked_sub(1)))
            .and_then(|q| {
                let close = QUOTES[q].1;
                let end = (i + 1..chars.len()).find(|&j| chars[j] == close && !word(Some(j + 1)));
                unclosed[q] = end.is_none();
                end
            });
        if let Some(j) = end {
            out.push(' ');
            i = j + 1;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}
