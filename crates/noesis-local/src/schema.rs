//! The generation grammar: a module's JSON Schema made stricter so that what
//! the model can produce always fits the token budget.
//!
//! Everything here is pure. [`fit`] takes the schema a caller asked for and a
//! budget in tokens and returns a *stricter subset* of it — every value the
//! tightened schema accepts, the original accepts too:
//!
//! - objects that describe all their properties get `additionalProperties:
//!   false` (a small model otherwise invents keys);
//! - strings get `minLength: 1` and a `maxLength`, arrays a `maxItems`, so a
//!   reply has a worst-case length; numbers, whose digits a grammar cannot
//!   bound (`0.33333…`), become the multiples of a step between their bounds
//!   (`0.00, 0.01, …, 1.00` for a confidence) or, unbounded, integers of at
//!   most 13 digits;
//! - when even short bounds do not fit, optional properties are left out;
//! - `"x-guidance"` asks for JSON on one line, with `", "` and `": "` as
//!   separators: the layout of the examples in module prompts, which a small
//!   model follows far better than `","`/`":"`.
//!
//! The worst case is counted in characters and taken as tokens: a token is
//! at least one character of JSON for the text a model writes, so a budget
//! sized this way is not cut in the middle of a value.
//!
//! [`unsupported`] lists the keywords the constraint engine cannot express,
//! so a caller can fall back to unconstrained generation and say why.

use serde_json::{Map, Value, json};

/// Bounds applied to every string and array the schema leaves open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `maxLength` for strings (never below their `minLength`).
    pub max_string: u64,
    /// `maxItems` for arrays (never below their `minItems`), and
    /// `maxProperties` for maps.
    pub max_items: u64,
    /// Keep optional properties (when false, only required ones remain).
    pub optional: bool,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_string: 256, max_items: 5, optional: true }
    }
}

/// The result of [`fit`]: the grammar schema and what it costs.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    /// The tightened schema to compile into a grammar.
    pub schema: Value,
    /// The bounds used.
    pub limits: Limits,
    /// The longest reply the schema allows, in tokens (one per character);
    /// `None` when unbounded (recursion, a schema that allows anything).
    pub worst_case: Option<u64>,
}

impl Fitted {
    /// Whether every reply the grammar allows fits `budget` tokens.
    pub fn fits(&self, budget: u64) -> bool {
        self.worst_case.is_some_and(|w| w <= budget)
    }
}

/// Keywords the constraint engine (llguidance) does not implement. A schema
/// that uses one of them cannot be enforced while decoding.
const UNSUPPORTED: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "dependencies",
    "uniqueItems",
    "contains",
    "minContains",
    "maxContains",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "$dynamicRef",
    "$recursiveRef",
];

/// Keywords whose value is a map of name → schema.
const SCHEMA_MAPS: &[&str] = &["properties", "patternProperties", "$defs", "definitions"];
/// Keywords whose value is one schema.
const SCHEMA_ONE: &[&str] = &["additionalProperties", "additionalItems", "items", "not", "if", "then", "else"];
/// Keywords whose value is a list of schemas.
const SCHEMA_LISTS: &[&str] = &["anyOf", "oneOf", "allOf", "prefixItems", "items"];

/// Every keyword in `schema` the constraint engine cannot express, with the
/// JSON pointer where it appears (`/properties/x/not`), in document order.
pub fn unsupported(schema: &Value) -> Vec<String> {
    let mut found = Vec::new();
    walk(schema, "", &mut |node, at| {
        if let Some(obj) = node.as_object() {
            for k in UNSUPPORTED {
                if obj.contains_key(*k) {
                    found.push(format!("{at}/{k}"));
                }
            }
            if let Some(Value::String(r)) = obj.get("$ref")
                && !r.starts_with('#')
            {
                found.push(format!("{at}/$ref (`{r}`: only references inside the schema)"));
            }
        }
    });
    found
}

