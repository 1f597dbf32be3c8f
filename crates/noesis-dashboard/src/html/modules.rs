//! The module catalogue and one module with its run form.

use std::fmt::Write as _;

use super::{enc, esc, page};

/// The modules on the search path (rows as `noesis list --json` gives them).
pub fn modules_page(rows: &[serde_json::Value]) -> String {
    let mut body = String::from("<h1>Modules</h1>");
    if rows.is_empty() {
        body.push_str(
            "<p>No modules on the search path (<code>--modules DIR</code>, <code>./cognitive/modules</code>).</p>",
        );
        return page("Modules", &body);
    }
    body.push_str(
        "<table><thead><tr><th>Module</th><th>Version</th><th>Tier</th><th>What it is for</th></tr></thead><tbody>",
    );
    for r in rows {
        let name = r["name"].as_str().unwrap_or_default();
        let note = if r["valid"] == serde_json::json!(false) {
            format!(" <span class=\"why\">does not load: {}</span>", esc(r["error"].as_str().unwrap_or_default()))
        } else {
            String::new()
        };
        let _ = write!(
            body,
            "<tr><td><a href=\"/catalog/{}\">{}</a>{note}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            enc(name),
            esc(name),
            esc(r["version"].as_str().unwrap_or_default()),
            esc(r["tier"].as_str().unwrap_or_default()),
            esc(r["responsibility"].as_str().unwrap_or_default()),
        );
    }
    body.push_str("</tbody></table>");
    page("Modules", &body)
}

/// One module: its manifest summary and schemas, a form generated from its
/// input schema, and — after a run — the envelope.
pub fn module_page(
    info: &serde_json::Value,
    values: &serde_json::Map<String, serde_json::Value>,
    problem: Option<&str>,
    envelope: Option<&serde_json::Value>,
) -> String {
    let name = info["name"].as_str().unwrap_or_default();
    let mut body = format!("<h1>{}</h1>", esc(name));
    let _ = write!(
        body,
        "<dl><dt>Version</dt><dd>{}</dd><dt>Tier</dt><dd>{}</dd><dt>What it is for</dt><dd>{}</dd><dt>Where</dt><dd><code>{}</code></dd></dl>",
        esc(info["version"].as_str().unwrap_or_default()),
        esc(info["tier"].as_str().unwrap_or_default()),
        esc(info["responsibility"].as_str().unwrap_or_default()),
        esc(info["location"].as_str().unwrap_or_default()),
    );
    if let Some(env) = envelope {
        let ok = env["ok"] == serde_json::json!(true);
        let _ = write!(
            body,
            "<h2>Result {}</h2><pre class=\"pre envelope\">{}</pre>",
            if ok {
                "<span class=\"status status-completed\">ok</span>".to_owned()
            } else {
                format!(
                    "<span class=\"status status-invalidated\">{}</span>",
                    esc(env["error"]["code"].as_str().unwrap_or("failed"))
                )
            },
            esc(&serde_json::to_string_pretty(env).unwrap_or_default())
        );
    }
    let schema = &info["input_schema"];
    let _ = write!(
        body,
        "<h2>Run it</h2>{}<form class=\"run\" method=\"post\" action=\"/catalog/{}\">{}<button>Run</button></form>",
        problem.map(|p| format!("<p class=\"why\">{}</p>", esc(p))).unwrap_or_default(),
        enc(name),
        crate::form::fields(schema, values)
    );
    for (title, key) in [("Input schema", "input_schema"), ("Data schema", "data_schema")] {
        let _ = write!(
            body,
            "<details><summary>{title}</summary><pre class=\"pre\">{}</pre></details>",
            esc(&serde_json::to_string_pretty(&info[key]).unwrap_or_default())
        );
    }
    page("Module", &body)
}
