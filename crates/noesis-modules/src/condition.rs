//! Composition conditions: a small expression language over a JSON value.
//!
//! ```text
//! expr    := and ("||" and)*
//! and     := unary ("&&" unary)*
//! unary   := "!" unary | compare
//! compare := operand (("==" | "!=" | ">" | "<" | ">=" | "<=") operand)?
//! operand := "(" expr ")" | "exists(" path ")" | path | number | string | true | false | null
//! ```
//!
//! Paths are the [`jsonpath`](crate::jsonpath) subset (`$.data.changes.length`
//! included); strings take `"` or `'`. `!` negates the comparison after it
//! (`!$.a == 1` is `!($.a == 1)`). A path that leads nowhere is `null`.
//! `==`/`!=` compare JSON values (`1 == 1.0`); `> < >= <=` compare two
//! numbers or two strings and are false for anything else. A bare operand
//! is true unless it is `null`, `false`, `0`, `""`, `[]` or `{}`.
//! A malformed expression is an error with its character position; parsing
//! and evaluation never panic and nesting is bounded.

use serde_json::Value;

use crate::jsonpath::{JsonPath, is_key_char, is_key_start};

/// Deeper nesting than this is refused, so a hostile expression cannot
/// exhaust the stack.
const MAX_NESTING: usize = 64;

/// More `&&`/`||` than this is refused: a chain builds a tree as deep as it
/// is long, and evaluating or dropping that tree recurses once per operator,
/// so nesting alone does not bound the stack.
const MAX_OPERATORS: usize = 256;

/// A parsed condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    text: String,
    expr: Expr,
}

/// A condition that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at character {position}: {message}")]
pub struct ConditionError {
    /// Where the problem is (0-based, in characters).
    pub position: usize,
    /// What is wrong.
    pub message: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
}

#[derive(Debug, Clone, PartialEq)]
enum Operand {
    Path(JsonPath),
    Exists(JsonPath),
    Literal(Value),
    Group(Box<Expr>),
}

#[derive(Debug, Clone, PartialEq)]
enum Expr {
    Or(Box<Expr>, Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Not(Box<Expr>),
    Compare(Operand, Op, Operand),
    Truthy(Operand),
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Path(JsonPath),
    Exists,
    Literal(Value),
    Op(Op),
    And,
    Or,
    Not,
    Open,
    Close,
}

fn err<T>(position: usize, message: impl Into<String>) -> Result<T, ConditionError> {
    Err(ConditionError { position, message: message.into() })
}

fn tokenize(chars: &[char]) -> Result<Vec<(Tok, usize)>, ConditionError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let at = i;
        let two = |s: &str| chars.get(i..i + 2).is_some_and(|w| w.iter().copied().eq(s.chars()));
        let tok = match c {
            c if c.is_whitespace() => {
                i += 1;
                continue;
            }
            '$' => {
                let (path, end) = JsonPath::parse_prefix(chars, i)
                    .map_err(|e| ConditionError { position: e.position, message: e.message })?;
                i = end;
                Tok::Path(path)
            }
            '(' => {
                i += 1;
                Tok::Open
            }
            ')' => {
                i += 1;
                Tok::Close
            }
            _ if two("&&") => {
                i += 2;
                Tok::And
            }
            _ if two("||") => {
                i += 2;
                Tok::Or
            }
            _ if two("==") => {
                i += 2;
                Tok::Op(Op::Eq)
            }
            _ if two("!=") => {
                i += 2;
                Tok::Op(Op::Ne)
            }
            _ if two(">=") => {
                i += 2;
                Tok::Op(Op::Ge)
            }
            _ if two("<=") => {
                i += 2;
                Tok::Op(Op::Le)
            }
            '>' => {
                i += 1;
                Tok::Op(Op::Gt)
            }
            '<' => {
                i += 1;
                Tok::Op(Op::Lt)
            }
            '!' => {
                i += 1;
                Tok::Not
            }
            '=' => return err(at, "`=` is not an operator; compare with `==`"),
            '&' => return err(at, "use `&&`"),
            '|' => return err(at, "use `||`"),
            '"' | '\'' => {
                let (s, end) = string(chars, i)?;
                i = end;
                Tok::Literal(Value::String(s))
            }
            c if c.is_ascii_digit() || c == '-' || c == '.' => {
                let (n, end) = number(chars, i)?;
                i = end;
                Tok::Literal(n)
            }
            c if is_key_start(c) => {
                let from = i;
                while chars.get(i).is_some_and(|c| is_key_char(*c)) {
                    i += 1;
                }
                let word: String = chars[from..i].iter().collect();
                match word.as_str() {
                    "true" => Tok::Literal(Value::Bool(true)),
                    "false" => Tok::Literal(Value::Bool(false)),
                    "null" => Tok::Literal(Value::Null),
                    "exists" => Tok::Exists,
                    _ => return err(from, format!("unknown word `{word}` (paths start with `$`, strings are quoted)")),
                }
            }
            other => return err(at, format!("unexpected `{other}`")),
        };
        out.push((tok, at));
    }
    Ok(out)
}