/// Calls `f` on every subschema of `schema` (itself included) with its
/// JSON pointer.
fn walk(schema: &Value, at: &str, f: &mut dyn FnMut(&Value, &str)) {
    f(schema, at);
    let Some(obj) = schema.as_object() else { return };
    for (k, v) in obj {
        let here = format!("{at}/{}", escape(k));
        if SCHEMA_MAPS.contains(&k.as_str()) {
            if let Some(m) = v.as_object() {
                for (name, sub) in m {
                    walk(sub, &format!("{here}/{}", escape(name)), f);
                }
            }
        } else if SCHEMA_LISTS.contains(&k.as_str()) && v.is_array() {
            for (i, sub) in v.as_array().into_iter().flatten().enumerate() {
                walk(sub, &format!("{here}/{i}"), f);
            }
        } else if SCHEMA_ONE.contains(&k.as_str()) && v.is_object() {
            walk(v, &here, f);
        }
    }
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// `schema` with `limits` applied everywhere (see the module docs).
pub fn tighten(schema: &Value, limits: Limits) -> Value {
    let mut out = tighten_node(schema, limits, false);
    if let Some(obj) = out.as_object_mut() {
        obj.insert("x-guidance".into(), layout());
    }
    out
}

/// One line, `", "` between items, `": "` after keys.
pub fn layout() -> Value {
    json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "})
}

fn types(obj: &Map<String, Value>) -> Vec<&str> {
    match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn tighten_node(schema: &Value, limits: Limits, in_all_of: bool) -> Value {
    let Some(obj) = schema.as_object() else { return schema.clone() };
    let mut out = Map::new();
    for (k, v) in obj {
        let v = match k.as_str() {
            "properties" | "patternProperties" | "$defs" | "definitions" => match v.as_object() {
                Some(m) => Value::Object(m.iter().map(|(n, s)| (n.clone(), tighten_node(s, limits, false))).collect()),
                None => v.clone(),
            },
            "anyOf" | "oneOf" | "allOf" | "prefixItems" | "items" if v.is_array() => {
                let all_of = k == "allOf";
                Value::Array(v.as_array().into_iter().flatten().map(|s| tighten_node(s, limits, all_of)).collect())
            }
            "additionalProperties" | "additionalItems" | "items" if v.is_object() => tighten_node(v, limits, false),
            _ => v.clone(),
        };
        out.insert(k.clone(), v);
    }
    let ts = types(obj);
    let fixed = obj.contains_key("enum") || obj.contains_key("const");
    let applicators = ["anyOf", "oneOf", "allOf", "$ref"].iter().any(|k| obj.contains_key(*k));
    let is_object = ts.contains(&"object") || (ts.is_empty() && obj.contains_key("properties"));
    if is_object && !fixed {
        if !limits.optional {
            drop_optional(&mut out);
        }
        let open = match obj.get("additionalProperties") {
            None | Some(Value::Bool(true)) => true,
            Some(_) => false,
        };
        let has_pattern = obj.contains_key("patternProperties");
        // A node with applicators, or one part of an allOf, describes only
        // some of the properties: closing it would reject the rest.
        if open && !has_pattern && !applicators && !in_all_of {
            out.insert("additionalProperties".into(), json!(false));
        }
        let map_like = out.get("additionalProperties").is_some_and(Value::is_object) || has_pattern;
        if map_like {
            bound(&mut out, "maxProperties", "minProperties", limits.max_items);
        }
    }
    if (ts.contains(&"string") || (ts.is_empty() && (obj.contains_key("maxLength") || obj.contains_key("pattern"))))
        && !fixed
    {
        if !obj.contains_key("minLength") {
            out.insert("minLength".into(), json!(1));
        }
        bound(&mut out, "maxLength", "minLength", limits.max_string);
    }
    if ts.contains(&"array") && !fixed {
        bound(&mut out, "maxItems", "minItems", limits.max_items);
    }
    // JSON numbers have no length limit a grammar can take from the schema
    // (`0.3333…` is valid to any length): bound them by value instead.
    if ts == ["number"] && !fixed && !obj.contains_key("multipleOf") {
        bound_number(&mut out);
    } else if ts.contains(&"integer") && !fixed {
        bound_integer(&mut out);
    }
    Value::Object(out)
}

/// Largest magnitude given to an integer without bounds.
const INT_LIMIT: i64 = 1_000_000_000_000;
/// Most values a bounded number is enumerated into.
const NUMBER_VALUES: i64 = 1001;

/// A bound: the value and whether it is included.
type Bound = Option<(f64, bool)>;

/// The lower and upper bounds of a number schema.
fn bounds(obj: &Map<String, Value>) -> (Bound, Bound) {
    let num = |k: &str| obj.get(k).and_then(Value::as_f64);
    let lo = match (num("minimum"), num("exclusiveMinimum")) {
        (Some(a), Some(b)) if b >= a => Some((b, false)),
        (Some(a), _) => Some((a, true)),
        (None, Some(b)) => Some((b, false)),
        (None, None) => None,
    };
    let hi = match (num("maximum"), num("exclusiveMaximum")) {
        (Some(a), Some(b)) if b <= a => Some((b, false)),
        (Some(a), _) => Some((a, true)),
        (None, Some(b)) => Some((b, false)),
        (None, None) => None,
    };
    (lo, hi)
}

/// An integer gets both bounds, so its digits are bounded: a missing or
/// wider bound becomes ±10¹² unless that would leave nothing between them
/// (a range wholly beyond ±10¹² keeps its own near bound and gets a far one
/// 10¹² away). Every value still satisfies the original bounds.
#[allow(clippy::cast_precision_loss)]
fn bound_integer(obj: &mut Map<String, Value>) {
    let (lo, hi) = bounds(obj);
    let limit = INT_LIMIT as f64;
    // The least and greatest integers the bounds allow (beyond 2^53 every
    // double is an integer, hence `next_up`/`next_down`).
    let lo_v = lo.map(|(v, incl)| if incl { v.ceil() } else { (v.floor() + 1.0).max(v.next_up()) });
    let hi_v = hi.map(|(v, incl)| if incl { v.floor() } else { (v.ceil() - 1.0).min(v.next_down()) });
    let new_lo = match (lo_v, hi_v) {
        (None, Some(h)) if h < -limit => Some((h - limit).min(h.next_down()).max(f64::MIN)),
        (None, _) => Some(-limit),
        (Some(l), h) if l < -limit && h.is_none_or(|h| h >= -limit) => Some(-limit),
        _ => None,
    };
    let new_hi = match (lo_v, hi_v) {
        (Some(l), None) if l > limit => Some((l + limit).max(l.next_up()).min(f64::MAX)),
        (_, None) => Some(limit),
        (l, Some(h)) if h > limit && l.is_none_or(|l| l <= limit) => Some(limit),
        _ => None,
    };
    if let Some(v) = new_lo {
        obj.remove("exclusiveMinimum");
        obj.insert("minimum".into(), number(v));
    }
    if let Some(v) = new_hi {
        obj.remove("exclusiveMaximum");
        obj.insert("maximum".into(), number(v));
    }
}

/// `v` as JSON: an integer when it is one that `i64` holds exactly.
#[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
fn number(v: f64) -> Value {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    if v.fract() == 0.0 && v.abs() <= EXACT { json!(v as i64) } else { json!(v) }
}

/// Whether `v` lies within the bounds.
fn within(v: f64, lo: (f64, bool), hi: (f64, bool)) -> bool {
    (if lo.1 { v >= lo.0 } else { v > lo.0 }) && (if hi.1 { v <= hi.0 } else { v < hi.0 })
}

/// The multiples of `10^p` within the bounds, if there are at most
/// [`NUMBER_VALUES`] of them. All arithmetic is on `f64` (huge bounds such
/// as `-1e20` are common in real schemas and overflow integer steps), and
/// every value is checked against the bounds after rounding.
#[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
fn multiples(lo: (f64, bool), hi: (f64, bool), p: i32) -> Option<Vec<Value>> {
    // Dividing by 10^-p gives the nearest double to a decimal like 0.07.
    let at = |k: f64| if p < 0 { k / 10f64.powi(-p) } else { k * 10f64.powi(p) };
    let step = at(1.0);
    let (k0, k1) = ((lo.0 / step).ceil(), (hi.0 / step).floor());
    if !(k0.is_finite() && k1.is_finite()) || k1 - k0 >= NUMBER_VALUES as f64 + 2.0 {
        return None;
    }
    let count = (k1 - k0).max(-1.0) as i64 + 1;
    let values: Vec<Value> = (0..count)
        .map(|i| at(k0 + i as f64))
        .filter(|&v| within(v, lo, hi))
        .map(|v| if p < 0 { json!(v) } else { number(v) })
        .collect();
    (values.len() as i64 <= NUMBER_VALUES).then_some(values)
}

/// Step exponents tried first: from 0.01 up to the largest doubles.
const STEPS: std::ops::RangeInclusive<i32> = -2..=308;
/// Finer steps, for ranges too narrow to hold a multiple of 0.01.
const FINE_STEPS: std::ops::RangeInclusive<i32> = -9..=-3;

/// A number between two bounds becomes the multiples of the finest step
/// (0.01, 0.1, 1, 10, …) that gives at most [`NUMBER_VALUES`] of them (finer
/// steps, or a bound itself, when the range is narrower than 0.01); a number
/// without both bounds becomes a bounded integer. Both are values the
/// original schema accepts.
fn bound_number(obj: &mut Map<String, Value>) {
    let (lo, hi) = bounds(obj);
    if let (Some(lo), Some(hi)) = (lo, hi) {
        let nonempty = |vs: &Vec<Value>| !vs.is_empty();
        let found = STEPS
            .filter_map(|p| multiples(lo, hi, p))
            .find(nonempty)
            .or_else(|| FINE_STEPS.rev().filter_map(|p| multiples(lo, hi, p)).find(nonempty))
            .or_else(|| {
                let mid = lo.0 / 2.0 + hi.0 / 2.0;
                [lo.0, hi.0, mid].into_iter().find(|&v| within(v, lo, hi)).map(|v| vec![number(v)])
            });
        if let Some(values) = found {
            obj.insert("enum".into(), Value::Array(values));
            return;
        }
    }
    obj.insert("type".into(), json!("integer"));
    bound_integer(obj);
}

/// Sets `max` to at most `limit` (and never below `min`).
fn bound(obj: &mut Map<String, Value>, max: &str, min: &str, limit: u64) {
    let lo = obj.get(min).and_then(Value::as_u64).unwrap_or(0);
    let limit = limit.max(lo);
    let current = obj.get(max).and_then(Value::as_u64);
    if current.is_none_or(|c| c > limit) {
        obj.insert(max.into(), json!(limit));
    }
}

fn drop_optional(obj: &mut Map<String, Value>) {
    let required: Vec<String> = obj
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect();
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        props.retain(|k, _| required.contains(k));
    }
}

/// The longest JSON text (in characters) `schema` allows; `None` when
/// unbounded. Local `$ref`s (`#/…`) are followed against `root`.
pub fn worst_case(schema: &Value) -> Option<u64> {
    worst(schema, schema, 0)
}

fn json_len(v: &Value) -> u64 {
    v.to_string().chars().count() as u64
}

fn digits(n: f64) -> u64 {
    format!("{}", n.abs().trunc()).len() as u64
}

fn worst(schema: &Value, root: &Value, depth: u32) -> Option<u64> {
    if depth > 64 {
        return None;
    }
    let obj = match schema {
        Value::Bool(false) => return Some(0),
        Value::Object(o) => o,
        _ => return None,
    };
    if let Some(c) = obj.get("const") {
        return Some(json_len(c));
    }
    if let Some(Value::Array(e)) = obj.get("enum") {
        return e.iter().map(json_len).max();
    }
    if let Some(Value::String(r)) = obj.get("$ref") {
        let target = r.strip_prefix('#').and_then(|p| root.pointer(p))?;
        return worst(target, root, depth + 1);
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(branches)) = obj.get(key) {
            let mut most = 0;
            for b in branches {
                most = most.max(worst(b, root, depth + 1)?);
            }
            return Some(most);
        }
    }
    if let Some(Value::Array(parts)) = obj.get("allOf") {
        // The intersection is no longer than its shortest bounded part.
        return parts.iter().filter_map(|p| worst(p, root, depth + 1)).min();
    }
    let ts = types(obj);
    let mut most: Option<u64> = None;
    let mut take = |v: Option<u64>| -> Option<()> {
        most = Some(most.unwrap_or(0).max(v?));
        Some(())
    };
    let mut any_type = false;
    if ts.contains(&"object") || (ts.is_empty() && obj.contains_key("properties")) {
        any_type = true;
        take(worst_object(obj, root, depth))?;
    }
    if ts.contains(&"array") {
        any_type = true;
        let n = obj.get("maxItems").and_then(Value::as_u64);
        let prefix: Vec<&Value> = obj.get("prefixItems").and_then(Value::as_array).into_iter().flatten().collect();
        let mut total = 2;
        for p in &prefix {
            total += worst(p, root, depth + 1)? + 2;
        }
        let rest = match obj.get("items") {
            Some(Value::Bool(false)) => 0,
            Some(items) if items.is_object() => {
                let n = n?.saturating_sub(prefix.len() as u64);
                n * (worst(items, root, depth + 1)? + 2)
            }
            _ if n == Some(prefix.len() as u64) => 0,
            _ => return None,
        };
        take(Some(total + rest))?;
    }
    if ts.contains(&"string") {
        any_type = true;
        take(obj.get("maxLength").and_then(Value::as_u64).map(|n| n + 2))?;
    }
    if ts.contains(&"integer") {
        any_type = true;
        let (lo, hi) = bounds(obj);
        take(lo.zip(hi).map(|((lo, _), (hi, _))| digits(lo).max(digits(hi)) + 1))?;
    }
    if ts.contains(&"number") {
        // Unbounded digits: only an enumeration (above) is bounded.
        return None;
    }
    if ts.contains(&"boolean") {
        any_type = true;
        take(Some(5))?;
    }
    if ts.contains(&"null") {
        any_type = true;
        take(Some(4))?;
    }
    if !any_type {
        return None;
    }
    most
}

