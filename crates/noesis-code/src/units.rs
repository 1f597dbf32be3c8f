//! Function-level units of Python and Rust source.
//!
//! [`functions`] parses a file with tree-sitter and returns every function
//! that has a body, in source order, with its qualified name, signature and
//! two hashes; [`changed`] compares two such lists. Tree-sitter is error
//! tolerant: a file with syntax errors still yields the functions that
//! parse, each flagged with [`Function::has_errors`] when its own text has
//! an error.
//!
//! # Signatures
//!
//! The signature is what callers depend on, shown in the display form and
//! hashed in the canonical form described below.
//!
//! - Python: every decorator, `async`, `def`, the name, type parameters,
//!   the parameters with their annotations and defaults, and the return
//!   annotation. Not the body (so not the docstring) and not comments.
//! - Rust: the outer attributes that change the interface (`cfg`,
//!   `deprecated`, `must_use`, `no_mangle`, `export_name`, `target_feature`,
//!   `track_caller`, and `unsafe(..)` such as `#[unsafe(no_mangle)]`), the
//!   visibility, the qualifiers (`const`, `async`, `unsafe`, `extern "C"`),
//!   `fn`, the name, generics, parameters, return type and `where` clause.
//!   Not doc comments, not `#[test]`, lints (`allow`, …), `inline` or other
//!   attributes, and not the body.
//!
//! # Hashes
//!
//! [`Function::signature_hash`] and [`Function::body_hash`] are blake3 hex
//! digests of a canonical token form: the tokens of the syntax tree, comments
//! left out, joined by one space except after `(`, `[`, `{` or `,` and before
//! `)`, `]`, `}` or `,`; a trailing comma before a closing bracket is
//! dropped (except in a tuple); string literals are kept byte for byte
//! (simple `'…'` Python strings read as `"…"`, as black writes them). So
//! reformatting (line breaks in a parameter list, spacing, the trailing
//! commas formatters add) changes neither hash, while any change of a token
//! does. The body hash also leaves out comments and a Python docstring:
//! documentation-only edits are not body changes. Python blocks are marked
//! in the canonical form, so re-indenting a statement into or out of a
//! block is a body change.
//!
//! # Names
//!
//! Python: `Class.method`, `outer.inner`, `Outer.Inner.method`. Rust:
//! `Type::method` for `impl Type` and `impl Trait for Type` (generic
//! arguments and `&` dropped: `impl<T> Foo<T>` gives `Foo::…`),
//! `Trait::method` for a trait's default methods, `module::f` for inline
//! modules, `outer::inner` for items nested in a function body. Two
//! functions can share a qualified name (the same method name in two trait
//! impls of one type, a Python property's getter and setter); [`changed`]
//! pairs them in source order. Trait methods and `extern` declarations
//! without a body are not units.

use std::path::Path;

use tree_sitter::{Node, Parser, Tree};

use crate::CodeError;
use crate::normalize::{Tokens, hash};

/// A language this crate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Lang {
    /// Python 3 (`.py`).
    Python,
    /// Rust (`.rs`).
    Rust,
}

impl Lang {
    /// The language of a file, by its extension (`.py`, `.rs`).
    #[must_use]
    pub fn from_path(path: &Path) -> Option<Lang> {
        match path.extension()?.to_str()? {
            "py" => Some(Lang::Python),
            "rs" => Some(Lang::Rust),
            _ => None,
        }
    }

    fn grammar(self) -> tree_sitter::Language {
        match self {
            Lang::Python => tree_sitter_python::LANGUAGE.into(),
            Lang::Rust => tree_sitter_rust::LANGUAGE.into(),
        }
    }

    /// What joins the parts of a qualified name.
    fn separator(self) -> &'static str {
        match self {
            Lang::Python => ".",
            Lang::Rust => "::",
        }
    }
}

/// Whether a function is free-standing or belongs to a type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FunctionKind {
    /// A module-level or nested function.
    Function,
    /// Defined directly in a Python class body or a Rust `impl`/`trait`.
    Method,
}

