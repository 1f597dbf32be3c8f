//! Model usage by day and provider/model, from agent runs and module runs.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use noesis_frames::CausalFrame;

use super::{esc, page};

/// Tokens and cost of the model calls of one day and one provider/model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Usage {
    /// `YYYY-MM-DD` (UTC).
    pub day: String,
    /// `provider/model` that answered.
    pub model: String,
    /// Model calls.
    pub calls: u64,
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// US dollars, as priced when the call was made.
    pub cost_usd: f64,
}

/// The usage of agent runs by day and model: each reply counts on the day
/// its run started (`started_ms`), under the model that answered it (the
/// router's "answered by" when it chose, else the run's provider and the
/// reply's model).
pub fn usage_of(runs: &[noesis_agent::AgentRun]) -> Vec<Usage> {
    let mut rows: BTreeMap<(String, String), Usage> = BTreeMap::new();
    for run in runs {
        let day = noesis_frames::Timestamp::from_millis(i64::try_from(run.started_ms).unwrap_or(i64::MAX))
            .to_string()
            .chars()
            .take(10)
            .collect::<String>();
        let provider = run.host["provider"].as_str().unwrap_or("?");
        for r in &run.replies {
            let model = r
                .route
                .as_deref()
                .and_then(|route| route.rsplit_once("answered by ").map(|(_, m)| m.to_owned()))
                .unwrap_or_else(|| format!("{provider}/{}", r.model));
            let row = rows.entry((day.clone(), model.clone())).or_insert_with(|| Usage {
                day: day.clone(),
                model,
                ..Usage::default()
            });
            row.calls += 1;
            if let Some(u) = r.usage {
                row.input_tokens += u.input_tokens;
                row.output_tokens += u.output_tokens;
            }
            row.cost_usd += r.cost_usd;
        }
    }
    rows.into_values().collect()
}

/// The usage of module runs, from their frames' `usage_total` (the run's
/// frame carries the whole run's calls), by the day the frame was made and
/// the model the envelope names.
pub fn usage_of_frames(frames: &[CausalFrame]) -> Vec<Usage> {
    let mut rows: BTreeMap<(String, String), Usage> = BTreeMap::new();
    for f in frames {
        let Ok(slice) = serde_json::from_str::<serde_json::Value>(&f.context_slice) else { continue };
        let total = &slice["usage_total"];
        if !total.is_object() {
            continue;
        }
        let day: String = f.timestamps.created_at.to_string().chars().take(10).collect();
        let model = slice["model"].as_str().unwrap_or("?").to_owned();
        let row = rows.entry((day.clone(), model.clone())).or_insert_with(|| Usage { day, model, ..Usage::default() });
        row.calls += total["calls"].as_u64().unwrap_or(0);
        row.input_tokens += total["input_tokens"].as_u64().unwrap_or(0);
        row.output_tokens += total["output_tokens"].as_u64().unwrap_or(0);
        row.cost_usd += total["cost_usd"].as_f64().unwrap_or(0.0);
    }
    rows.into_values().collect()
}

/// Rows of several sources added up by day and model.
pub fn merge_usage(parts: impl IntoIterator<Item = Vec<Usage>>) -> Vec<Usage> {
    let mut rows: BTreeMap<(String, String), Usage> = BTreeMap::new();
    for u in parts.into_iter().flatten() {
        let row = rows.entry((u.day.clone(), u.model.clone())).or_insert_with(|| Usage {
            day: u.day.clone(),
            model: u.model.clone(),
            ..Usage::default()
        });
        row.calls += u.calls;
        row.input_tokens += u.input_tokens;
        row.output_tokens += u.output_tokens;
        row.cost_usd += u.cost_usd;
    }
    rows.into_values().collect()
}

