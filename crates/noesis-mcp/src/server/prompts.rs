//! Modules as MCP prompts: editors list them as slash commands.
//!
//! A prompt's arguments are the top-level properties of the module's input
//! schema (name, description, required). MCP argument values are text, so a
//! property whose schema takes text receives it as written and any other
//! (a number, a list, an object) is read as JSON. `prompts/get` builds the
//! input from the arguments, checks it against the input schema, and
//! renders the module's prompt as a run would (placeholders, the input, the
//! envelope instruction and the data schema) into one user message. A
//! module that declares no input schema takes any input: its prompt has one
//! optional argument, `input`, the whole input as a JSON object.

use noesis_modules::{Module, PromptParts, build_prompt, check_input};
use serde_json::{Map, Value, json};

/// One argument of a module's prompt.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Argument {
    pub(super) name: String,
    pub(super) description: Option<String>,
    pub(super) required: bool,
    /// Whether the property takes text as written; otherwise the value is
    /// JSON of the type named here.
    pub(super) json_type: Option<String>,
}

/// The argument of a module without an input schema: its whole input.
const WHOLE_INPUT: &str = "input";

/// The property an input field is reserved for, never a prompt argument:
/// the runtime takes it out of the input before anything else sees it.
const RESERVED: &str = "_context";

/// The arguments of `module`'s prompt, in the order its input schema lists
/// them; none when the schema names no properties; the one [`WHOLE_INPUT`]
/// when the module has no input schema.
pub(super) fn arguments(module: &Module) -> Vec<Argument> {
    let Some(schema) = module.input.as_ref().map(|s| &s.schema) else {
        return vec![Argument {
            name: WHOLE_INPUT.to_owned(),
            description: Some("The module's whole input (it declares no input schema)".to_owned()),
            required: false,
            json_type: Some("object".to_owned()),
        }];
    };
    let schema = resolve(&module.schema, schema);
    let required: Vec<&str> =
        schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else { return Vec::new() };
    properties
        .iter()
        .filter(|(name, _)| name.as_str() != RESERVED)
        .map(|(name, property)| {
            let property = resolve(&module.schema, property);
            Argument {
                name: name.clone(),
                description: property.get("description").and_then(Value::as_str).map(str::to_owned),
                required: required.contains(&name.as_str()),
                json_type: json_type(property),
            }
        })
        .collect()
}

/// A `$ref` into the module's schema document, followed once; anything
/// else as it is.
fn resolve<'a>(document: &'a Value, schema: &'a Value) -> &'a Value {
    schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix('#'))
        .and_then(|pointer| document.pointer(pointer))
        .unwrap_or(schema)
}

/// `None` when the property takes text as written (its type is or allows
/// `string`, or every value it allows is text); else the JSON type asked
/// for (`any` when the schema does not say).
fn json_type(property: &Value) -> Option<String> {
    let text_values =
        |key: &str| property.get(key).and_then(Value::as_array).is_some_and(|v| v.iter().all(Value::is_string));
    match property.get("type") {
        Some(Value::String(t)) if t == "string" => None,
        Some(Value::String(t)) => Some(t.clone()),
        Some(Value::Array(types)) if types.iter().any(|t| t == "string") => None,
        Some(Value::Array(types)) => Some(types.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" or ")),
        _ if text_values("enum") || property.get("const").is_some_and(Value::is_string) => None,
        _ => Some("any".to_owned()),
    }
}

/// `prompts/list`'s entry for a module.
pub(super) fn listing(module: &Module, description: Option<&str>) -> Value {
    let arguments: Vec<Value> = arguments(module)
        .into_iter()
        .map(|a| {
            let description = match (a.description, &a.json_type) {
                (Some(d), Some(t)) => Some(format!("{d} (JSON: {t})")),
                (None, Some(t)) => Some(format!("JSON: {t}")),
                (d, None) => d,
            };
            let mut entry = json!({"name": a.name, "required": a.required});
            if let Some(d) = description {
                entry["description"] = json!(d);
            }
            entry
        })
        .collect();
    let mut prompt = json!({"name": module.name, "arguments": arguments});
    if let Some(d) = description {
        prompt["description"] = json!(d);
    }
    prompt
}