/// One parameter as written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Param {
    /// The name as written, with Python's `*`/`**` (`*args`, `**kwargs`);
    /// a Rust pattern in its display form (`(a, b)`, `mut x`); `self` for
    /// a Rust receiver.
    pub name: String,
    /// The type annotation in display form; for a Rust receiver `&self` it
    /// is `&Self` (`&mut Self`, `&'a Self`), for plain `self` none.
    pub annotation: Option<String>,
    /// The default value (Python only), in display form.
    pub default: Option<String>,
}

/// A function-level unit of source.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Function {
    /// The bare name.
    pub name: String,
    /// The name with its enclosing classes, functions, types and modules
    /// (see the module doc).
    pub qualified_name: String,
    /// Function or method.
    pub kind: FunctionKind,
    /// Rust: declared with plain `pub` (not `pub(crate)`), or a method of a
    /// trait impl, or a default method of a `pub` trait. Python: no part of
    /// the qualified name starts with `_` (dunder names such as `__init__`
    /// count as public) and it is not nested in a function. This is the
    /// item's own visibility, not whether its module is reachable.
    pub is_public: bool,
    /// Rust: has `#[test]` (or `#[tokio::test]`, any attribute whose last
    /// segment is `test`) or `#[cfg(test)]`, or is inside a `#[cfg(test)]`
    /// module. Python: named `test` or `test_*`, or a `test*` method of a
    /// `Test*` class (pytest's and unittest's collection rules).
    pub is_test: bool,
    /// `async def` / `async fn`.
    pub is_async: bool,
    /// The signature in display form (see the module doc).
    pub signature: String,
    /// blake3 hex of the signature's canonical form.
    pub signature_hash: String,
    /// blake3 hex of the body's canonical form, without comments or a
    /// docstring.
    pub body_hash: String,
    /// First line, 1-based, including Python decorators and Rust outer
    /// attributes.
    pub start_line: u32,
    /// Last line, 1-based, inclusive.
    pub end_line: u32,
    /// The parameters in order (Python's bare `*` and `/` markers left out).
    pub params: Vec<Param>,
    /// The return annotation or type in display form.
    pub return_annotation: Option<String>,
    /// The function's own text contains a syntax error or a missing token,
    /// so its name, signature or hashes may not be what the author meant.
    pub has_errors: bool,
}

/// How a function differs between two versions of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// Only in the new version.
    Added,
    /// Only in the old version.
    Removed,
    /// The signature hash differs (whether or not the body does too).
    SignatureChanged,
    /// Same signature, different body.
    BodyChanged,
}

/// One changed function.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Change {
    /// Which function.
    pub qualified_name: String,
    /// How it changed.
    pub kind: ChangeKind,
}

fn parse(lang: Lang, source: &str) -> Result<Tree, CodeError> {
    let mut parser = Parser::new();
    parser.set_language(&lang.grammar()).map_err(|e| CodeError::Parser { lang, reason: e.to_string() })?;
    parser
        .parse(source, None)
        .ok_or_else(|| CodeError::Parser { lang, reason: "the parser returned no tree".to_owned() })
}

/// Whether the source has any syntax error or missing token.
///
/// # Errors
/// Only if the parser cannot be set up for `lang`.
pub fn has_syntax_errors(lang: Lang, source: &str) -> Result<bool, CodeError> {
    Ok(parse(lang, source)?.root_node().has_error())
}

/// The functions of a file that have a body, in source order (see the
/// module doc for names, signatures and hashes).
///
/// # Errors
/// Only if the parser cannot be set up for `lang`; syntax errors in the
/// source are not errors (see [`Function::has_errors`]).
pub fn functions(lang: Lang, source: &str) -> Result<Vec<Function>, CodeError> {
    let tree = parse(lang, source)?;
    let mut walk = Walk { lang, source, scopes: vec![Scope::root()], out: Vec::new() };
    walk.run(tree.root_node());
    Ok(walk.out)
}

