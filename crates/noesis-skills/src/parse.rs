//! One `SKILL.md` read from its text alone: the front matter between two
//! `---` lines as YAML, every field checked, then the body. Pure: the same
//! text always gives the same skill or the same list of problems.

use serde_json::Value;

/// The longest name a skill may have, in characters.
pub const MAX_NAME: usize = 64;

/// The longest description a skill may have, in characters.
pub const MAX_DESCRIPTION: usize = 1024;

/// What a `SKILL.md` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillMd {
    /// `name`: lowercase letters, digits and single hyphens.
    pub name: String,
    /// `description`: what the skill is for and when to use it.
    pub description: String,
    /// The tools it needs: noesis's `tools` then Claude's `allowed-tools`,
    /// each name once.
    pub tools: Vec<String>,
    /// The Cognitive Modules it needs (`modules`).
    pub modules: Vec<String>,
    /// Everything after the front matter.
    pub body: String,
}

/// One thing wrong with a `SKILL.md`, by the field it is about.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// The field (`name`, `tools[1]`), or `front matter` when the block
    /// itself is wrong.
    pub field: String,
    /// What is wrong and what it should be.
    pub message: String,
}

fn wrong(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError { field: field.into(), message: message.into() }
}

const FRONT_MATTER: &str = "front matter";

/// Reads `text` (a `SKILL.md`); every problem found, not only the first.
pub fn parse(text: &str) -> Result<SkillMd, Vec<FieldError>> {
    let (yaml, body) = split(text).map_err(|e| vec![e])?;
    let fields = if yaml.trim().is_empty() {
        serde_json::Map::new()
    } else {
        match serde_saphyr::from_str::<Value>(yaml) {
            Ok(Value::Object(map)) => map,
            Ok(Value::Null) => serde_json::Map::new(),
            Ok(other) => {
                return Err(vec![wrong(
                    FRONT_MATTER,
                    format!("expected fields (`name: …`), found {}", noesis_json::type_name(&other)),
                )]);
            }
            Err(e) => return Err(vec![wrong(FRONT_MATTER, format!("not valid YAML: {e}"))]),
        }
    };
    let mut errors = Vec::new();
    let name = required_text(&fields, "name", &mut errors);
    if let Some(n) = &name
        && let Err(why) = check_name(n)
    {
        errors.push(wrong("name", why));
    }
    let description = required_text(&fields, "description", &mut errors);
    if let Some(d) = &description {
        let n = d.chars().count();
        if n > MAX_DESCRIPTION {
            errors.push(wrong("description", format!("{n} characters; at most {MAX_DESCRIPTION}")));
        }
    }
    let mut tools = names(&fields, "tools", &mut errors);
    match fields.get("allowed-tools") {
        None | Some(Value::Null) => {}
        // Claude's form: one string, names apart by commas or spaces.
        Some(Value::String(s)) => tools.extend(split_tools(s)),
        Some(_) => tools.extend(names(&fields, "allowed-tools", &mut errors)),
    }
    let mut seen = std::collections::BTreeSet::new();
    tools.retain(|t| seen.insert(t.clone()));
    let modules = names(&fields, "modules", &mut errors);
    match (name, description) {
        (Some(name), Some(description)) if errors.is_empty() => {
            Ok(SkillMd { name, description, tools, modules, body: body.to_owned() })
        }
        _ => Err(errors),
    }
}

/// Whether `name` may name a skill: 1 to [`MAX_NAME`] characters, lowercase
/// ASCII letters, digits and hyphens, no hyphen first, last or doubled.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty; a skill needs a name".into());
    }
    let n = name.chars().count();
    if n > MAX_NAME {
        return Err(format!("{n} characters; at most {MAX_NAME}"));
    }
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-')) {
        return Err(format!("`{name}` has `{c}`; only lowercase letters, digits and hyphens"));
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        return Err(format!("`{name}`: a hyphen may not start or end it, nor follow another"));
    }
    Ok(())
}

/// The front matter and the body of `text`.
fn split(text: &str) -> Result<(&str, &str), FieldError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let opening = lines.next().unwrap_or_default();
    if opening.trim_end() != "---" {
        return Err(wrong(FRONT_MATTER, "SKILL.md must open with a `---` line, then `name:` and `description:`"));
    }
    let start = opening.len();
    let mut at = start;
    for line in lines {
        if line.trim_end() == "---" {
            let body = &text[at + line.len()..];
            return Ok((&text[start..at], body.trim_start_matches(['\r', '\n'])));
        }
        at += line.len();
    }
    Err(wrong(FRONT_MATTER, "no closing `---` line after the fields"))
}

fn required_text(fields: &serde_json::Map<String, Value>, key: &str, errors: &mut Vec<FieldError>) -> Option<String> {
    match fields.get(key) {
        None | Some(Value::Null) => {
            errors.push(wrong(key, "missing; it is required"));
            None
        }
        Some(Value::String(s)) if s.trim().is_empty() => {
            errors.push(wrong(key, "empty; it is required"));
            None
        }
        Some(Value::String(s)) => Some(s.trim().to_owned()),
        Some(other) => {
            errors.push(wrong(key, format!("expected a string, found {}", noesis_json::type_name(other))));
            None
        }
    }
}

