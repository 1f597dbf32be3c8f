//! A server's resources and prompts, offered to the model as two read-only
//! tools per server: `SERVER__read_resource {uri}` (`resources/read`) and
//! `SERVER__get_prompt {name, arguments}` (`prompts/get`). Each tool's
//! description lists what there is (bounded: a long list ends with how many
//! more), so the model knows what it may ask for without a listing call.
//!
//! They are read-only by the protocol's definition of those methods, not
//! by a hint the server gives, so they need no approval even from a server
//! that is not trusted (whose process is confined all the same).

use noesis_agent::{Effects, ToolDecl};
use rmcp::model::{PaginatedRequestParams, Prompt, Resource, ResourceTemplate};
use rmcp::service::{Peer, RoleClient};
use serde_json::{Value, json};

use super::names::prefixed;

/// The tool that reads a resource (after the server's name).
pub(crate) const READ_RESOURCE: &str = "read_resource";
/// The tool that gets a prompt (after the server's name).
pub(crate) const GET_PROMPT: &str = "get_prompt";
/// Pages of a listing followed before the rest is left out (a server whose
/// cursors never end cannot hold the connection up).
const MAX_PAGES: usize = 20;
/// Entries kept of a listing.
const MAX_ENTRIES: usize = 500;
/// Characters of a tool description given to the listing.
const MAX_LISTING: usize = 2000;

/// What a server offers beside its tools.
#[derive(Debug, Clone, Default)]
pub(crate) struct Listed {
    pub(crate) resources: Option<Vec<Resource>>,
    pub(crate) templates: Vec<ResourceTemplate>,
    pub(crate) prompts: Option<Vec<Prompt>>,
}

/// Lists the resources and prompts of the server behind `peer`, each kind
/// only when the server declares it. A listing that fails leaves that kind
/// out (its tools still serve) and says why.
pub(crate) async fn list(peer: &Peer<RoleClient>, timeout: std::time::Duration) -> (Listed, Vec<String>) {
    let caps = peer.peer_info().map(|i| i.capabilities.clone()).unwrap_or_default();
    let mut listed = Listed::default();
    let mut problems = Vec::new();
    if caps.resources.is_some() {
        match tokio::time::timeout(timeout, pages(|c| peer.list_resources(c), |r| (r.resources, r.next_cursor))).await {
            Ok(Ok(r)) => listed.resources = Some(r),
            Ok(Err(e)) => problems.push(format!("listing its resources failed: {e}")),
            Err(_) => problems.push("listing its resources timed out".into()),
        }
        let templates = pages(|c| peer.list_resource_templates(c), |r| (r.resource_templates, r.next_cursor));
        match tokio::time::timeout(timeout, templates).await {
            Ok(Ok(t)) => listed.templates = t,
            // Templates are optional to a server that has resources: one
            // that has none may not answer the method at all.
            Ok(Err(_)) => {}
            Err(_) => problems.push("listing its resource templates timed out".into()),
        }
    }
    if caps.prompts.is_some() {
        match tokio::time::timeout(timeout, pages(|c| peer.list_prompts(c), |r| (r.prompts, r.next_cursor))).await {
            Ok(Ok(p)) => listed.prompts = Some(p),
            Ok(Err(e)) => problems.push(format!("listing its prompts failed: {e}")),
            Err(_) => problems.push("listing its prompts timed out".into()),
        }
    }
    (listed, problems)
}

/// Every page of a listing, following its cursors, up to the bounds.
async fn pages<R, T, F, Fut>(
    mut fetch: F,
    split: impl Fn(R) -> (Vec<T>, Option<String>),
) -> Result<Vec<T>, rmcp::service::ServiceError>
where
    F: FnMut(Option<PaginatedRequestParams>) -> Fut,
    Fut: Future<Output = Result<R, rmcp::service::ServiceError>>,
{
    let mut all = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor.take().map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let (items, next) = split(fetch(params).await?);
        all.extend(items);
        match next {
            Some(c) if !c.is_empty() && all.len() < MAX_ENTRIES => cursor = Some(c),
            _ => break,
        }
    }
    all.truncate(MAX_ENTRIES);
    Ok(all)
}