/// What encloses a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Container {
    Module,
    /// A Python class; `test_class` when its name starts with `Test`.
    Class {
        test_class: bool,
    },
    /// A Rust `impl`; `of_trait` for `impl Trait for Type`.
    Impl {
        of_trait: bool,
    },
    /// A Rust trait definition.
    Trait {
        public: bool,
    },
    Function,
}

#[derive(Debug, Clone)]
struct Scope {
    /// The qualified name of the enclosing item ("" at the top).
    path: String,
    container: Container,
    /// Rust: inside a `#[cfg(test)]` module.
    in_test: bool,
    /// Python: every enclosing class has a public name.
    public: bool,
}

impl Scope {
    fn root() -> Self {
        Scope { path: String::new(), container: Container::Module, in_test: false, public: true }
    }
}

struct Walk<'s> {
    lang: Lang,
    source: &'s str,
    /// Scopes by index; nodes on the stack refer to theirs.
    scopes: Vec<Scope>,
    out: Vec<Function>,
}

impl<'s> Walk<'s> {
    fn text(&self, node: Node<'_>) -> &'s str {
        self.source.get(node.byte_range()).unwrap_or("")
    }

    fn display(&self, node: Node<'_>) -> String {
        let mut tokens = Tokens::new(self.lang, self.source);
        tokens.push(node);
        tokens.display()
    }

    fn qualify(&self, scope: usize, name: &str) -> String {
        let path = &self.scopes[scope].path;
        if path.is_empty() { name.to_owned() } else { format!("{path}{}{name}", self.lang.separator()) }
    }

    /// Depth-first in source order with an explicit stack, so deeply nested
    /// input cannot overflow the call stack.
    fn run(&mut self, root: Node<'_>) {
        let mut stack = vec![(root, 0usize)];
        while let Some((node, scope)) = stack.pop() {
            let inner = match (self.lang, node.kind()) {
                (Lang::Python, "function_definition") => self.python_function(node, scope),
                (Lang::Python, "class_definition") => self.python_class(node, scope),
                (Lang::Rust, "function_item") => self.rust_function(node, scope),
                (Lang::Rust, "impl_item") => self.rust_impl(node, scope),
                (Lang::Rust, "trait_item") => self.rust_trait(node, scope),
                (Lang::Rust, "mod_item") => self.rust_mod(node, scope),
                _ => scope,
            };
            let mut cursor = node.walk();
            let children: Vec<Node<'_>> = node.named_children(&mut cursor).collect();
            for child in children.into_iter().rev() {
                stack.push((child, inner));
            }
        }
    }

    fn push_scope(&mut self, scope: Scope) -> usize {
        self.scopes.push(scope);
        self.scopes.len() - 1
    }

    fn python_class(&mut self, node: Node<'_>, scope: usize) -> usize {
        let Some(name) = node.child_by_field_name("name").map(|n| self.text(n)) else {
            return scope;
        };
        let parent = &self.scopes[scope];
        let public = parent.public && parent.container != Container::Function && is_public_python(name);
        let path = self.qualify(scope, name);
        self.push_scope(Scope {
            path,
            container: Container::Class { test_class: name.starts_with("Test") },
            in_test: false,
            public,
        })
    }

    fn python_function(&mut self, node: Node<'_>, scope: usize) -> usize {
        let Some(name) = node.child_by_field_name("name").map(|n| self.text(n).to_owned()) else {
            return scope;
        };
        let qualified_name = self.qualify(scope, &name);
        let parent = self.scopes[scope].clone();
        let decorated = node.parent().filter(|p| p.kind() == "decorated_definition");
        let outer = decorated.unwrap_or(node);

        let mut signature = Tokens::new(self.lang, self.source);
        if let Some(d) = decorated {
            let mut cursor = d.walk();
            for child in d.named_children(&mut cursor).filter(|c| c.kind() == "decorator") {
                signature.push(child);
            }
        }
        let mut is_async = false;
        let mut cursor = node.walk();
        for (i, child) in node.children(&mut cursor).enumerate() {
            let field = u32::try_from(i).ok().and_then(|i| node.field_name_for_child(i));
            if field == Some("body") || child.kind() == ":" {
                continue;
            }
            if child.kind() == "async" {
                is_async = true;
            }
            signature.push(child);
        }

        let mut body = Tokens::new(self.lang, self.source);
        if let Some(block) = node.child_by_field_name("body") {
            if let Some(doc) = python_docstring(block) {
                body.skip(doc);
            }
            body.push(block);
        }

        let params = node.child_by_field_name("parameters").map(|p| self.python_params(p)).unwrap_or_default();
        let is_test = name == "test"
            || name.starts_with("test_")
            || (matches!(parent.container, Container::Class { test_class: true }) && name.starts_with("test"));
        self.out.push(Function {
            kind: if matches!(parent.container, Container::Class { .. }) {
                FunctionKind::Method
            } else {
                FunctionKind::Function
            },
            is_public: parent.public && parent.container != Container::Function && is_public_python(&name),
            is_test,
            is_async,
            signature: signature.display(),
            signature_hash: hash(&signature.canonical()),
            body_hash: hash(&body.canonical()),
            start_line: line(outer.start_position().row),
            end_line: end_line(outer),
            params,
            return_annotation: node.child_by_field_name("return_type").map(|r| self.display(r)),
            has_errors: outer.has_error(),
            name,
            qualified_name: qualified_name.clone(),
        });
        self.push_scope(Scope { path: qualified_name, container: Container::Function, in_test: false, public: false })
    }

    fn python_params(&self, params: Node<'_>) -> Vec<Param> {
        let mut out = Vec::new();
        let mut cursor = params.walk();
        for p in params.named_children(&mut cursor) {
            if p.is_extra() {
                continue;
            }
            let field = |f: &str| p.child_by_field_name(f).map(|n| self.display(n));
            let param = match p.kind() {
                "identifier" | "list_splat_pattern" | "dictionary_splat_pattern" | "tuple_pattern" => {
                    Param { name: self.display(p), annotation: None, default: None }
                }
                "typed_parameter" => {
                    let mut c = p.walk();
                    let name = p
                        .named_children(&mut c)
                        .find(|n| !n.is_extra() && Some(*n) != p.child_by_field_name("type"))
                        .map(|n| self.display(n))
                        .unwrap_or_default();
                    Param { name, annotation: field("type"), default: None }
                }
                "default_parameter" | "typed_default_parameter" => Param {
                    name: field("name").unwrap_or_default(),
                    annotation: field("type"),
                    default: field("value"),
                },
                // `*` and `/` markers, errors.
                _ => continue,
            };
            out.push(param);
        }
        out
    }

    /// The attribute items before a Rust item, nearest last, and the line
    /// of the first.
    fn rust_attributes<'t>(&self, node: Node<'t>) -> Vec<Node<'t>> {
        let mut attrs = Vec::new();
        let mut prev = node.prev_sibling();
        while let Some(p) = prev {
            if p.kind() == "attribute_item" {
                attrs.push(p);
            } else if !p.is_extra() {
                break;
            }
            prev = p.prev_sibling();
        }
        attrs.reverse();
        attrs
    }

    /// An attribute item's path (`test`, `tokio::test`, `cfg`) and the
    /// identifiers in its arguments.
    fn attribute_parts(&self, item: Node<'_>) -> (String, String) {
        let mut cursor = item.walk();
        let Some(attr) = item.named_children(&mut cursor).find(|c| c.kind() == "attribute") else {
            return (String::new(), String::new());
        };
        let mut c = attr.walk();
        let path = attr.named_children(&mut c).find(|n| !n.is_extra()).map(|n| self.display(n)).unwrap_or_default();
        let args = attr.child_by_field_name("arguments").map(|a| self.display(a)).unwrap_or_default();
        (path, args)
    }

    fn is_cfg_test(&self, item: Node<'_>) -> bool {
        let (path, args) = self.attribute_parts(item);
        if path != "cfg" {
            return false;
        }
        let words: Vec<&str> = args.split(|c: char| !(c.is_alphanumeric() || c == '_')).collect();
        words.contains(&"test") && !words.contains(&"not")
    }

    fn rust_mod(&mut self, node: Node<'_>, scope: usize) -> usize {
        let (Some(name), Some(_)) = (node.child_by_field_name("name"), node.child_by_field_name("body")) else {
            return scope;
        };
        let in_test = self.scopes[scope].in_test || self.rust_attributes(node).iter().any(|a| self.is_cfg_test(*a));
        let path = self.qualify(scope, self.text(name));
        self.push_scope(Scope { path, container: Container::Module, in_test, public: true })
    }

    fn rust_impl(&mut self, node: Node<'_>, scope: usize) -> usize {
        let Some(ty) = node.child_by_field_name("type") else {
            return scope;
        };
        let path = self.qualify(scope, &self.type_key(ty));
        let of_trait = node.child_by_field_name("trait").is_some();
        let in_test = self.scopes[scope].in_test;
        self.push_scope(Scope { path, container: Container::Impl { of_trait }, in_test, public: true })
    }

    fn rust_trait(&mut self, node: Node<'_>, scope: usize) -> usize {
        let Some(name) = node.child_by_field_name("name") else {
            return scope;
        };
        let path = self.qualify(scope, self.text(name));
        let public = self.is_plain_pub(node);
        let in_test = self.scopes[scope].in_test;
        self.push_scope(Scope { path, container: Container::Trait { public }, in_test, public: true })
    }

    /// The name a type is known by in qualified names: `Foo<T>` → `Foo`,
    /// `&'a mut Foo` → `Foo`, `a::Foo` → `a::Foo`.
    fn type_key(&self, ty: Node<'_>) -> String {
        let mut ty = ty;
        while matches!(ty.kind(), "generic_type" | "reference_type" | "pointer_type")
            && let Some(inner) = ty.child_by_field_name("type")
        {
            ty = inner;
        }
        self.display(ty).replace(' ', "")
    }

    fn is_plain_pub(&self, node: Node<'_>) -> bool {
        let mut cursor = node.walk();
        node.named_children(&mut cursor).any(|c| c.kind() == "visibility_modifier" && self.display(c) == "pub")
    }

    fn rust_function(&mut self, node: Node<'_>, scope: usize) -> usize {
        let Some(name) = node.child_by_field_name("name").map(|n| self.text(n).to_owned()) else {
            return scope;
        };
        let qualified_name = self.qualify(scope, &name);
        let parent = self.scopes[scope].clone();
        let attrs = self.rust_attributes(node);

        let mut signature = Tokens::new(self.lang, self.source);
        let mut is_test = parent.in_test;
        for attr in &attrs {
            let (path, _) = self.attribute_parts(*attr);
            if path == "test" || path.ends_with("::test") || self.is_cfg_test(*attr) {
                is_test = true;
            }
            if INTERFACE_ATTRIBUTES.contains(&path.as_str()) {
                signature.push(*attr);
            }
        }
        let mut is_async = false;
        let mut cursor = node.walk();
        for (i, child) in node.children(&mut cursor).enumerate() {
            let field = u32::try_from(i).ok().and_then(|i| node.field_name_for_child(i));
            if field == Some("body") {
                continue;
            }
            if child.kind() == "function_modifiers" {
                let mut c = child.walk();
                is_async |= child.children(&mut c).any(|m| m.kind() == "async");
            }
            signature.push(child);
        }

        let mut body = Tokens::new(self.lang, self.source);
        if let Some(block) = node.child_by_field_name("body") {
            body.push(block);
        }

        let is_public = match parent.container {
            Container::Impl { of_trait: true } => true,
            Container::Trait { public } => public,
            Container::Function => false,
            _ => self.is_plain_pub(node),
        };
        let start = attrs.first().copied().unwrap_or(node);
        self.out.push(Function {
            kind: if matches!(parent.container, Container::Impl { .. } | Container::Trait { .. }) {
                FunctionKind::Method
            } else {
                FunctionKind::Function
            },
            is_public,
            is_test,
            is_async,
            signature: signature.display(),
            signature_hash: hash(&signature.canonical()),
            body_hash: hash(&body.canonical()),
            start_line: line(start.start_position().row),
            end_line: end_line(node),
            params: node.child_by_field_name("parameters").map(|p| self.rust_params(p)).unwrap_or_default(),
            return_annotation: node.child_by_field_name("return_type").map(|r| self.display(r)),
            has_errors: node.has_error(),
            name,
            qualified_name: qualified_name.clone(),
        });
        self.push_scope(Scope { path: qualified_name, container: Container::Function, in_test: is_test, public: false })
    }

    fn rust_params(&self, params: Node<'_>) -> Vec<Param> {
        let mut out = Vec::new();
        let mut cursor = params.walk();
        for p in params.named_children(&mut cursor) {
            let param = match p.kind() {
                "parameter" => Param {
                    name: p.child_by_field_name("pattern").map(|n| self.display(n)).unwrap_or_default(),
                    annotation: p.child_by_field_name("type").map(|n| self.display(n)),
                    default: None,
                },
                "self_parameter" => {
                    let text = self.display(p);
                    let annotation = text.starts_with('&').then(|| {
                        let head = text.strip_suffix("self").unwrap_or(&text);
                        format!("{head}Self")
                    });
                    Param { name: "self".to_owned(), annotation, default: None }
                }
                "variadic_parameter" => Param { name: self.display(p), annotation: None, default: None },
                // Attributes on parameters, comments, errors.
                _ => continue,
            };
            out.push(param);
        }
        out
    }
}

