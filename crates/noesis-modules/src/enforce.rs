//! Policies and tools: what a module may do against what its host grants,
//! each refusal an E4007 PERMISSION_DENIED that names the policy or tool.
//!
//! Safe by default: a host grants nothing unless told, a policy a module
//! leaves out is `deny`, and `tools.policy` defaults to `deny_by_default`
//! (the official schema's defaults). Pure functions: the runtime applies
//! them before any provider call and to the tool calls of a reply.

use std::collections::BTreeSet;

use serde_json::json;

use crate::code::ErrorCode;
use crate::envelope::Failure;
use crate::manifest::{Manifest, Tools};

/// The capabilities the specification names under `policies`; modules may
/// add their own (the schema allows any key with `allow|deny`).
pub const CAPABILITIES: [&str; 4] = ["network", "filesystem_write", "side_effects", "code_execution"];

/// The policies a module sets to `allow`, by name.
pub fn allowed_policies(manifest: &Manifest) -> Vec<&str> {
    manifest.policies.iter().filter(|(_, v)| v.as_str() == "allow").map(|(k, _)| k.as_str()).collect()
}

/// A module may run only if the host grants every policy it sets to
/// `allow`.
///
/// # Errors
/// E4007 naming every policy the host has not granted and how to grant it.
pub fn check_policies(manifest: &Manifest, granted: &[String]) -> Result<(), Box<Failure>> {
    let missing: Vec<&str> =
        allowed_policies(manifest).into_iter().filter(|p| !granted.iter().any(|g| g == p)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let list = missing.iter().map(|p| format!("`{p}: allow`")).collect::<Vec<_>>().join(", ");
    let names = missing.join(",");
    let quoted = missing.iter().map(|p| format!("\"{p}\"")).collect::<Vec<_>>().join(", ");
    Err(Box::new(
        Failure::new(
            ErrorCode::E4007,
            format!("module {} needs {list}, which the host has not granted", manifest.name),
        )
        .details(json!({"policies": missing, "granted": granted}))
        .suggest(format!(
            "grant it if you trust the module: `noesis run --allow {names}`, or `[policies] allow = [{quoted}]` in noesis.toml"
        )),
    ))
}

/// Why a module's `tools` section refuses a tool, or `None` when it permits
/// it. A tool in `denied` is refused under either policy; under
/// `deny_by_default` (the default) only `allowed` tools are permitted.
pub fn tool_refusal(tools: Option<&Tools>, tool: &str) -> Option<&'static str> {
    let empty = Tools::default();
    let t = tools.unwrap_or(&empty);
    if t.denied.iter().any(|d| d == tool) {
        return Some("it is in tools.denied");
    }
    if allow_by_default(t) || t.allowed.iter().any(|a| a == tool) {
        return None;
    }
    Some(if tools.is_none() {
        "the module declares no tools (deny_by_default)"
    } else {
        "it is not in tools.allowed (deny_by_default)"
    })
}

fn allow_by_default(t: &Tools) -> bool {
    t.policy.as_deref() == Some("allow_by_default")
}

/// Every tool the caller offers must be one the module permits.
///
/// # Errors
/// E4007 naming the first refused tool and why.
pub fn check_offered_tools(manifest: &Manifest, offered: &[String]) -> Result<(), Box<Failure>> {
    for tool in offered {
        if let Some(why) = tool_refusal(manifest.tools.as_ref(), tool) {
            return Err(Box::new(
                Failure::new(
                    ErrorCode::E4007,
                    format!("tool `{tool}` is not permitted for module {}: {why}", manifest.name),
                )
                .details(json!({"tool": tool, "reason": why}))
                .suggest(format!("do not offer `{tool}` to this module, or change its tools section")),
            ));
        }
    }
    Ok(())
}

