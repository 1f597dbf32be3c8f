//! Aggregating `meta.risk` from the data.

use serde_json::Value;

use crate::manifest::RiskRule;

/// Risk levels in ascending order.
pub(crate) const LEVELS: [&str; 4] = ["none", "low", "medium", "high"];

fn rank(level: &str) -> Option<usize> {
    LEVELS.iter().position(|l| *l == level)
}

/// The maximum risk of `data[key][*].risk`; an item without a valid risk
/// counts as medium, and no items at all give medium.
pub(crate) fn max_item_risk(data: &Value, key: &str) -> &'static str {
    let Some(items) = data.get(key).and_then(Value::as_array) else {
        return "medium";
    };
    if items.is_empty() {
        return "medium";
    }
    let max = items
        .iter()
        .map(|item| item.get("risk").and_then(Value::as_str).and_then(rank).unwrap_or(2))
        .max()
        .unwrap_or(2);
    LEVELS[max]
}

/// The risk a success envelope should carry.
///
/// With no declared rule the specification's default (`max_changes_risk`)
/// applies to data that has `changes`; data that only has `issues` uses
/// `max_issues_risk`; data with neither keeps the model's own risk, because
/// "no items → medium" would overwrite a meaningful answer with a constant.
pub fn aggregate(data: &Value, rule: Option<RiskRule>, model_risk: Option<&str>) -> &'static str {
    let explicit = || model_risk.and_then(rank).map_or("medium", |r| LEVELS[r]);
    match rule {
        Some(RiskRule::MaxChangesRisk) => max_item_risk(data, "changes"),
        Some(RiskRule::MaxIssuesRisk) => max_item_risk(data, "issues"),
        Some(RiskRule::Explicit | RiskRule::CustomFunction) => explicit(),
        None => {
            if data.get("changes").is_some_and(Value::is_array) {
                max_item_risk(data, "changes")
            } else if data.get("issues").is_some_and(Value::is_array) {
                max_item_risk(data, "issues")
            } else {
                explicit()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rules() {
        let d = json!({"changes": [{"risk": "low"}, {"risk": "high"}], "issues": [{"risk": "none"}]});
        assert_eq!(aggregate(&d, Some(RiskRule::MaxChangesRisk), Some("none")), "high");
        assert_eq!(aggregate(&d, Some(RiskRule::MaxIssuesRisk), Some("high")), "none");
        assert_eq!(aggregate(&d, Some(RiskRule::Explicit), Some("low")), "low");
        assert_eq!(aggregate(&d, None, Some("none")), "high");
        assert_eq!(aggregate(&json!({"issues": [{"risk": "low"}]}), None, Some("high")), "low");
        assert_eq!(aggregate(&json!({"x": 1}), None, Some("low")), "low");
        assert_eq!(aggregate(&json!({"x": 1}), None, None), "medium");
    }

    #[test]
    fn missing_and_empty_items_count_as_medium() {
        assert_eq!(max_item_risk(&json!({"changes": []}), "changes"), "medium");
        assert_eq!(max_item_risk(&json!({}), "changes"), "medium");
        assert_eq!(max_item_risk(&json!({"changes": [{"risk": "low"}, {}]}), "changes"), "medium");
        assert_eq!(max_item_risk(&json!({"changes": [{"risk": "none"}]}), "changes"), "none");
        assert_eq!(max_item_risk(&json!({"changes": [{"risk": "weird"}]}), "changes"), "medium");
    }
}