/// A bar chart as SVG (presentation attributes only: the CSP forbids
/// inline style): one stacked bar of input and output tokens per day.
fn tokens_chart(rows: &[Usage]) -> String {
    let mut days: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for r in rows {
        let d = days.entry(r.day.as_str()).or_default();
        d.0 += r.input_tokens;
        d.1 += r.output_tokens;
    }
    let top = days.values().map(|(i, o)| i + o).max().unwrap_or(0).max(1);
    let (bar, gap, height) = (28u64, 12u64, 160u64);
    let width = (bar + gap) * u64::try_from(days.len()).unwrap_or(0) + gap;
    let mut svg = format!(
        "<svg class=\"chart\" role=\"img\" aria-label=\"tokens per day\" width=\"{width}\" height=\"{}\" \
         viewBox=\"0 0 {width} {}\" xmlns=\"http://www.w3.org/2000/svg\">",
        height + 40,
        height + 40
    );
    for (k, (day, (input, output))) in days.iter().enumerate() {
        let x = gap + (bar + gap) * u64::try_from(k).unwrap_or(0);
        let hi = input * height / top;
        let ho = output * height / top;
        let _ = write!(
            svg,
            "<g><title>{} — {input} in, {output} out</title>\
             <rect x=\"{x}\" y=\"{}\" width=\"{bar}\" height=\"{hi}\" fill=\"#1d4ed8\"></rect>\
             <rect x=\"{x}\" y=\"{}\" width=\"{bar}\" height=\"{ho}\" fill=\"#93c5fd\"></rect>\
             <text x=\"{}\" y=\"{}\" font-size=\"9\" text-anchor=\"middle\">{}</text></g>",
            esc(day),
            height - hi,
            height - hi - ho,
            x + bar / 2,
            height + 14,
            esc(day.get(5..).unwrap_or(day)),
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Tokens and cost per day and per provider/model, as a chart and tables.
pub fn usage_page(rows: &[Usage]) -> String {
    let mut body = String::from("<h1>Usage</h1>");
    if rows.is_empty() {
        body.push_str(
            "<p>No model calls recorded yet (agent runs and <code>noesis solve</code>'s CODER count here).</p>",
        );
        return page("Usage", &body);
    }
    let (calls, input, output, cost) = rows
        .iter()
        .fold((0, 0, 0, 0.0), |(c, i, o, d), r| (c + r.calls, i + r.input_tokens, o + r.output_tokens, d + r.cost_usd));
    let _ = write!(
        body,
        "<p>{calls} model call(s), {input} input and {output} output tokens, ${cost:.4}.</p>\
         <h2>Tokens per day</h2><p class=\"legend\"><span class=\"in\">■</span> input \
         <span class=\"out\">■</span> output</p>{}",
        tokens_chart(rows)
    );
    let mut by_model: BTreeMap<&str, Usage> = BTreeMap::new();
    for r in rows {
        let m = by_model.entry(r.model.as_str()).or_default();
        m.calls += r.calls;
        m.input_tokens += r.input_tokens;
        m.output_tokens += r.output_tokens;
        m.cost_usd += r.cost_usd;
    }
    body.push_str(
        "<h2>By provider and model</h2><table><thead><tr><th>Model</th><th>Calls</th><th>Input</th><th>Output</th>\
         <th>Cost</th></tr></thead><tbody>",
    );
    for (model, u) in &by_model {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>${:.4}</td></tr>",
            esc(model),
            u.calls,
            u.input_tokens,
            u.output_tokens,
            u.cost_usd
        );
    }
    body.push_str(
        "</tbody></table><h2>By day</h2><table><thead><tr><th>Day</th><th>Model</th><th>Calls</th>\
                   <th>Input</th><th>Output</th><th>Cost</th></tr></thead><tbody>",
    );
    for r in rows {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>${:.4}</td></tr>",
            esc(&r.day),
            esc(&r.model),
            r.calls,
            r.input_tokens,
            r.output_tokens,
            r.cost_usd
        );
    }
    body.push_str("</tbody></table>");
    page("Usage", &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use noesis_frames::{Draft, Timestamp};

    #[test]
    fn usage_adds_up_by_day_and_model_and_charts_as_svg() {
        use noesis_agent::{AgentRun, RunConfig};
        let reply = |model: &str, input: u64, output: u64, cost: f64, route: Option<&str>| noesis_agent::ReplyRecord {
            text: String::new(),
            model: model.into(),
            tool_calls: Vec::new(),
            usage: Some(noesis_llm::Usage { input_tokens: input, output_tokens: output }),
            cost_usd: cost,
            route: route.map(str::to_owned),
            role: None,
            span: None,
        };
        let day = 86_400_000;
        let mut a = AgentRun::new("a", "t", RunConfig::default(), 20_000 * day as u64);
        a.host = serde_json::json!({"provider": "openai"});
        a.replies = vec![
            reply("gpt-4o", 100, 10, 0.01, None),
            reply("gpt-4o", 50, 5, 0.005, None),
            reply("m", 7, 1, 0.0, Some("think: rule x; answered by local/smol")),
        ];
        let mut b = AgentRun::new("b", "t", RunConfig::default(), 20_001 * day as u64);
        b.host = serde_json::json!({"provider": "openai"});
        b.replies = vec![reply("gpt-4o", 1, 1, 0.001, None)];
        let rows = usage_of(&[a, b]);
        let got: Vec<(&str, &str, u64, u64, u64)> =
            rows.iter().map(|r| (r.day.as_str(), r.model.as_str(), r.calls, r.input_tokens, r.output_tokens)).collect();
        assert_eq!(
            got,
            [
                ("2024-10-04", "local/smol", 1, 7, 1),
                ("2024-10-04", "openai/gpt-4o", 2, 150, 15),
                ("2024-10-05", "openai/gpt-4o", 1, 1, 1)
            ]
        );
        let html = usage_page(&rows);
        assert!(html.contains("4 model call(s), 158 input and 17 output tokens, $0.0160."), "{html}");
        assert_eq!(html.matches("<rect ").count(), 4, "two stacked bars, one per day");
        assert!(html.contains("<title>2024-10-04 — 157 in, 16 out</title>"), "{html}");
        assert!(!html.contains("style="), "no inline style: the CSP forbids it");
        assert!(html.contains("<td>openai/gpt-4o</td><td>3</td><td>151</td><td>16</td><td>$0.0160</td>"));
    }

    #[test]
    fn module_run_frames_add_their_whole_runs_usage_once() {
        let mk = |slice: serde_json::Value, at: i64| {
            Draft { context_slice: slice.to_string(), ..Draft::new("run") }
                .into_frame("p", None, None, Timestamp::from_millis(at))
                .unwrap()
        };
        let day = 86_400_000;
        let frames = [
            mk(
                serde_json::json!({"model": "openai/gpt-4o", "usage_total": {"calls": 2, "input_tokens": 10, "output_tokens": 4, "cost_usd": 0.5}}),
                20_000 * day,
            ),
            mk(
                serde_json::json!({"model": "openai/gpt-4o", "usage_total": {"calls": 1, "input_tokens": 1, "output_tokens": 1, "cost_usd": null}}),
                20_000 * day,
            ),
            // A step's frame has no total: not counted again.
            mk(serde_json::json!({"model": "openai/gpt-4o", "module": "child"}), 20_000 * day),
            mk(serde_json::json!("not an object"), 20_000 * day),
        ];
        let rows = usage_of_frames(&frames);
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].calls, rows[0].input_tokens, rows[0].output_tokens), (3, 11, 5));
        assert!((rows[0].cost_usd - 0.5).abs() < 1e-9);
        let merged = merge_usage([rows.clone(), rows]);
        assert_eq!((merged.len(), merged[0].calls), (1, 6));
    }
}
