//! The embedded local model's glue: which GGUF file, whether it is
//! installed, and the provider itself (with the `local` feature).

use noesis_llm::Provider;
use serde_json::{Value, json};

use noesis_config::{Config, ProviderArgs};

pub(crate) use noesis_host::local::model_path;

/// Says on stderr when the local model cannot enforce a module's schema
/// (the run then generates unconstrained text, repaired and re-asked).
pub(crate) fn note_schema(provider: &dyn Provider, schema: &Value) {
    #[cfg(feature = "local")]
    if provider.name() == noesis_local::NAME
        && let Err(e) = noesis_local::check_schema(schema)
    {
        crate::out::note(&format!(
            "note: the local model cannot enforce this module's schema ({e}); generating without a grammar, then repair and re-ask"
        ));
    }
    #[cfg(not(feature = "local"))]
    let _ = (provider, schema);
}

/// `doctor`'s row for the local model: shown when it is installed,
/// selected or configured.
pub(crate) fn doctor_row(
    args: &ProviderArgs,
    config: &Config,
    env: &dyn Fn(&str) -> Option<String>,
    selected: bool,
) -> Option<Value> {
    let path = model_path(args, config, env);
    let installed = path.as_ref().is_some_and(|p| p.is_file());
    let configured = config.providers.contains_key("local") || config.fallback.iter().any(|f| f == "local");
    if !(installed || selected || configured) {
        return None;
    }
    let mut row = json!({
        "provider": "local",
        "wire": "gguf",
        "model": path.as_ref().and_then(|p| p.file_stem()).map(|s| s.to_string_lossy().into_owned()),
        "model_path": path.as_ref().map(|p| p.display().to_string()),
        "key_variable": null,
        "key_set": false,
        "configured": installed || selected,
        "selected": selected,
        "built_in": cfg!(feature = "local"),
    });
    if !cfg!(feature = "local") {
        row["problem"] = json!("this noesis was built without the `local` feature");
    } else if !installed {
        row["problem"] = json!("model file not found (run `noesis model install`)");
    }
    Some(row)
}