/// The module's input made from a prompt's arguments, checked against its
/// input schema; the error names the argument.
pub(super) fn input(module: &Module, given: &Map<String, Value>) -> Result<Value, String> {
    let declared = arguments(module);
    let mut input = Map::new();
    for (name, value) in given {
        let Some(argument) = declared.iter().find(|a| a.name == *name) else {
            let names: Vec<&str> = declared.iter().map(|a| a.name.as_str()).collect();
            return Err(if names.is_empty() {
                format!("unknown argument `{name}`: prompt `{}` takes none", module.name)
            } else {
                format!("unknown argument `{name}` (arguments: {})", names.join(", "))
            });
        };
        let Value::String(text) = value else {
            return Err(format!("argument `{name}` must be a string (MCP prompt arguments are text)"));
        };
        let value = match &argument.json_type {
            None => Value::String(text.clone()),
            // Untyped: JSON when it reads as JSON, else the text itself.
            Some(t) if t == "any" => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone())),
            Some(t) => serde_json::from_str(text).map_err(|e| format!("argument `{name}` must be JSON ({t}): {e}"))?,
        };
        if module.input.is_none() {
            // The whole input, not a field of it.
            if !value.is_object() {
                return Err(format!("argument `{name}` must be a JSON object"));
            }
            return Ok(value);
        }
        input.insert(name.clone(), value);
    }
    if let Some(missing) = declared.iter().find(|a| a.required && !input.contains_key(&a.name)) {
        return Err(format!("argument `{}` is missing: prompt `{}` requires it", missing.name, module.name));
    }
    let input = Value::Object(input);
    check_input(module, &input)
        .map_err(|failure| format!("the arguments do not fit the module: {}", failure.message))?;
    Ok(input)
}

/// `prompts/get`'s result: the module's prompt rendered with `input`.
pub(super) fn render(module: &Module, input: &Value, description: Option<&str>) -> Value {
    let text = build_prompt(PromptParts {
        template: &module.prompt,
        input,
        arguments: None,
        data_schema: module.data.as_ref().map(|s| &s.schema),
        // The client's model is not handed the schema as a response format.
        include_schema: true,
    });
    let mut result = json!({"messages": [{"role": "user", "content": {"type": "text", "text": text}}]});
    if let Some(d) = description {
        result["description"] = json!(d);
    }
    result
}

#[cfg(test)]
mod tests {
    use noesis_modules::Module;
    use serde_json::json;

    use super::{Argument, arguments, input, json_type, listing, render};

    fn module(name: &str) -> Module {
        noesis_modules::search::SearchPath::default().resolve(name).unwrap().load().unwrap()
    }

    #[test]
    fn arguments_come_from_the_input_schemas_top_level_properties() {
        let m = module("meeting-details");
        assert_eq!(
            arguments(&m),
            [Argument {
                name: "message".into(),
                description: Some("A short message that sets up a meeting".into()),
                required: true,
                json_type: None,
            }]
        );
        let names: Vec<(String, bool)> =
            arguments(&module("code-simplifier")).into_iter().map(|a| (a.name, a.required)).collect();
        assert_eq!(names[0], ("code".to_owned(), true));
        assert!(names[1..].iter().all(|(_, required)| !required), "{names:?}");
        assert!(names.iter().any(|(n, _)| n == "options"), "{names:?}");
    }

    #[test]
    fn text_goes_as_written_and_other_types_as_json() {
        for (schema, expected) in [
            (json!({"type": "string"}), None),
            (json!({"type": ["string", "null"]}), None),
            (json!({"enum": ["python", "rust"]}), None),
            (json!({"const": "x"}), None),
            (json!({"type": "array"}), Some("array")),
            (json!({"type": ["integer", "null"]}), Some("integer or null")),
            (json!({"enum": [1, 2]}), Some("any")),
            (json!({}), Some("any")),
        ] {
            assert_eq!(json_type(&schema).as_deref(), expected, "{schema}");
        }
    }