/// Every tool a reply calls must be one the module permits and the caller
/// offered: the runtime executes no tool it was not given.
///
/// # Errors
/// E4007 naming the first tool called out of bounds.
pub fn check_tool_calls(manifest: &Manifest, offered: &[String], called: &[&str]) -> Result<(), Box<Failure>> {
    for tool in called {
        let why = match tool_refusal(manifest.tools.as_ref(), tool) {
            Some(why) => format!("module {} does not permit it: {why}", manifest.name),
            None if !offered.iter().any(|o| o == tool) => "the caller did not offer it".to_owned(),
            None => continue,
        };
        return Err(Box::new(
            Failure::new(ErrorCode::E4007, format!("the model called tool `{tool}`, and {why}"))
                .details(json!({"tool": tool, "offered": offered})),
        ));
    }
    Ok(())
}

/// What a module's tools section permits, as a set.
enum Permitted {
    /// Only these names.
    Only(BTreeSet<String>),
    /// Every name but these.
    AllExcept(BTreeSet<String>),
}

fn permitted(tools: Option<&Tools>) -> Permitted {
    let empty = Tools::default();
    let t = tools.unwrap_or(&empty);
    let denied: BTreeSet<String> = t.denied.iter().cloned().collect();
    if allow_by_default(t) {
        Permitted::AllExcept(denied)
    } else {
        Permitted::Only(t.allowed.iter().filter(|a| !denied.contains(*a)).cloned().collect())
    }
}

