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
            let model = r.answered_by(Some(provider));
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
        // The calls its `run_module` calls made (a sub-agent's are its own
        // run's replies, counted there).
        for (model, s) in module_spends(run) {
            let row = rows.entry((day.clone(), model.clone())).or_insert_with(|| Usage {
                day: day.clone(),
                model,
                ..Usage::default()
            });
            row.calls += u64::from(s.calls);
            row.input_tokens += s.input_tokens;
            row.output_tokens += s.output_tokens;
            row.cost_usd += s.cost_usd;
        }
    }
    rows.into_values().collect()
}

/// What `run`'s own tool calls spent on models other than through a
/// sub-agent (module runs), with the model that answered.
fn module_spends(run: &noesis_agent::AgentRun) -> impl Iterator<Item = (String, &noesis_agent::ToolSpend)> {
    run.calls.iter().filter_map(|c| {
        let s = c.spent.as_ref()?;
        let sub_agent = c.evidence.iter().any(|e| matches!(e, noesis_agent::ToolEvidence::SubAgent { .. }));
        (!sub_agent).then(|| (s.model.clone().unwrap_or_else(|| "?".into()), s))
    })
}

/// Who spent: an agent run started by a person, a sub-agent, by role
/// (`plan`, `think`, `reflect`, `run_module`) and model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoleUsage {
    /// `agent` or `sub_agent`.
    pub agent: String,
    /// What the calls were for.
    pub role: String,
    /// `provider/model` that answered.
    pub model: String,
    /// Model calls.
    pub calls: u64,
    /// Input plus output tokens.
    pub tokens: u64,
    /// US dollars.
    pub cost_usd: f64,
}

/// One run tree's spend: a run a person started and its sub-agents.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TreeUsage {
    /// The run a person started.
    pub run_id: String,
    /// Sub-agent runs under it.
    pub sub_agents: u64,
    /// Model calls, the sub-agents' and module runs' included.
    pub calls: u64,
    /// Input plus output tokens.
    pub tokens: u64,
    /// US dollars.
    pub cost_usd: f64,
}

/// How many run trees the page lists, costliest first.
const TOP_TREES: usize = 20;