    #[test]
    fn a_listing_names_each_argument_and_says_which_are_json() {
        let l = listing(&module("code-simplifier"), Some("Simplifies code"));
        assert_eq!((&l["name"], &l["description"]), (&json!("code-simplifier"), &json!("Simplifies code")));
        let options = l["arguments"].as_array().unwrap().iter().find(|a| a["name"] == "options").unwrap();
        assert_eq!(options["required"], false);
        assert_eq!(options["description"], "JSON: object", "{options}");
        assert_eq!(l["arguments"][0], json!({"name": "code", "required": true, "description": "The code to simplify"}));
    }

    #[test]
    fn input_is_checked_and_errors_name_the_argument() {
        let m = module("code-simplifier");
        let given = |v: serde_json::Value| input(&m, v.as_object().unwrap());
        assert_eq!(
            given(json!({"code": "x = 1", "options": "{\"preserve_comments\": true}"})).unwrap(),
            json!({"code": "x = 1", "options": {"preserve_comments": true}})
        );
        for (arguments, names) in [
            (json!({}), "`code` is missing"),
            (json!({"code": "x", "nope": "1"}), "`nope`"),
            (json!({"code": 3}), "`code` must be a string"),
            (json!({"code": "x", "options": "{not json"}), "`options` must be JSON (object)"),
            (json!({"code": "x", "options": "{\"preserve_comments\": 5}"}), "/options/preserve_comments"),
        ] {
            let e = given(arguments.clone()).unwrap_err();
            assert!(e.contains(names), "{arguments} → {e}");
        }
    }

    #[test]
    fn render_places_the_arguments_in_the_modules_prompt() {
        let m = module("meeting-details");
        let input = input(&m, json!({"message": "Lunch with Ada on Friday"}).as_object().unwrap()).unwrap();
        let r = render(&m, &input, Some("Meetings"));
        assert_eq!(r["description"], "Meetings");
        let messages = r["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 1);
        assert_eq!((&messages[0]["role"], &messages[0]["content"]["type"]), (&json!("user"), &json!("text")));
        let text = messages[0]["content"]["text"].as_str().unwrap();
        assert!(text.contains("Lunch with Ada on Friday"), "{text}");
        assert!(text.contains("Response format"), "the envelope instruction is part of the prompt: {text}");
        // The module's own template comes first.
        assert!(text.starts_with(m.prompt.lines().next().unwrap()), "{text}");
    }

    #[test]
    fn a_module_without_an_input_schema_takes_its_whole_input_as_json() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("module.yaml"),
            "name: free\nversion: 1.0.0\nresponsibility: anything\ntier: exec\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("prompt.md"), "Do it.\n").unwrap();
        let m = noesis_modules::load_dir(dir.path()).unwrap();
        assert!(m.input.is_none());
        let l = listing(&m, None);
        assert_eq!(l["arguments"].as_array().unwrap().len(), 1, "{l}");
        assert_eq!((&l["arguments"][0]["name"], &l["arguments"][0]["required"]), (&json!("input"), &json!(false)));
        let given = |v: serde_json::Value| input(&m, v.as_object().unwrap());
        assert_eq!(given(json!({"input": "{\"a\": [1, 2]}"})).unwrap(), json!({"a": [1, 2]}));
        assert_eq!(given(json!({})).unwrap(), json!({}), "no argument: an empty input");
        assert!(given(json!({"input": "[1]"})).unwrap_err().contains("JSON object"));
        assert!(given(json!({"input": "{nope"})).unwrap_err().contains("must be JSON (object)"));
        assert!(given(json!({"other": "x"})).unwrap_err().contains("`other`"));
    }
}