/// A child module (composition, `@call`) may not be allowed what its parent
/// is denied: every policy the child sets to `allow` the parent allows too,
/// and every tool the child permits the parent permits.
///
/// # Errors
/// E4007 naming the first policy or tool the child would gain.
#[allow(clippy::result_large_err)] // the composition engine's signature
pub fn child_within(parent: &Manifest, child: &Manifest) -> Result<(), Failure> {
    let deny = |what: String, details: serde_json::Value| {
        Err(Failure::new(ErrorCode::E4007, format!("module {} may not call {}: {what}", parent.name, child.name))
            .details(details))
    };
    for p in allowed_policies(child) {
        if parent.policies.get(p).map(String::as_str) != Some("allow") {
            return deny(
                format!("the child allows `{p}`, which the parent denies"),
                json!({"policy": p, "parent": parent.name, "child": child.name}),
            );
        }
    }
    let gained: Option<String> = match (permitted(parent.tools.as_ref()), permitted(child.tools.as_ref())) {
        (Permitted::Only(p), Permitted::Only(c)) => c.difference(&p).next().map(|t| format!("tool `{t}`")),
        (Permitted::AllExcept(p), Permitted::Only(c)) => c.intersection(&p).next().map(|t| format!("tool `{t}`")),
        (Permitted::AllExcept(p), Permitted::AllExcept(c)) => p.difference(&c).next().map(|t| format!("tool `{t}`")),
        (Permitted::Only(_), Permitted::AllExcept(_)) => {
            Some("every tool (allow_by_default) where the parent permits only its allowed list".to_owned())
        }
    };
    match gained {
        Some(what) => deny(
            format!("the child permits {what}, which the parent denies"),
            json!({"tools": what, "parent": parent.name, "child": child.name}),
        ),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn m(v: Value) -> Manifest {
        let mut base = json!({"name": "m"});
        base.as_object_mut().unwrap().extend(v.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    fn granted(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn policies_need_a_grant() {
        let module = m(json!({"policies": {"network": "allow", "side_effects": "allow", "filesystem_write": "deny"}}));
        let e = check_policies(&module, &[]).unwrap_err();
        assert_eq!(e.code, ErrorCode::E4007);
        assert!(e.message.contains("`network: allow`") && e.message.contains("`side_effects: allow`"), "{}", e.message);
        let s = e.suggestion.unwrap();
        assert!(s.contains("--allow network,side_effects") && s.contains("[policies] allow"), "{s}");
        let e = check_policies(&module, &granted(&["network"])).unwrap_err();
        assert!(!e.message.contains("network") && e.message.contains("side_effects"));
        assert!(check_policies(&module, &granted(&["network", "side_effects"])).is_ok());
        // Nothing asked, nothing needed; deny needs no grant.
        assert!(check_policies(&m(json!({})), &[]).is_ok());
        assert!(check_policies(&m(json!({"policies": {"network": "deny"}})), &[]).is_ok());
        // Custom policies work the same way.
        assert!(check_policies(&m(json!({"policies": {"gpu": "allow"}})), &[]).is_err());
    }

    #[test]
    fn tools_follow_the_module_section() {
        let none = m(json!({}));
        assert!(tool_refusal(none.tools.as_ref(), "grep").unwrap().contains("declares no tools"));
        let deny = m(json!({"tools": {"allowed": ["grep", "rm"], "denied": ["rm"]}}));
        assert_eq!(tool_refusal(deny.tools.as_ref(), "grep"), None);
        assert_eq!(tool_refusal(deny.tools.as_ref(), "rm"), Some("it is in tools.denied"));
        assert!(tool_refusal(deny.tools.as_ref(), "curl").unwrap().contains("not in tools.allowed"));
        let allow = m(json!({"tools": {"policy": "allow_by_default", "denied": ["rm"]}}));
        assert_eq!(tool_refusal(allow.tools.as_ref(), "curl"), None);
        assert!(tool_refusal(allow.tools.as_ref(), "rm").is_some());

        let e = check_offered_tools(&deny, &granted(&["grep", "rm"])).unwrap_err();
        assert_eq!(e.code, ErrorCode::E4007);
        assert!(e.message.contains("tool `rm`") && e.message.contains("tools.denied"), "{}", e.message);
        assert!(check_offered_tools(&deny, &granted(&["grep"])).is_ok());
        assert!(check_offered_tools(&none, &[]).is_ok());
    }

    #[test]
    fn tool_calls_must_be_permitted_and_offered() {
        let module = m(json!({"tools": {"allowed": ["grep", "ls"]}}));
        let offered = granted(&["grep"]);
        assert!(check_tool_calls(&module, &offered, &["grep"]).is_ok());
        let e = check_tool_calls(&module, &offered, &["grep", "rm"]).unwrap_err();
        assert!(e.message.contains("tool `rm`") && e.message.contains("does not permit"), "{}", e.message);
        let e = check_tool_calls(&module, &offered, &["ls"]).unwrap_err();
        assert!(e.message.contains("did not offer"), "{}", e.message);
    }

    #[test]
    fn a_child_stays_within_its_parent() {
        let parent = m(json!({"policies": {"network": "allow"}, "tools": {"allowed": ["grep", "ls"]}}));
        let ok = m(json!({"name": "c", "policies": {"network": "allow"}, "tools": {"allowed": ["grep"]}}));
        assert!(child_within(&parent, &ok).is_ok());
        assert!(child_within(&parent, &m(json!({"name": "c"}))).is_ok());

        let e = child_within(&parent, &m(json!({"name": "c", "policies": {"code_execution": "allow"}}))).unwrap_err();
        assert_eq!(e.code, ErrorCode::E4007);
        assert!(e.message.contains("`code_execution`"), "{}", e.message);
        let e = child_within(&parent, &m(json!({"name": "c", "tools": {"allowed": ["rm"]}}))).unwrap_err();
        assert!(e.message.contains("tool `rm`"), "{}", e.message);
        let e = child_within(&parent, &m(json!({"name": "c", "tools": {"policy": "allow_by_default"}}))).unwrap_err();
        assert!(e.message.contains("allow_by_default"), "{}", e.message);

        let open = m(json!({"tools": {"policy": "allow_by_default", "denied": ["rm"]}}));
        assert!(child_within(&open, &m(json!({"name": "c", "tools": {"allowed": ["ls"]}}))).is_ok());
        assert!(child_within(&open, &m(json!({"name": "c", "tools": {"allowed": ["rm"]}}))).is_err());
        assert!(
            child_within(
                &open,
                &m(json!({"name": "c", "tools": {"policy": "allow_by_default", "denied": ["rm", "x"]}}))
            )
            .is_ok()
        );
        assert!(child_within(&open, &m(json!({"name": "c", "tools": {"policy": "allow_by_default"}}))).is_err());
    }
}