fn worst_object(obj: &Map<String, Value>, root: &Value, depth: u32) -> Option<u64> {
    let mut total = 2u64;
    if let Some(Value::Object(props)) = obj.get("properties") {
        for (k, v) in props {
            total += json_len(&json!(k)) + 2 + worst(v, root, depth + 1)? + 2;
        }
    }
    match obj.get("additionalProperties") {
        Some(Value::Bool(false)) => {}
        Some(extra @ Value::Object(_)) => {
            let n = obj.get("maxProperties").and_then(Value::as_u64)?;
            // A key is a string no longer than the longest string bound.
            let key = 256 + 4;
            total += n * (key + worst(extra, root, depth + 1)? + 2);
        }
        _ => return None,
    }
    Some(total)
}

/// The loosest bounds under which every reply `schema` allows fits `budget`
/// tokens, starting from `start`: strings are shortened first, then lists,
/// then optional properties are dropped. When nothing fits, the tightest
/// schema is returned and [`Fitted::fits`] says so.
pub fn fit(schema: &Value, budget: u64, start: Limits) -> Fitted {
    let mut limits = start;
    loop {
        let tight = tighten(schema, limits);
        let worst_case = worst_case(&tight);
        let fitted = Fitted { schema: tight, limits, worst_case };
        if fitted.fits(budget) {
            return fitted;
        }
        // Unbounded stays unbounded whatever the limits.
        if worst_case.is_none() {
            return fitted;
        }
        let l = limits.max_string;
        if l > 128 {
            limits.max_string = (l * 3 / 4).max(128);
        } else if limits.max_items > 3 {
            limits.max_items -= 1;
        } else if limits.optional {
            limits.optional = false;
        } else if l > 32 {
            limits.max_string = (l * 3 / 4).max(32);
        } else if limits.max_items > 1 {
            limits.max_items -= 1;
        } else if l > 8 {
            limits.max_string = (l * 3 / 4).max(8);
        } else {
            return fitted;
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn t(schema: Value) -> Value {
        let mut out = tighten(&schema, Limits { max_string: 10, max_items: 2, optional: true });
        out.as_object_mut().unwrap().remove("x-guidance");
        out
    }

    #[test]
    fn closes_objects_that_list_their_properties() {
        assert_eq!(
            t(json!({"type": "object", "properties": {"a": {"type": "boolean"}}})),
            json!({"type": "object", "properties": {"a": {"type": "boolean"}}, "additionalProperties": false})
        );
        // Not when they are only part of the picture.
        let root = json!({"type": "object", "oneOf": [{"type": "object", "properties": {}}]});
        assert_eq!(
            t(root),
            json!({"type": "object", "oneOf": [{"type": "object", "properties": {}, "additionalProperties": false}]})
        );
        let all = json!({"allOf": [{"type": "object", "properties": {"a": {"type": "null"}}}]});
        assert_eq!(t(all.clone()), all);
        // A map keeps its value schema and gets a size bound.
        assert_eq!(
            t(json!({"type": "object", "additionalProperties": {"type": "null"}})),
            json!({"type": "object", "additionalProperties": {"type": "null"}, "maxProperties": 2})
        );
    }

    #[test]
    fn bounds_strings_and_arrays_but_keeps_tighter_and_minimum_bounds() {
        assert_eq!(t(json!({"type": "string"})), json!({"type": "string", "minLength": 1, "maxLength": 10}));
        assert_eq!(
            t(json!({"type": "string", "maxLength": 3})),
            json!({"type": "string", "maxLength": 3, "minLength": 1})
        );
        assert_eq!(
            t(json!({"type": "string", "minLength": 40})),
            json!({"type": "string", "minLength": 40, "maxLength": 40})
        );
        assert_eq!(t(json!({"type": "string", "enum": ["a"]})), json!({"type": "string", "enum": ["a"]}));
        assert_eq!(
            t(json!({"type": "array", "items": {"type": "string"}})),
            json!({"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 10}, "maxItems": 2})
        );
        assert_eq!(t(json!({"type": "array", "minItems": 4})), json!({"type": "array", "minItems": 4, "maxItems": 4}));
        assert_eq!(
            t(json!({"$defs": {"x": {"type": ["string", "null"]}}})),
            json!({"$defs": {"x": {"type": ["string", "null"], "minLength": 1, "maxLength": 10}}})
        );
    }

    #[test]
    fn numbers_become_bounded_values_the_original_accepts() {
        let e = |s: Value| t(s)["enum"].as_array().unwrap().clone();
        let conf = e(json!({"type": "number", "minimum": 0, "maximum": 1}));
        assert_eq!((conf.len(), &conf[0], &conf[7], &conf[100]), (101, &json!(0.0), &json!(0.07), &json!(1.0)));
        let score = e(json!({"type": "number", "minimum": 0, "maximum": 100}));
        assert_eq!((score.len(), &score[1], &score[1000]), (1001, &json!(0.1), &json!(100.0)));
        let wide = e(json!({"type": "number", "exclusiveMinimum": 0, "maximum": 5000}));
        assert_eq!((wide.len(), &wide[0], wide.last().unwrap()), (500, &json!(10), &json!(5000)));
        assert_eq!(
            t(json!({"type": "number", "minimum": 2})),
            json!({"type": "integer", "minimum": 2, "maximum": 1_000_000_000_000i64})
        );
        assert_eq!(
            t(json!({"type": "integer", "maximum": 7})),
            json!({"type": "integer", "maximum": 7, "minimum": -1_000_000_000_000i64})
        );
        // Nothing between the bounds: left for the grammar compiler to refuse.
        assert_eq!(t(json!({"type": "number", "minimum": 1, "maximum": 0}))["type"], "integer");
        // A worst case now exists.
        assert_eq!(worst_case(&t(json!({"type": "number", "minimum": 0, "maximum": 1}))), Some(4));
        assert_eq!(worst_case(&t(json!({"type": "number"}))), Some(14));
    }

    #[test]
    fn huge_and_narrow_bounds_still_leave_values_the_original_accepts() {
        // A real-world bound that overflowed the integer step arithmetic.
        let huge = t(json!({"type": "number", "minimum": -1e20, "maximum": 1e20}));
        let values = huge["enum"].as_array().unwrap();
        assert_eq!((values.len(), &values[0], &values[100]), (201, &json!(-1e20), &json!(0)));
        assert_eq!(
            t(json!({"type": "number", "minimum": -1e20})),
            json!({"type": "integer", "minimum": -1_000_000_000_000i64, "maximum": 1_000_000_000_000i64})
        );
        // Wholly beyond ±10¹²: keeps its own bound instead of an empty range.
        assert_eq!(
            t(json!({"type": "integer", "minimum": 1e15})),
            json!({"type": "integer", "minimum": 1e15, "maximum": 1_000_000_000_000_000i64 + 1_000_000_000_000})
        );
        assert_eq!(t(json!({"type": "number", "minimum": 0.001, "maximum": 0.002}))["enum"], json!([0.001, 0.002]));
        assert_eq!(
            t(json!({"type": "number", "minimum": 0.1234567891, "maximum": 0.1234567891}))["enum"],
            json!([0.1234567891])
        );
    }

    fn bound_value() -> impl Strategy<Value = Option<(f64, bool)>> {
        let magnitude = prop_oneof![
            -5.0f64..5.0,
            -1e4f64..1e4,
            (-20i32..=20).prop_map(|e| 10f64.powi(e)),
            (-20i32..=20).prop_map(|e| -(10f64.powi(e))),
            Just(1e300),
            Just(-1e300),
            Just(f64::MAX),
            Just(f64::MIN),
            Just(0.0),
        ];
        proptest::option::of((magnitude, any::<bool>()))
    }

    fn with_bounds(ty: &str, lo: Option<(f64, bool)>, hi: Option<(f64, bool)>) -> Value {
        let mut s = json!({"type": ty});
        if let Some((v, incl)) = lo {
            s[if incl { "minimum" } else { "exclusiveMinimum" }] = json!(v);
        }
        if let Some((v, incl)) = hi {
            s[if incl { "maximum" } else { "exclusiveMaximum" }] = json!(v);
        }
        s
    }

    proptest! {
        /// Whatever the bounds, tightening does not panic; when the original
        /// accepts some value, the tightened schema accepts at least one,
        /// every one it lists is accepted by the original, and its worst
        /// case is bounded.
        #[test]
        fn prop_number_bounds_fit_and_stay_a_subset(
            lo in bound_value(), hi in bound_value(), integer in any::<bool>()
        ) {
            let original = with_bounds(if integer { "integer" } else { "number" }, lo, hi);
            let tight = t(original.clone());
            prop_assert!(worst_case(&tight).is_some(), "{tight}");
            let accepts = |v: &Value| jsonschema::is_valid(&original, v);
            if let Some(values) = tight["enum"].as_array() {
                prop_assert!(values.len() as i64 <= NUMBER_VALUES);
                for v in values {
                    prop_assert!(accepts(v), "{v} from {tight} is refused by {original}");
                }
            }
            // The least and greatest doubles the original accepts.
            let lo_v = lo.map_or(f64::MIN, |(v, incl)| if incl { v } else { v.next_up() });
            let hi_v = hi.map_or(f64::MAX, |(v, incl)| if incl { v } else { v.next_down() });
            let some_number = lo_v.is_finite() && hi_v.is_finite() && lo_v <= hi_v;
            let integers_between = some_number && (hi_v.floor() - lo_v.ceil()) >= 2.0;
            if (integer && integers_between) || (!integer && some_number) {
                let witness = match tight["enum"].as_array() {
                    Some(values) => {
                        prop_assert!(!values.is_empty(), "{tight}");
                        values[0].clone()
                    }
                    None => {
                        // The smallest integer the tightened bounds allow.
                        let low = match (tight["minimum"].as_f64(), tight["exclusiveMinimum"].as_f64()) {
                            (Some(m), _) => m.ceil(),
                            (None, Some(m)) => (m.floor() + 1.0).max(m.next_up()),
                            (None, None) => f64::NAN,
                        };
                        let w = number(low);
                        prop_assert!(jsonschema::is_valid(&tight, &w), "{w} is refused by {tight}");
                        w
                    }
                };
                prop_assert!(accepts(&witness), "{witness} from {tight} is refused by {original}");
            }
        }
    }

    #[test]
    fn asks_for_one_line_with_spaced_separators() {
        assert_eq!(tighten(&json!({}), Limits::default())["x-guidance"], layout());
    }

    #[test]
    fn worst_case_counts_every_character() {
        for (schema, want) in [
            (json!({"type": "boolean"}), Some(5)),
            (json!({"enum": ["ab", 1234]}), Some(4)),
            (json!({"const": {"a": 1}}), Some(7)),
            (json!({"type": "string", "maxLength": 3}), Some(5)),
            (json!({"type": "string"}), None),
            (json!({"type": "integer", "minimum": 0, "maximum": 100}), Some(4)),
            (json!({"type": "integer"}), None),
            (json!({"type": "number", "minimum": 0, "maximum": 1}), None),
            (json!({"type": ["string", "null"], "maxLength": 1}), Some(4)),
            // {"a": false, } — a separator counted after every property.
            (
                json!({"type": "object", "properties": {"a": {"type": "boolean"}}, "additionalProperties": false}),
                Some(14),
            ),
            (json!({"type": "object", "properties": {}}), None),
            // [x, x, ] with x = "ab"
            (json!({"type": "array", "items": {"enum": ["ab"]}, "maxItems": 2}), Some(2 + 2 * 6)),
            (json!({"type": "array", "items": {"enum": ["ab"]}}), None),
            (json!({"oneOf": [{"const": 1}, {"const": 12345}]}), Some(5)),
            (json!({"$defs": {"b": {"type": "boolean"}}, "$ref": "#/$defs/b"}), Some(5)),
            (json!({"$defs": {"r": {"$ref": "#/$defs/r"}}, "$ref": "#/$defs/r"}), None),
            (json!({}), None),
        ] {
            assert_eq!(worst_case(&schema), want, "{schema}");
        }
    }

    #[test]
    fn fit_shrinks_until_the_worst_case_fits() {
        let schema = json!({
            "type": "object",
            "required": ["a"],
            "properties": {
                "a": {"type": "string"},
                "b": {"type": "array", "items": {"type": "string"}}
            }
        });
        let roomy = fit(&schema, 100_000, Limits::default());
        assert_eq!(roomy.limits, Limits::default());
        assert!(roomy.fits(100_000));
        let tight = fit(&schema, 120, Limits::default());
        assert!(tight.fits(120), "{tight:?}");
        assert!(tight.limits.max_string < 256);
        // Nothing fits a budget below the skeleton: the tightest is returned.
        let none = fit(&schema, 5, Limits::default());
        assert!(!none.fits(5));
        assert_eq!(none.limits, Limits { max_string: 8, max_items: 1, optional: false });
        assert!(none.schema["properties"].get("b").is_none());
    }

    #[test]
    fn finds_what_the_engine_cannot_express() {
        let schema = json!({
            "type": "object",
            "properties": {"a": {"not": {"type": "null"}}, "b": {"type": "array", "uniqueItems": true}},
            "$defs": {"x": {"if": {}, "then": {}}},
            "oneOf": [{"$ref": "other.json#/a"}]
        });
        assert_eq!(
            unsupported(&schema),
            vec![
                "/properties/a/not",
                "/properties/b/uniqueItems",
                "/$defs/x/if",
                "/$defs/x/then",
                "/oneOf/0/$ref (`other.json#/a`: only references inside the schema)",
            ]
        );
        assert!(unsupported(&json!({"type": "object", "properties": {"not": {"type": "string"}}})).is_empty());
    }
}
