//! The token forms of source text that signatures and bodies are shown and
//! hashed in.
//!
//! Both forms are built from the leaves of the syntax tree, never from raw
//! text, so whitespace and comments (tree-sitter "extras") cannot leak in:
//!
//! - **display**: the tokens with one space wherever the source had any
//!   whitespace or a comment between them, except after `(`/`[` and before
//!   `)`/`]`/`,`; always `, ` after a comma. Readable, close to the source.
//! - **canonical** (hashed): every token separated by one space, except no
//!   space after `(`/`[`/`{`, before `)`/`]`/`}`/`,`, or after `,`. It does
//!   not depend on the source's whitespace at all, so `a:int` and `a: int`
//!   agree.
//!
//! In both, a trailing comma before a closing bracket (or ending a list such
//! as a `where` clause) is dropped, except in tuples where `(x,)` differs
//! from `(x)`: formatters add and remove those commas when they wrap lines.
//! String and character literals are single tokens (their inside is kept
//! byte for byte). In the canonical form a simple single-quoted Python
//! string becomes double-quoted (what black does), and a Python `block`
//! is wrapped in `⟨ ⟩` because indentation, which has no token of its own,
//! decides which block a statement belongs to.

use tree_sitter::Node;

use crate::units::Lang;

/// Node kinds whose text is one token, inside left untouched.
fn is_atomic(lang: Lang, kind: &str) -> bool {
    match lang {
        Lang::Python => kind == "string",
        Lang::Rust => matches!(kind, "string_literal" | "raw_string_literal" | "char_literal"),
    }
}

/// Node kinds in which a trailing comma changes the meaning.
fn is_tuple(kind: &str) -> bool {
    matches!(
        kind,
        "tuple"
            | "tuple_pattern"
            | "tuple_type"
            | "tuple_expression"
            | "expression_list"
            | "pattern_list"
            | "subscript"
    )
}

fn is_open(token: &str) -> bool {
    matches!(token, "(" | "[" | "{")
}

fn is_close(token: &str) -> bool {
    matches!(token, ")" | "]" | "}")
}

/// Collects tokens from one or more syntax nodes and renders both forms.
pub(crate) struct Tokens<'s> {
    lang: Lang,
    source: &'s str,
    /// `(text, whitespace or a comment came before it in the source)`.
    tokens: Vec<(String, bool)>,
    /// Where the last pushed token ended, to see gaps.
    last_end: Option<usize>,
    /// Nodes to leave out (a docstring), by id.
    skip: Vec<usize>,
}

impl<'s> Tokens<'s> {
    pub(crate) fn new(lang: Lang, source: &'s str) -> Self {
        Tokens { lang, source, tokens: Vec::new(), last_end: None, skip: Vec::new() }
    }

    /// Leaves `node` (and everything under it) out of later pushes.
    pub(crate) fn skip(&mut self, node: Node<'_>) {
        self.skip.push(node.id());
    }