/// One line per entry until the budget is spent, then how many more.
fn bounded(lines: impl ExactSizeIterator<Item = String>) -> String {
    let total = lines.len();
    let mut out = String::new();
    for (i, line) in lines.enumerate() {
        if out.len() + line.len() > MAX_LISTING {
            out.push_str(&format!("- … and {} more\n", total - i));
            break;
        }
        out.push_str(&line);
        out.push('\n');
    }
    out
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The declaration of `SERVER__read_resource`, or none when the server
/// lists no resources and no templates.
pub(crate) fn read_resource_decl(
    server: &str,
    resources: &[Resource],
    templates: &[ResourceTemplate],
) -> Option<ToolDecl> {
    if resources.is_empty() && templates.is_empty() {
        return None;
    }
    let fixed = resources.iter().map(|r| {
        let mut line = format!("- {}", r.uri);
        let mut about: Vec<String> = vec![r.name.clone()];
        if let Some(mime) = &r.mime_type {
            about.push(mime.clone());
        }
        line.push_str(&format!(" ({})", about.join(", ")));
        if let Some(d) = r.description.as_deref().filter(|d| !d.trim().is_empty()) {
            line.push_str(&format!(": {}", one_line(d)));
        }
        line
    });
    let templated = templates.iter().map(|t| {
        let mut line = format!("- {} ({}, a template: fill in the braces)", t.uri_template, t.name);
        if let Some(d) = t.description.as_deref().filter(|d| !d.trim().is_empty()) {
            line.push_str(&format!(": {}", one_line(d)));
        }
        line
    });
    let lines: Vec<String> = fixed.chain(templated).collect();
    let description = format!(
        "Reads a resource of the MCP server `{server}` by its URI (read-only). Its resources:\n{}",
        bounded(lines.into_iter())
    );
    let parameters = json!({
        "type": "object",
        "properties": {"uri": {"type": "string", "description": "The resource's URI, as listed"}},
        "required": ["uri"],
    });
    Some(decl(server, READ_RESOURCE, &description, parameters))
}

/// The declaration of `SERVER__get_prompt`, or none when the server lists
/// no prompts.
pub(crate) fn get_prompt_decl(server: &str, prompts: &[Prompt]) -> Option<ToolDecl> {
    if prompts.is_empty() {
        return None;
    }
    let lines = prompts.iter().map(|p| {
        let args: Vec<String> = p
            .arguments
            .iter()
            .flatten()
            .map(|a| if a.required == Some(true) { a.name.clone() } else { format!("{}?", a.name) })
            .collect();
        let mut line = format!("- {}({})", p.name, args.join(", "));
        if let Some(d) = p.description.as_deref().filter(|d| !d.trim().is_empty()) {
            line.push_str(&format!(": {}", one_line(d)));
        }
        line
    });
    let description = format!(
        "Gets a prompt (instructions to follow) of the MCP server `{server}`, filled with its arguments (read-only; `?` marks an optional one). Its prompts:\n{}",
        bounded(lines)
    );
    let parameters = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "The prompt's name, as listed"},
            "arguments": {
                "type": "object",
                "description": "The prompt's arguments by name",
                "additionalProperties": {"type": "string"},
            },
        },
        "required": ["name"],
    });
    Some(decl(server, GET_PROMPT, &description, parameters))
}

fn decl(server: &str, tool: &str, description: &str, parameters: Value) -> ToolDecl {
    let mut d = ToolDecl::read_only(&prefixed(server, tool), description.trim_end(), parameters)
        .with_effects(Effects::READ_ONLY);
    d.source = Some("mcp".into());
    d
}