fn names(fields: &serde_json::Map<String, Value>, key: &str, errors: &mut Vec<FieldError>) -> Vec<String> {
    let items = match fields.get(key) {
        None | Some(Value::Null) => return Vec::new(),
        Some(Value::Array(items)) => items,
        Some(other) => {
            errors.push(wrong(key, format!("expected a list of names, found {}", noesis_json::type_name(other))));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            Value::String(s) if !s.trim().is_empty() => out.push(s.trim().to_owned()),
            Value::String(_) => errors.push(wrong(format!("{key}[{i}]"), "an empty name")),
            other => errors.push(wrong(
                format!("{key}[{i}]"),
                format!("expected a name, found {}", noesis_json::type_name(other)),
            )),
        }
    }
    out
}

/// `allowed-tools` as one string: names apart by commas or white space,
/// where a name may carry a pattern in parentheses that holds either
/// (`Bash(git diff:*)`).
fn split_tools(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut depth = 0usize;
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                current.push(c);
            }
            ')' => {
                depth = depth.saturating_sub(1);
                current.push(c);
            }
            c if depth == 0 && (c == ',' || c.is_whitespace()) => {
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(front: &str, body: &str) -> String {
        format!("---\n{front}\n---\n{body}")
    }

    /// The fields the errors of `text` name, in order.
    fn fields(text: &str) -> Vec<String> {
        parse(text).expect_err("should not parse").into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn a_plain_skill_reads_with_its_body() {
        let s = parse(&md("name: pdf-forms\ndescription: Fills PDF forms.", "\n# Steps\n1. read\n")).unwrap();
        assert_eq!(s.name, "pdf-forms");
        assert_eq!(s.description, "Fills PDF forms.");
        assert_eq!(s.body, "# Steps\n1. read\n");
        assert!(s.tools.is_empty() && s.modules.is_empty());
    }

    #[test]
    fn crlf_a_bom_and_a_folded_description_are_fine() {
        let text = "\u{feff}---\r\nname: x1\r\ndescription: >\r\n  two\r\n  lines\r\n---\r\nbody\r\n";
        let s = parse(text).unwrap();
        assert_eq!(
            (s.name.as_str(), s.description.as_str(), s.body.as_str()),
            ("x1", "two lines\n".trim(), "body\r\n")
        );
    }

    #[test]
    fn tools_and_modules_and_claudes_allowed_tools() {
        let s = parse(&md(
            "name: a\ndescription: d\ntools: [read_file, grep]\nmodules: [summarize]\nallowed-tools: Read, grep Bash(git diff:*)",
            "",
        ))
        .unwrap();
        assert_eq!(s.tools, ["read_file", "grep", "Read", "Bash(git diff:*)"]);
        assert_eq!(s.modules, ["summarize"]);
        let listed = parse(&md("name: a\ndescription: d\nallowed-tools: [Read, Write]", "")).unwrap();
        assert_eq!(listed.tools, ["Read", "Write"]);
    }

    #[test]
    fn other_fields_are_left_alone() {
        let s = parse(&md("name: a\ndescription: d\nlicense: MIT\nmetadata: {owner: me}", "")).unwrap();
        assert_eq!(s.name, "a");
    }

    #[test]
    fn every_problem_names_its_field() {
        let cases: &[(&str, &[&str])] = &[
            ("description: d", &["name"]),
            ("name: a", &["description"]),
            ("name: ''\ndescription: '  '", &["name", "description"]),
            ("name: 12\ndescription: [x]", &["name", "description"]),
            ("name: Big\ndescription: d", &["name"]),
            ("name: a_b\ndescription: d", &["name"]),
            ("name: -a\ndescription: d", &["name"]),
            ("name: a--b\ndescription: d", &["name"]),
            ("name: a\ndescription: d\ntools: read_file", &["tools"]),
            ("name: a\ndescription: d\ntools: [read_file, 3, '']", &["tools[1]", "tools[2]"]),
            ("name: a\ndescription: d\nmodules: {x: 1}", &["modules"]),
            ("name: a\ndescription: d\nallowed-tools: 7", &["allowed-tools"]),
            ("name: a\ndescription: d\nallowed-tools: [Read, {x: 1}]", &["allowed-tools[1]"]),
            ("- a\n- b", &["front matter"]),
            ("name: [unclosed\ndescription: d", &["front matter"]),
        ];
        for (front, want) in cases {
            assert_eq!(fields(&md(front, "")), *want, "{front}");
        }
        let long = format!("name: {}\ndescription: d", "a".repeat(MAX_NAME + 1));
        assert_eq!(fields(&md(&long, "")), ["name"]);
        let exactly = format!("name: {}\ndescription: {}", "a".repeat(MAX_NAME), "d".repeat(MAX_DESCRIPTION));
        assert!(parse(&md(&exactly, "")).is_ok());
        let wordy = format!("name: a\ndescription: {}", "d".repeat(MAX_DESCRIPTION + 1));
        let e = parse(&md(&wordy, "")).unwrap_err();
        assert_eq!(e[0].to_string(), "description: 1025 characters; at most 1024");
    }

    #[test]
    fn the_front_matter_must_be_there_and_closed() {
        assert_eq!(fields("# just a body\n"), ["front matter"]);
        assert_eq!(fields(""), ["front matter"]);
        assert_eq!(fields("---\nname: a\ndescription: d\n"), ["front matter"]);
        assert!(parse("---\nname: a\ndescription: d\n---").unwrap().body.is_empty());
        // An empty block is read, then says what is missing.
        assert_eq!(fields("---\n---\nbody"), ["name", "description"]);
    }

    #[test]
    fn names_by_the_rules() {
        for ok in ["a", "pdf", "a-b-c", "x9", "9x"] {
            assert!(check_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "A", "a b", "a_b", "-a", "a-", "a--b", "é", "a/b", ".."] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}
