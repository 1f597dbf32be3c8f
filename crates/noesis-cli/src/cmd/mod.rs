pub(crate) mod agent;
pub(crate) mod ask;
pub(crate) mod batch;
pub(crate) mod compose;
pub(crate) mod conformance;
pub(crate) mod doctor;
pub(crate) mod frames;
pub(crate) mod info;
pub(crate) mod init;
pub(crate) mod install;
pub(crate) mod list;
pub(crate) mod mcp;
pub(crate) mod memory;
pub(crate) mod migrate;
#[cfg(feature = "local")]
pub(crate) mod model;
pub(crate) mod plugins;
pub(crate) mod run;
pub(crate) mod sandbox;
pub(crate) mod serve;
pub(crate) mod session;
pub(crate) mod skills;
pub(crate) mod solve;
pub(crate) mod state;
pub(crate) mod test;
pub(crate) mod validate;
pub(crate) mod worker;

use anyhow::Context;
use noesis_modules::search::{Found, SearchPath};
use noesis_modules::{ErrorCode, Failure, Module};

/// Resolves and loads a module; a missing module is an E4006 envelope, an
/// invalid one an error naming the file and field.
pub(crate) enum Loaded {
    Module(Box<Module>),
    NotFound(serde_json::Value),
}

pub(crate) fn load(search: &SearchPath, name: &str) -> anyhow::Result<Loaded> {
    let found = match search.resolve(name) {
        Ok(f) => f,
        Err(e) => {
            return Ok(Loaded::NotFound(Failure::new(ErrorCode::E4006, e.to_string()).into_envelope()));
        }
    };
    // The manifest schema's verdicts are kept beside the project ids:
    // compiling that schema was about a ninth of a short `run`.
    let memo = crate::memory::home().ok().map(|h| h.join("cache").join("manifests"));
    let module = found.load_remembering(memo.as_deref()).with_context(|| format!("cannot load module `{name}`"))?;
    Ok(Loaded::Module(Box::new(module)))
}

pub(crate) fn location(found: &Found) -> String {
    match found {
        Found::Dir(p) => p.display().to_string(),
        Found::Builtin(n) => format!("builtin:{n}"),
    }
}
