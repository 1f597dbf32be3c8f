//! The pages as text: pure functions from store records to HTML. Every
//! piece of text that came from a frame, a session, a module or a model goes
//! through [`esc`]; links are built only from our own paths with their
//! parameters percent-encoded; there is no inline script or style (the
//! Content-Security-Policy forbids both).
//!
//! This file holds the pieces every page shares (escaping, links, the page
//! frame); each kind of page has a file of its own.

mod episodes;
mod frames;
mod modules;
mod runs;
mod usage;

use std::fmt::Write as _;

use noesis_frames::Status;

pub use episodes::{episode_page, episodes_page};
pub use frames::{frame_page, search_page, session_page, sessions_page, tree_html};
pub use modules::{module_page, modules_page};
pub use runs::{run_page, runs_page};
pub use usage::{RoleUsage, TreeUsage, Usage, attribution_of, merge_usage, usage_of, usage_of_frames, usage_page};

/// Text as HTML: `& < > " '` escaped, so it can go in an element or a
/// quoted attribute.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A path segment or query value, percent-encoded.
pub fn enc(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// A whole page around `body`.
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · noesis</title><link rel=\"stylesheet\" href=\"/assets/app.css\">\
         <script src=\"/assets/app.js\" defer></script></head><body>\
         <header><a class=\"brand\" href=\"/\">noesis</a> <nav><a href=\"/\">Sessions</a> \
         <a href=\"/frames\">Frames</a> <a href=\"/runs\">Agent runs</a> <a href=\"/episodes\">Episodes</a> <a href=\"/catalog\">Modules</a> <a href=\"/usage\">Usage</a></nav>{}</header><main>{body}</main></body></html>\n",
        esc(title),
        search_form("", "", "")
    )
}

fn search_form(text: &str, file: &str, status: &str) -> String {
    let mut options = String::from("<option value=\"\">any status</option>");
    for s in Status::ALL {
        let selected = if s.as_str() == status { " selected" } else { "" };
        let _ = write!(options, "<option value=\"{0}\"{selected}>{0}</option>", s.as_str());
    }
    format!(
        "<form class=\"search\" action=\"/frames\" method=\"get\">\
         <input name=\"text\" placeholder=\"text\" value=\"{}\" aria-label=\"text\">\
         <input name=\"file\" placeholder=\"file\" value=\"{}\" aria-label=\"file\">\
         <select name=\"status\" aria-label=\"status\">{options}</select><button>Search</button></form>",
        esc(text),
        esc(file)
    )
}

/// A status as a word with a colour class (never colour alone).
pub fn status_badge(status: Status) -> String {
    format!("<span class=\"status status-{0}\">{0}</span>", status.as_str())
}

fn frame_link(id: &str, label: &str) -> String {
    format!("<a href=\"/frames/{}\">{}</a>", enc(id), esc(label))
}

fn short(id: &str) -> &str {
    id.get(..13).unwrap_or(id)
}

fn clip(text: &str, n: usize) -> String {
    let one = text.replace('\n', " ");
    if one.chars().count() <= n { one } else { format!("{}…", one.chars().take(n).collect::<String>()) }
}
/// A page for what is not there.
pub fn not_found(what: &str) -> String {
    page("Not found", &format!("<h1>Not found</h1><p>{}</p>", esc(what)))
}