/// Rust attributes that are part of a signature (see the module doc).
const INTERFACE_ATTRIBUTES: &[&str] =
    &["cfg", "deprecated", "must_use", "no_mangle", "export_name", "target_feature", "track_caller", "unsafe"];

fn is_public_python(name: &str) -> bool {
    !name.starts_with('_') || (name.len() > 4 && name.starts_with("__") && name.ends_with("__"))
}

/// The docstring of a Python block: a first statement that is only a string.
fn python_docstring(block: Node<'_>) -> Option<Node<'_>> {
    let mut cursor = block.walk();
    let first = block.named_children(&mut cursor).find(|n| !n.is_extra())?;
    if first.kind() != "expression_statement" || first.named_child_count() != 1 {
        return None;
    }
    let expr = first.named_child(0)?;
    matches!(expr.kind(), "string" | "concatenated_string").then_some(first)
}

/// A 0-based row as a 1-based line.
fn line(row: usize) -> u32 {
    u32::try_from(row.saturating_add(1)).unwrap_or(u32::MAX)
}

/// The last line a node covers: its end is exclusive, so an end at column 0
/// belongs to the line before.
fn end_line(node: Node<'_>) -> u32 {
    let end = node.end_position();
    let start = node.start_position();
    if end.column == 0 && end.row > start.row { line(end.row - 1) } else { line(end.row) }
}

/// Which functions were added, removed, or changed in signature or body
/// between two versions of a file; unchanged ones are left out.
///
/// Functions are matched by qualified name; when several share one, the
/// first old is paired with the first new and so on. New-side changes come
/// first in new-source order, then removals in old-source order. A function
/// whose signature and body both changed is reported once, as
/// [`ChangeKind::SignatureChanged`].
#[must_use]
pub fn changed(old: &[Function], new: &[Function]) -> Vec<Change> {
    let mut used = vec![false; old.len()];
    let mut out = Vec::new();
    for n in new {
        let matched = old.iter().enumerate().find(|(i, o)| !used[*i] && o.qualified_name == n.qualified_name);
        let kind = match matched {
            None => Some(ChangeKind::Added),
            Some((i, o)) => {
                used[i] = true;
                if o.signature_hash != n.signature_hash {
                    Some(ChangeKind::SignatureChanged)
                } else if o.body_hash != n.body_hash {
                    Some(ChangeKind::BodyChanged)
                } else {
                    None
                }
            }
        };
        if let Some(kind) = kind {
            out.push(Change { qualified_name: n.qualified_name.clone(), kind });
        }
    }
    for (o, used) in old.iter().zip(used) {
        if !used {
            out.push(Change { qualified_name: o.qualified_name.clone(), kind: ChangeKind::Removed });
        }
    }
    out
}

/// The modules a file depends on, deduplicated, in order of first
/// appearance (anywhere in the file, including inside functions).
///
/// Python: `import a.b` → `a.b`, `import a as b` → `a`, `from a.b import c`
/// → `a.b`, relative imports as written (`.`, `..pkg`), `from __future__`
/// → `__future__`. Rust: the first segment of each `use` path (`std`,
/// `crate`, `super`, `serde`; each entry of a leading `{…}` group), the
/// name of each `mod name;` declared in another file (inline modules are
/// not dependencies), and `extern crate name`.
///
/// # Errors
/// Only if the parser cannot be set up for `lang`.
pub fn imports(lang: Lang, source: &str) -> Result<Vec<String>, CodeError> {
    let tree = parse(lang, source)?;
    let walk = Walk { lang, source, scopes: Vec::new(), out: Vec::new() };
    let mut out: Vec<String> = Vec::new();
    let mut add = |name: String| {
        if !name.is_empty() && !out.contains(&name) {
            out.push(name);
        }
    };
    let mut stack = vec![tree.root_node()];
    while let Some(node) = stack.pop() {
        match (lang, node.kind()) {
            (Lang::Python, "import_statement") => {
                let mut cursor = node.walk();
                for name in node.children_by_field_name("name", &mut cursor) {
                    let module =
                        if name.kind() == "aliased_import" { name.child_by_field_name("name") } else { Some(name) };
                    if let Some(m) = module {
                        add(walk.display(m).replace(' ', ""));
                    }
                }
            }
            (Lang::Python, "import_from_statement") => {
                if let Some(m) = node.child_by_field_name("module_name") {
                    add(walk.display(m).replace(' ', ""));
                }
            }
            (Lang::Python, "future_import_statement") => add("__future__".to_owned()),
            (Lang::Rust, "use_declaration") => {
                if let Some(arg) = node.child_by_field_name("argument") {
                    for first in walk.use_roots(arg) {
                        add(first);
                    }
                }
            }
            (Lang::Rust, "mod_item") if node.child_by_field_name("body").is_none() => {
                if let Some(name) = node.child_by_field_name("name") {
                    add(walk.text(name).to_owned());
                }
            }
            (Lang::Rust, "extern_crate_declaration") => {
                if let Some(name) = node.child_by_field_name("name") {
                    add(walk.text(name).to_owned());
                }
            }
            _ => {}
        }
        let mut cursor = node.walk();
        let children: Vec<Node<'_>> = node.named_children(&mut cursor).collect();
        stack.extend(children.into_iter().rev());
    }
    Ok(out)
}

impl Walk<'_> {
    /// The first segments of a `use` tree.
    fn use_roots(&self, arg: Node<'_>) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![arg];
        while let Some(node) = stack.pop() {
            match node.kind() {
                "scoped_identifier" => match node.child_by_field_name("path") {
                    Some(path) => stack.push(path),
                    None => {
                        if let Some(name) = node.child_by_field_name("name") {
                            out.push(self.text(name).to_owned());
                        }
                    }
                },
                "scoped_use_list" => match node.child_by_field_name("path") {
                    Some(path) => stack.push(path),
                    None => stack.extend(node.child_by_field_name("list")),
                },
                "use_as_clause" => stack.extend(node.child_by_field_name("path")),
                "use_list" | "use_wildcard" => {
                    let mut cursor = node.walk();
                    let children: Vec<Node<'_>> = node.named_children(&mut cursor).filter(|c| !c.is_extra()).collect();
                    stack.extend(children.into_iter().rev());
                }
                "identifier" | "crate" | "self" | "super" | "metavariable" => out.push(self.text(node).to_owned()),
                _ => {}
            }
        }
        out
    }
}
