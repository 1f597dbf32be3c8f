//! The embedded local model's glue: which GGUF file, whether it is
//! installed, and the provider itself (with the `local` feature).

use noesis_llm::Provider;
use serde_json::Value;

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