fn string(chars: &[char], start: usize) -> Result<(String, usize), ConditionError> {
    let quote = chars[start];
    let mut s = String::new();
    let mut i = start + 1;
    loop {
        match chars.get(i) {
            None => return err(start, "unterminated string"),
            Some(c) if *c == quote => return Ok((s, i + 1)),
            Some('\\') => {
                let escaped = match chars.get(i + 1) {
                    Some('n') => '\n',
                    Some('t') => '\t',
                    Some(c @ ('\\' | '"' | '\'')) => *c,
                    _ => return err(i, "unknown escape (use \\\\, \\\", \\', \\n or \\t)"),
                };
                s.push(escaped);
                i += 2;
            }
            Some(c) => {
                s.push(*c);
                i += 1;
            }
        }
    }
}

fn number(chars: &[char], start: usize) -> Result<(Value, usize), ConditionError> {
    let mut i = start;
    if chars.get(i) == Some(&'-') {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let from = *i;
        while chars.get(*i).is_some_and(char::is_ascii_digit) {
            *i += 1;
        }
        *i > from
    };
    let int = digits(&mut i);
    if chars.get(i) == Some(&'.') {
        i += 1;
        if !digits(&mut i) {
            return err(i, "expected digits after `.`");
        }
    } else if !int {
        return err(start, "expected a number");
    }
    if chars.get(i).is_some_and(|c| *c == 'e' || *c == 'E') {
        i += 1;
        if chars.get(i).is_some_and(|c| *c == '+' || *c == '-') {
            i += 1;
        }
        if !digits(&mut i) {
            return err(i, "expected an exponent");
        }
    }
    let text: String = chars[start..i].iter().collect();
    let value = if let Ok(n) = text.parse::<i64>() {
        Value::from(n)
    } else {
        match text.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
            Some(n) => Value::Number(n),
            None => return err(start, format!("`{text}` is not a finite number")),
        }
    };
    Ok((value, i))
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    end: usize,
    depth: usize,
    operators: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(t, _)| t)
    }

    fn at(&self) -> usize {
        self.toks.get(self.pos).map_or(self.end, |(_, p)| *p)
    }

    fn enter(&mut self) -> Result<(), ConditionError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return err(self.at(), format!("nested more than {MAX_NESTING} deep"));
        }
        Ok(())
    }

    fn operator(&mut self) -> Result<(), ConditionError> {
        self.operators += 1;
        if self.operators > MAX_OPERATORS {
            return err(self.at(), format!("more than {MAX_OPERATORS} `&&`/`||` operators"));
        }
        self.pos += 1;
        Ok(())
    }

    fn expr(&mut self) -> Result<Expr, ConditionError> {
        self.enter()?;
        let mut left = self.and()?;
        while self.peek() == Some(&Tok::Or) {
            self.operator()?;
            left = Expr::Or(Box::new(left), Box::new(self.and()?));
        }
        self.depth -= 1;
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, ConditionError> {
        let mut left = self.unary()?;
        while self.peek() == Some(&Tok::And) {
            self.operator()?;
            left = Expr::And(Box::new(left), Box::new(self.unary()?));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, ConditionError> {
        if self.peek() == Some(&Tok::Not) {
            self.pos += 1;
            self.enter()?;
            let inner = self.unary()?;
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(inner)));
        }
        let left = self.operand()?;
        if let Some(Tok::Op(op)) = self.peek() {
            let op = *op;
            self.pos += 1;
            let right = self.operand()?;
            return Ok(Expr::Compare(left, op, right));
        }
        Ok(Expr::Truthy(left))
    }

    fn operand(&mut self) -> Result<Operand, ConditionError> {
        let at = self.at();
        let Some((tok, _)) = self.toks.get(self.pos).cloned() else {
            return err(at, "the expression ends where a value is expected");
        };
        self.pos += 1;
        match tok {
            Tok::Path(p) => Ok(Operand::Path(p)),
            Tok::Literal(v) => Ok(Operand::Literal(v)),
            Tok::Open => {
                let inner = self.expr()?;
                self.close(at)?;
                Ok(Operand::Group(Box::new(inner)))
            }
            Tok::Exists => {
                if self.peek() != Some(&Tok::Open) {
                    return err(self.at(), "expected `(` after exists");
                }
                self.pos += 1;
                let Some(Tok::Path(p)) = self.peek().cloned() else {
                    return err(self.at(), "exists() takes a path such as `$.data.x`");
                };
                self.pos += 1;
                self.close(at)?;
                Ok(Operand::Exists(p))
            }
            Tok::Close => err(at, "unexpected `)`"),
            Tok::Op(_) | Tok::And | Tok::Or | Tok::Not => err(at, "expected a value before the operator"),
        }
    }

    fn close(&mut self, opened: usize) -> Result<(), ConditionError> {
        if self.peek() == Some(&Tok::Close) {
            self.pos += 1;
            Ok(())
        } else if self.pos >= self.toks.len() {
            err(opened, "`(` is never closed")
        } else {
            err(self.at(), "expected `)`")
        }
    }
}

