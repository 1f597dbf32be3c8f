//! The constraint layer: which tokens may come next so the output matches a
//! JSON Schema.
//!
//! The engine only sees the two small traits here, [`ConstraintCompiler`]
//! and [`Constraint`], in terms of token ids and bitsets; the one
//! implementation, [`Llg`], compiles schemas with llguidance against the
//! engine's vocabulary and caches each compiled grammar, so another engine or
//! another constraint library can be swapped in on either side.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use serde_json::Value;
use toktrie::{SimpleVob, TokEnv};

/// Why a schema could not be turned into a constraint, or a constraint
/// failed while decoding.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConstraintError {
    /// The schema uses something the constraint engine cannot express.
    #[error("the schema cannot be enforced while decoding: {0}")]
    Unsupported(String),
    /// The constraint engine failed on a token (a bug, not a user error).
    #[error("the grammar engine failed: {0}")]
    Engine(String),
}

/// A token-level constraint for one generation.
pub trait Constraint: Send {
    /// The tokens allowed next as a bitset (bit `t % 32` of word `t / 32`
    /// set for token `t`), end-of-sequence tokens included when the output
    /// may end here.
    fn allowed(&mut self) -> Result<&[u32], ConstraintError>;
    /// Tokens the grammar forces from here (none when the model has a
    /// choice); they may be appended without asking the model.
    fn forced(&mut self) -> Vec<u32>;
    /// Records the tokens chosen.
    fn commit(&mut self, tokens: &[u32]) -> Result<(), ConstraintError>;
    /// The output is complete: nothing may follow but the end.
    fn is_done(&self) -> bool;
}

/// Compiles JSON Schemas into [`Constraint`]s for one tokenizer.
pub trait ConstraintCompiler: Send + Sync {
    /// A fresh constraint for `schema`.
    fn compile(&self, schema: &Value) -> Result<Box<dyn Constraint>, ConstraintError>;
}

/// Most compiled grammars kept; the cache starts over when full.
const CACHE_SIZE: usize = 64;

/// [`ConstraintCompiler`] on llguidance: one parser factory per vocabulary,
/// one compiled grammar per distinct schema (compiling costs ~0.1 s; a fresh
/// copy of a cached one costs microseconds).
pub struct Llg {
    factory: ParserFactory,
    cache: Mutex<HashMap<String, Result<Matcher, ConstraintError>>>,
}

impl std::fmt::Debug for Llg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llg").field("cached", &self.cached()).finish_non_exhaustive()
    }
}

impl Llg {
    /// A compiler for the vocabulary `env` describes.
    pub fn new(env: &TokEnv) -> Result<Llg, ConstraintError> {
        let mut factory = ParserFactory::new_simple(env).map_err(|e| ConstraintError::Engine(e.to_string()))?;
        factory.quiet();
        Ok(Llg { factory, cache: Mutex::new(HashMap::new()) })
    }

    /// How many compiled grammars are cached.
    pub fn cached(&self) -> usize {
        self.cache.lock().map_or(0, |c| c.len())
    }

    fn build(&self, schema: &Value) -> Result<Matcher, ConstraintError> {
        let grammar = TopLevelGrammar::from_json_schema(schema.clone());
        let parser = self.factory.create_parser(grammar).map_err(|e| ConstraintError::Unsupported(e.to_string()))?;
        let matcher = Matcher::new(Ok(parser));
        match matcher.get_error() {
            Some(e) => Err(ConstraintError::Unsupported(e)),
            None => Ok(matcher),
        }
    }
}

impl ConstraintCompiler for Llg {
    fn compile(&self, schema: &Value) -> Result<Box<dyn Constraint>, ConstraintError> {
        let key = schema.to_string();
        let mut cache = self.cache.lock().map_err(|_| ConstraintError::Engine("grammar cache poisoned".into()))?;
        if !cache.contains_key(&key) {
            if cache.len() >= CACHE_SIZE {
                cache.clear();
            }
            let built = self.build(schema);
            cache.insert(key.clone(), built);
        }
        match &cache[&key] {
            Ok(m) => Ok(Box::new(LlgConstraint { matcher: m.deep_clone(), mask: SimpleVob::new() })),
            Err(e) => Err(e.clone()),
        }
    }
}

struct LlgConstraint {
    matcher: Matcher,
    mask: SimpleVob,
}

impl Constraint for LlgConstraint {
    fn allowed(&mut self) -> Result<&[u32], ConstraintError> {
        self.mask = self.matcher.compute_mask_or_eos().map_err(|e| ConstraintError::Engine(e.to_string()))?;
        Ok(self.mask.as_slice())
    }

    fn forced(&mut self) -> Vec<u32> {
        if self.matcher.is_stopped() { Vec::new() } else { self.matcher.compute_ff_tokens() }
    }

    fn commit(&mut self, tokens: &[u32]) -> Result<(), ConstraintError> {
        if self.matcher.is_stopped() {
            return Ok(());
        }
        self.matcher.consume_tokens(tokens).map_err(|e| ConstraintError::Engine(e.to_string()))
    }

    fn is_done(&self) -> bool {
        self.matcher.is_stopped()
    }
}

/// Whether token `t` is set in `mask`.
pub fn is_allowed(mask: &[u32], t: u32) -> bool {
    mask.get((t / 32) as usize).is_some_and(|w| w & (1 << (t % 32)) != 0)
}

/// Keeps the compiler shareable behind an `Arc<dyn …>`.
pub type SharedCompiler = Arc<dyn ConstraintCompiler>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitset_lookup() {
        let mask = [0b101, 1 << 31];
        assert!(is_allowed(&mask, 0));
        assert!(!is_allowed(&mask, 1));
        assert!(is_allowed(&mask, 2));
        assert!(is_allowed(&mask, 63));
        assert!(!is_allowed(&mask, 64));
        assert!(!is_allowed(&mask, 10_000));
    }
}