    fn text(&self, node: Node<'_>) -> &'s str {
        self.source.get(node.byte_range()).unwrap_or("")
    }

    fn token(&mut self, node: Node<'_>, text: String) {
        let gap = match self.last_end {
            Some(end) => node.start_byte() > end,
            None => false,
        };
        self.last_end = Some(node.end_byte());
        if !text.is_empty() {
            self.tokens.push((text, gap));
        }
    }

    /// Whether this `,` is a trailing comma that formatters add or remove.
    fn is_trailing_comma(node: Node<'_>) -> bool {
        if node.kind() != "," {
            return false;
        }
        if node.parent().is_some_and(|p| is_tuple(p.kind())) {
            return false;
        }
        let mut next = node.next_sibling();
        while let Some(n) = next {
            if !n.is_extra() {
                break;
            }
            next = n.next_sibling();
        }
        match next {
            None => true,
            Some(n) => is_close(n.kind()) || n.kind() == ">",
        }
    }

    /// Pushes the tokens of `root`'s subtree. Iterative, so deeply nested
    /// input cannot overflow the stack.
    pub(crate) fn push(&mut self, root: Node<'_>) {
        if root.is_extra() || self.skip.contains(&root.id()) {
            return;
        }
        let mut cursor = root.walk();
        let mut depth = 0usize;
        loop {
            let node = cursor.node();
            let mut descend = false;
            if node.is_extra() || self.skip.contains(&node.id()) || node.is_missing() {
                // Comments and left-out nodes: only the gap remains.
            } else if is_atomic(self.lang, node.kind()) || node.child_count() == 0 {
                if !Self::is_trailing_comma(node) {
                    let text = self.text(node).to_owned();
                    self.token(node, text);
                }
            } else {
                if self.lang == Lang::Python && node.kind() == "block" {
                    self.marker("⟨");
                }
                descend = true;
            }
            if descend && cursor.goto_first_child() {
                depth += 1;
                continue;
            }
            loop {
                if depth == 0 {
                    return;
                }
                if cursor.goto_next_sibling() {
                    break;
                }
                if !cursor.goto_parent() {
                    return;
                }
                depth -= 1;
                if self.lang == Lang::Python && cursor.node().kind() == "block" {
                    self.marker("⟩");
                }
            }
        }
    }

    /// A structural token with no source text (shown in neither form but
    /// the canonical one).
    fn marker(&mut self, marker: &str) {
        self.tokens.push((marker.to_owned(), false));
    }

    /// The display form (see the module doc).
    pub(crate) fn display(&self) -> String {
        let mut out = String::new();
        let mut prev: Option<&str> = None;
        for (text, gap) in &self.tokens {
            if text == "⟨" || text == "⟩" {
                continue;
            }
            if let Some(p) = prev {
                let space = if p == "," {
                    !is_close(text)
                } else {
                    *gap && !matches!(p, "(" | "[") && !matches!(text.as_str(), ")" | "]" | ",")
                };
                if space {
                    out.push(' ');
                }
            }
            out.push_str(text);
            prev = Some(text);
        }
        out
    }

    /// The canonical form (see the module doc).
    pub(crate) fn canonical(&self) -> String {
        let mut out = String::new();
        let mut prev: Option<&str> = None;
        for (text, _) in &self.tokens {
            if let Some(p) = prev
                && !(is_open(p) || p == "," || is_close(text) || text == ",")
            {
                out.push(' ');
            }
            if self.lang == Lang::Python {
                out.push_str(&double_quoted(text));
            } else {
                out.push_str(text);
            }
            prev = Some(text);
        }
        out
    }
}

/// A simple single-quoted Python string as black writes it: `'a'` → `"a"`
/// when the inside has no quote or backslash; anything else unchanged.
fn double_quoted(token: &str) -> std::borrow::Cow<'_, str> {
    let prefix_len = token.find(['\'', '"']).unwrap_or(token.len());
    let (prefix, rest) = token.split_at(prefix_len);
    let plain_prefix = prefix.len() <= 2 && prefix.chars().all(|c| "rRuUbBfF".contains(c));
    if plain_prefix && rest.len() >= 2 && rest.starts_with('\'') && rest.ends_with('\'') && !rest.starts_with("'''") {
        let inner = &rest[1..rest.len() - 1];
        if !inner.contains(['\'', '"', '\\']) {
            return format!("{prefix}\"{inner}\"").into();
        }
    }
    token.into()
}

/// blake3 hex of the text.
pub(crate) fn hash(text: &str) -> String {
    blake3::hash(text.as_bytes()).to_hex().to_string()
}

#[cfg(test)]
mod tests {
    use super::double_quoted;

    #[test]
    fn single_quotes_become_double_only_when_plain() {
        assert_eq!(double_quoted("'a b'"), "\"a b\"");
        assert_eq!(double_quoted("r'a'"), "r\"a\"");
        assert_eq!(double_quoted("'it\"s'"), "'it\"s'");
        assert_eq!(double_quoted("'a\\n'"), "'a\\n'");
        assert_eq!(double_quoted("'''doc'''"), "'''doc'''");
        assert_eq!(double_quoted("'"), "'");
        assert_eq!(double_quoted("x"), "x");
    }
}