/// Agent runs' spend by agent kind, role and model, and the costliest run
/// trees (each sub-agent's spend counted under the run it hangs from).
pub fn attribution_of(runs: &[noesis_agent::AgentRun]) -> (Vec<RoleUsage>, Vec<TreeUsage>) {
    let mut roles: BTreeMap<(String, String, String), RoleUsage> = BTreeMap::new();
    let parent: BTreeMap<&str, &str> =
        runs.iter().filter_map(|r| Some((r.id.as_str(), r.host["parent_run"].as_str()?))).collect();
    let root_of = |id: &str| {
        let mut at = id;
        // Bounded: sub-agents nest at most a few deep, and a hand-edited
        // cycle must not hang the page.
        for _ in 0..16 {
            match parent.get(at) {
                Some(p) => at = p,
                None => break,
            }
        }
        at.to_owned()
    };
    let mut trees: BTreeMap<String, TreeUsage> = BTreeMap::new();
    for run in runs {
        let kind = if run.host["parent_run"].is_string() { "sub_agent" } else { "agent" };
        let provider = run.host["provider"].as_str().unwrap_or("?");
        let root = root_of(&run.id);
        let tree = trees.entry(root.clone()).or_insert_with(|| TreeUsage { run_id: root, ..TreeUsage::default() });
        if kind == "sub_agent" {
            tree.sub_agents += 1;
        }
        let mut add = |role: &str, model: String, calls: u64, tokens: u64, cost: f64| {
            let row = roles.entry((kind.to_owned(), role.to_owned(), model.clone())).or_insert_with(|| RoleUsage {
                agent: kind.to_owned(),
                role: role.to_owned(),
                model,
                ..RoleUsage::default()
            });
            row.calls += calls;
            row.tokens += tokens;
            row.cost_usd += cost;
            tree.calls += calls;
            tree.tokens += tokens;
            tree.cost_usd += cost;
        };
        for r in &run.replies {
            let model = r
                .route
                .as_deref()
                .and_then(|route| route.rsplit_once("answered by ").map(|(_, m)| m.to_owned()))
                .unwrap_or_else(|| format!("{provider}/{}", r.model));
            let tokens = r.usage.map_or(0, |u| u.input_tokens + u.output_tokens);
            add(r.role.as_deref().unwrap_or("think"), model, 1, tokens, r.cost_usd);
        }
        for (model, s) in module_spends(run) {
            add("run_module", model, u64::from(s.calls), s.input_tokens + s.output_tokens, s.cost_usd);
        }
    }
    let mut trees: Vec<TreeUsage> = trees.into_values().filter(|t| t.calls > 0).collect();
    trees.sort_by(|a, b| b.cost_usd.total_cmp(&a.cost_usd).then(b.tokens.cmp(&a.tokens)));
    trees.truncate(TOP_TREES);
    (roles.into_values().collect(), trees)
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

/// Tokens and cost per day and per provider/model, as a chart and tables;
/// then who spent (`roles`, `trees`: see [`attribution_of`]).
pub fn usage_page(rows: &[Usage], roles: &[RoleUsage], trees: &[TreeUsage]) -> String {
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
    if !roles.is_empty() {
        body.push_str(
            "<h2>By agent, role and model</h2><table><thead><tr><th>Agent</th><th>Role</th><th>Model</th>\
             <th>Calls</th><th>Tokens</th><th>Cost</th></tr></thead><tbody>",
        );
        for r in roles {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>${:.4}</td></tr>",
                esc(&r.agent),
                esc(&r.role),
                esc(&r.model),
                r.calls,
                r.tokens,
                r.cost_usd
            );
        }
        body.push_str("</tbody></table>");
    }
    if !trees.is_empty() {
        body.push_str(
            "<h2>Costliest runs, sub-agents included</h2><table><thead><tr><th>Run</th><th>Sub-agents</th>\
             <th>Calls</th><th>Tokens</th><th>Cost</th></tr></thead><tbody>",
        );
        for t in trees {
            let _ = write!(
                body,
                "<tr><td><a href=\"/runs/{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>${:.4}</td></tr>",
                super::enc(&t.run_id),
                esc(&t.run_id),
                t.sub_agents,
                t.calls,
                t.tokens,
                t.cost_usd
            );
        }
        body.push_str("</tbody></table>");
    }
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
        let html = usage_page(&rows, &[], &[]);
        assert!(html.contains("4 model call(s), 158 input and 17 output tokens, $0.0160."), "{html}");
        assert_eq!(html.matches("<rect ").count(), 4, "two stacked bars, one per day");
        assert!(html.contains("<title>2024-10-04 — 157 in, 16 out</title>"), "{html}");
        assert!(!html.contains("style="), "no inline style: the CSP forbids it");
        assert!(html.contains("<td>openai/gpt-4o</td><td>3</td><td>151</td><td>16</td><td>$0.0160</td>"));
    }

    #[test]
    fn spend_is_attributed_per_agent_role_and_model_and_per_run_tree() {
        use noesis_agent::{AgentRun, CallRecord, CallStatus, RunConfig, ToolEvidence, ToolSpend};
        let reply = |role: &str, tokens: u64, cost: f64| noesis_agent::ReplyRecord {
            text: String::new(),
            model: "gpt-4o".into(),
            tool_calls: Vec::new(),
            usage: Some(noesis_llm::Usage { input_tokens: tokens, output_tokens: 0 }),
            cost_usd: cost,
            route: None,
            role: Some(role.into()),
            span: None,
        };
        let call = |id: &str, spent: ToolSpend, evidence: Vec<ToolEvidence>| CallRecord {
            id: id.into(),
            turn: 0,
            tool: "t".into(),
            arguments: serde_json::json!({}),
            arguments_hash: String::new(),
            status: CallStatus::Completed,
            result: None,
            is_error: false,
            started_ms: None,
            finished_ms: None,
            evidence,
            span: None,
            spent: Some(spent),
        };
        let spend = |calls, tokens, cost, model: Option<&str>| ToolSpend {
            calls,
            input_tokens: tokens,
            output_tokens: 0,
            cost_usd: cost,
            model: model.map(str::to_owned),
        };
        let mut root = AgentRun::new("r", "t", RunConfig::default(), 0);
        root.host = serde_json::json!({"provider": "openai"});
        root.replies = vec![reply("plan", 10, 0.1), reply("think", 20, 0.2)];
        root.calls = vec![
            call("m", spend(1, 5, 0.05, Some("openai/gpt-4o-mini")), vec![]),
            // Its spend is the sub-agent run's replies, counted there.
            call("s", spend(1, 40, 0.4, None), vec![ToolEvidence::SubAgent { run_id: "r.s".into() }]),
        ];
        let mut sub = AgentRun::new("r.s", "t", RunConfig::default(), 0);
        sub.host = serde_json::json!({"provider": "openai", "parent_run": "r"});
        sub.replies = vec![reply("think", 40, 0.4)];
        let mut other = AgentRun::new("o", "t", RunConfig::default(), 0);
        other.host = serde_json::json!({"provider": "openai"});
        other.replies = vec![reply("think", 1, 0.01)];
        let runs = [root, sub, other];
        let (roles, trees) = attribution_of(&runs);
        let got: Vec<(&str, &str, &str, u64, u64)> =
            roles.iter().map(|r| (r.agent.as_str(), r.role.as_str(), r.model.as_str(), r.calls, r.tokens)).collect();
        assert_eq!(
            got,
            [
                ("agent", "plan", "openai/gpt-4o", 1, 10),
                ("agent", "run_module", "openai/gpt-4o-mini", 1, 5),
                ("agent", "think", "openai/gpt-4o", 2, 21),
                ("sub_agent", "think", "openai/gpt-4o", 1, 40),
            ]
        );
        let got: Vec<(&str, u64, u64, u64)> =
            trees.iter().map(|t| (t.run_id.as_str(), t.sub_agents, t.calls, t.tokens)).collect();
        assert_eq!(got, [("r", 1, 4, 75), ("o", 0, 1, 1)], "costliest first, the sub-agent under its root");
        // The by-day rows count the module run's calls too, once.
        let total: u64 = usage_of(&runs).iter().map(|u| u.input_tokens).sum();
        assert_eq!(total, 76);
        let html = usage_page(&usage_of(&runs), &roles, &trees);
        assert!(html.contains("<td>sub_agent</td><td>think</td><td>openai/gpt-4o</td><td>1</td><td>40</td>"), "{html}");
        assert!(
            html.contains("<a href=\"/runs/r\">r</a></td><td>1</td><td>4</td><td>75</td><td>$0.7500</td>"),
            "{html}"
        );
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