impl Condition {
    /// Parses an expression.
    pub fn parse(text: &str) -> Result<Condition, ConditionError> {
        let chars: Vec<char> = text.chars().collect();
        let toks = tokenize(&chars)?;
        if toks.is_empty() {
            return err(0, "the condition is empty");
        }
        let mut p = Parser { toks, pos: 0, end: chars.len(), depth: 0, operators: 0 };
        let expr = p.expr()?;
        if p.pos < p.toks.len() {
            let what = if p.peek() == Some(&Tok::Close) { "unexpected `)`" } else { "expected `&&`, `||` or the end" };
            return err(p.at(), what);
        }
        Ok(Condition { text: text.to_owned(), expr })
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Evaluates the condition with `$` = `root`.
    pub fn eval(&self, root: &Value) -> bool {
        eval(&self.expr, root)
    }
}

fn eval(e: &Expr, root: &Value) -> bool {
    match e {
        Expr::Or(a, b) => eval(a, root) || eval(b, root),
        Expr::And(a, b) => eval(a, root) && eval(b, root),
        Expr::Not(a) => !eval(a, root),
        Expr::Truthy(o) => truthy(&value(o, root)),
        Expr::Compare(a, op, b) => compare(&value(a, root), *op, &value(b, root)),
    }
}

fn value(o: &Operand, root: &Value) -> Value {
    match o {
        Operand::Path(p) => p.select(root).unwrap_or(Value::Null),
        Operand::Exists(p) => Value::Bool(p.select(root).is_some_and(|v| !v.is_null())),
        Operand::Literal(v) => v.clone(),
        Operand::Group(e) => Value::Bool(eval(e, root)),
    }
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn compare(a: &Value, op: Op, b: &Value) -> bool {
    use std::cmp::Ordering;
    let ord = match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64().zip(y.as_f64()).and_then(|(x, y)| x.partial_cmp(&y)),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    };
    match op {
        Op::Eq => equal(a, b),
        Op::Ne => !equal(a, b),
        Op::Gt => ord == Some(Ordering::Greater),
        Op::Lt => ord == Some(Ordering::Less),
        Op::Ge => matches!(ord, Some(Ordering::Greater | Ordering::Equal)),
        Op::Le => matches!(ord, Some(Ordering::Less | Ordering::Equal)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(expr: &str, root: &Value) -> bool {
        Condition::parse(expr).unwrap_or_else(|e| panic!("{expr}: {e}")).eval(root)
    }

    #[test]
    fn evaluates() {
        let r = json!({
            "meta": {"confidence": 0.8, "risk": "low"},
            "data": {"changes": [{"risk": "high"}], "empty": [], "name": "x", "flag": false},
            "quick-check": {"meta": {"confidence": 0.95}}
        });
        let cases: &[(&str, bool)] = &[
            ("$.meta.confidence > 0.7", true),
            ("$.meta.confidence >= 0.8", true),
            ("$.meta.confidence < 0.8", false),
            ("$.meta.confidence <= 0.8 && $.meta.risk == 'low'", true),
            ("$.meta.risk != \"none\"", true),
            ("$.meta.risk != 'low' || $.data.changes.length > 0", true),
            ("$.data.changes.length == 1", true),
            ("$.data.empty.length > 0", false),
            ("exists($.data.changes)", true),
            ("exists($.data.nope)", false),
            ("!exists($.data.nope)", true),
            ("!$.meta.risk == 'low'", false),
            ("!($.meta.risk == 'low') || $.data.flag", false),
            ("($.meta.confidence > 0.9 || $.meta.risk == 'low') && !$.data.flag", true),
            ("$.data.nope == null", true),
            ("$.data.nope > 1", false),
            ("$.data.name > 'w'", true),
            ("$.data.name > 1", false),
            ("$.data.changes", true),
            ("$.data.empty", false),
            ("$.data.changes[0].risk == 'high'", true),
            ("$.quick-check.meta.confidence > 0.9", true),
            ("1 == 1.0", true),
            ("-1 < 0 && 1e2 == 100", true),
            ("true", true),
            ("null", false),
            ("($.meta.confidence > 0.5) == true", true),
            ("'it\\'s' == \"it's\"", true),
        ];
        for (expr, want) in cases {
            assert_eq!(check(expr, &r), *want, "{expr}");
        }
    }

    #[test]
    fn errors_have_positions() {
        let cases: &[(&str, usize)] = &[
            ("", 0),
            ("$.a = 1", 4),
            ("$.a == ", 7),
            ("($.a == 1", 0),
            ("$.a == 1)", 8),
            ("$.a & $.b", 4),
            ("foo == 1", 0),
            ("$.a == 'x", 7),
            ("exists $.a", 7),
            ("exists($.a", 0),
            ("exists(1)", 7),
            ("$.a 1", 4),
            ("== 1", 0),
            ("$. == 1", 2),
            ("1.", 2),
            ("$.a == #", 7),
            ("'\\q'", 1),
        ];
        for (expr, at) in cases {
            let e = Condition::parse(expr).unwrap_err();
            assert_eq!(e.position, *at, "{expr}: {e}");
        }
    }

    #[test]
    fn hostile_nesting_is_an_error_not_a_crash() {
        let deep = format!("{}true{}", "(".repeat(10_000), ")".repeat(10_000));
        assert!(Condition::parse(&deep).unwrap_err().message.contains("nested"));
        let nots = format!("{}true", "!".repeat(10_000));
        assert!(Condition::parse(&nots).is_err());
        let ok = format!("{}true{}", "(".repeat(20), ")".repeat(20));
        assert!(Condition::parse(&ok).unwrap().eval(&Value::Null));
    }

    #[test]
    fn hostile_chains_are_an_error_not_a_crash() {
        // Flat chains nest nothing, yet each operator adds a level to the
        // tree that eval and drop walk recursively.
        for op in [" && ", " || "] {
            let long = vec!["true"; 20_000].join(op);
            let e = Condition::parse(&long).unwrap_err();
            assert!(e.message.contains("operators"), "{e}");
        }
        let fine = vec!["$.a == 1"; 100].join(" || ");
        assert!(Condition::parse(&fine).unwrap().eval(&serde_json::json!({"a": 1})));
    }
}
