//! What every layer says about a JSON value, in one place, so a message
//! about a wrong type reads the same whether a tool's arguments, a review
//! finding, a transcript line or a served request was at fault.
//!
//! ```
//! use serde_json::json;
//! assert_eq!(
//!     format!("the arguments must be a JSON object, not {}", noesis_json::type_name(&json!([1]))),
//!     "the arguments must be a JSON object, not an array"
//! );
//! ```

#![deny(missing_docs)]

use serde_json::Value;

pub mod delta;

/// The value's JSON type in words, with its article: `null`, `a boolean`,
/// `a number`, `a string`, `an array`, `an object`.
#[must_use]
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_type_has_its_words() {
        let cases = [
            (json!(null), "null"),
            (json!(true), "a boolean"),
            (json!(1.5), "a number"),
            (json!(-3), "a number"),
            (json!("x"), "a string"),
            (json!([]), "an array"),
            (json!({}), "an object"),
        ];
        for (v, want) in cases {
            assert_eq!(type_name(&v), want, "{v}");
        }
    }
}