/// The text the model sees for a `resources/read` result: each content's
/// text, a binary one named with its type and size.
pub(crate) fn render_resource(result: &rmcp::model::ReadResourceResult) -> String {
    let contents: Vec<Value> = result.contents.iter().map(|c| serde_json::to_value(c).unwrap_or(Value::Null)).collect();
    let several = contents.len() > 1;
    let mut parts = Vec::new();
    for c in &contents {
        let uri = c["uri"].as_str().unwrap_or("?");
        let body = match (c["text"].as_str(), c["blob"].as_str()) {
            (Some(text), _) => text.to_owned(),
            (None, Some(blob)) => format!(
                "[binary resource {uri}, {}, about {} bytes]",
                c["mimeType"].as_str().unwrap_or("of unknown type"),
                blob.len() / 4 * 3
            ),
            (None, None) => c.to_string(),
        };
        parts.push(if several { format!("--- {uri}\n{body}") } else { body });
    }
    parts.join("\n")
}

/// The text the model sees for a `prompts/get` result: its description,
/// then each message as `[role] text`.
pub(crate) fn render_prompt(result: &rmcp::model::GetPromptResult) -> String {
    let value = serde_json::to_value(result).unwrap_or(Value::Null);
    let mut parts = Vec::new();
    if let Some(d) = value["description"].as_str().filter(|d| !d.trim().is_empty()) {
        parts.push(d.to_owned());
    }
    for m in value["messages"].as_array().into_iter().flatten() {
        let role = m["role"].as_str().unwrap_or("?");
        let c = &m["content"];
        let text = match c["type"].as_str() {
            Some("text") => c["text"].as_str().unwrap_or_default().to_owned(),
            Some("resource") => match c["resource"]["text"].as_str() {
                Some(t) => t.to_owned(),
                None => format!("[resource {}]", c["resource"]["uri"].as_str().unwrap_or("?")),
            },
            Some("resource_link") => format!("[resource {}]", c["uri"].as_str().unwrap_or("?")),
            Some(kind) => format!("[{kind} {}]", c["mimeType"].as_str().unwrap_or("?")),
            None => c.to_string(),
        };
        parts.push(format!("[{role}] {text}"));
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(uri: &str, name: &str, description: Option<&str>) -> Resource {
        serde_json::from_value(json!({"uri": uri, "name": name, "description": description, "mimeType": "text/plain"}))
            .unwrap()
    }

    #[test]
    fn the_listing_in_a_description_is_bounded() {
        let many: Vec<Resource> =
            (0..200).map(|i| resource(&format!("notes://{i}"), &format!("n{i}"), Some("a\n note"))).collect();
        let d = read_resource_decl("srv", &many, &[]).unwrap();
        assert_eq!(d.name, "srv__read_resource");
        assert!(d.effects.read_only() && d.idempotent && d.source.as_deref() == Some("mcp"), "{d:?}");
        assert!(d.description.contains("- notes://0 (n0, text/plain): a note\n"), "{}", d.description);
        assert!(d.description.len() < MAX_LISTING + 300, "{}", d.description.len());
        assert!(d.description.contains("more"), "{}", d.description);
        assert!(read_resource_decl("srv", &[], &[]).is_none());
        let t: ResourceTemplate =
            serde_json::from_value(json!({"uriTemplate": "notes://day/{day}", "name": "day"})).unwrap();
        let d = read_resource_decl("srv", &[], &[t]).unwrap();
        assert!(
            d.description.contains("- notes://day/{day} (day, a template: fill in the braces)"),
            "{}",
            d.description
        );
        let p: Prompt = serde_json::from_value(json!({"name": "review", "description": "Review",
            "arguments": [{"name": "path", "required": true}, {"name": "focus"}]}))
        .unwrap();
        let d = get_prompt_decl("srv", &[p]).unwrap();
        assert!(d.description.contains("- review(path, focus?): Review"), "{}", d.description);
    }
}
