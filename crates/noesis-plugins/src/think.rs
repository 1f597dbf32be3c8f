//! Models of a step: a Cognitive Module run on the slice's input, or none.

use std::sync::Arc;

use async_trait::async_trait;
use noesis_frames::CausalFrame;
use noesis_llm::Provider;
use noesis_modules::search::SearchPath;
use noesis_plugin::{ContextSlice, Think, Thought};
use serde_json::json;

/// The model of a step: a Cognitive Module run on the slice's input. The
/// reply a plugin reads is `{"input": …, "output": data}`.
pub struct ModuleThink {
    /// Where the module is found.
    pub search: SearchPath,
    /// The module's name.
    pub module: String,
    /// The model behind it.
    pub provider: Arc<dyn Provider>,
    /// What the model's calls cost.
    pub prices: Arc<noesis_llm::PriceTable>,
    /// The command's budget: every call of every step reserves against it.
    pub budget: Option<Arc<noesis_llm::BudgetMeter>>,
}

impl std::fmt::Debug for ModuleThink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModuleThink").field("module", &self.module).field("provider", &self.provider.name()).finish()
    }
}

#[async_trait]
impl Think for ModuleThink {
    async fn think(&self, slice: &ContextSlice, _frame: &CausalFrame) -> Result<Thought, String> {
        let module = self
            .search
            .resolve(&self.module)
            .map_err(|e| e.to_string())?
            .load()
            .map_err(|e| format!("module {}: {e}", self.module))?;
        let options = noesis_runtime::RunOptions {
            prices: Some(Arc::clone(&self.prices)),
            budget: self.budget.clone(),
            ..Default::default()
        };
        let record = noesis_runtime::run(&module, self.provider.as_ref(), slice.input.clone(), &options).await;
        let envelope = record.envelope;
        if envelope["ok"] != json!(true) {
            return Err(format!(
                "{}: {} {}",
                self.module,
                envelope["error"]["code"].as_str().unwrap_or("E4000"),
                envelope["error"]["message"].as_str().unwrap_or_default()
            ));
        }
        Ok(Thought { raw: json!({"input": slice.input, "output": envelope["data"]}), ..Thought::default() })
    }
}

/// No model: the slice's input is the reply (for plugins that only shape
/// and keep, and for trying a plugin without a provider).
#[derive(Debug, Clone, Copy, Default)]
pub struct Echo;

#[async_trait]
impl Think for Echo {
    async fn think(&self, slice: &ContextSlice, _frame: &CausalFrame) -> Result<Thought, String> {
        Ok(Thought { raw: slice.input.clone(), ..Thought::default() })
    }
}
