//! Finding a called module: beside its caller, then on the search path.

use super::*;

/// Finds modules by name for `@call` and composition steps.
pub trait Resolver: Send + Sync {
    /// The module called `name`; a missing one is an E4006 failure.
    // A failure is rare and becomes an envelope at once: kept unboxed so
    // implementations stay one line.
    #[allow(clippy::result_large_err)]
    fn resolve(&self, name: &str) -> Result<Arc<Module>, Failure>;

    /// The module called `name` as `caller` names it. By default the same
    /// as [`Resolver::resolve`]; a resolver over folders looks beside the
    /// caller's own folder first.
    #[allow(clippy::result_large_err)]
    fn resolve_from(&self, name: &str, caller: &Module) -> Result<Arc<Module>, Failure> {
        let _ = caller;
        self.resolve(name)
    }
}

/// A [`Resolver`] over a search path that loads each module once.
#[derive(Debug)]
pub struct SearchResolver {
    search: SearchPath,
    cache: Mutex<HashMap<String, Arc<Module>>>,
}

impl SearchResolver {
    /// A resolver over `search`.
    pub fn new(search: SearchPath) -> SearchResolver {
        SearchResolver { search, cache: Mutex::new(HashMap::new()) }
    }
}

impl Resolver for SearchResolver {
    #[allow(clippy::result_large_err)]
    fn resolve(&self, name: &str) -> Result<Arc<Module>, Failure> {
        if let Some(m) = self.cache.lock().unwrap_or_else(PoisonError::into_inner).get(name) {
            return Ok(Arc::clone(m));
        }
        let found = self.search.resolve(name).map_err(|e| Failure::new(ErrorCode::E4006, e.to_string()))?;
        let module = found.load().map_err(|e| {
            Failure::new(ErrorCode::E4006, format!("module `{name}` was found but cannot be loaded: {e}"))
                .suggest("Fix the module (noesis validate) or remove it from the search path.")
        })?;
        let module = Arc::new(module);
        self.cache.lock().unwrap_or_else(PoisonError::into_inner).insert(name.to_owned(), Arc::clone(&module));
        Ok(module)
    }

    /// A module next to the caller's own folder wins over the search path,
    /// so `noesis run path/to/product-analyzer` finds its sibling
    /// `ui-spec-generator` wherever the pair lives.
    fn resolve_from(&self, name: &str, caller: &Module) -> Result<Arc<Module>, Failure> {
        let plain = !name.is_empty() && !name.contains(['/', '\\']) && name != "." && name != "..";
        let sibling = caller
            .location
            .parent()
            .filter(|_| plain && !caller.location.to_string_lossy().starts_with("builtin:"))
            .map(|parent| parent.join(name))
            .filter(|dir| ["module.yaml", "MODULE.md", "module.md"].iter().any(|m| dir.join(m).is_file()));
        let Some(dir) = sibling else { return self.resolve(name) };
        let key = dir.to_string_lossy().into_owned();
        if let Some(m) = self.cache.lock().unwrap_or_else(PoisonError::into_inner).get(&key) {
            return Ok(Arc::clone(m));
        }
        let module = noesis_modules::load_dir(&dir).map_err(|e| {
            Failure::new(ErrorCode::E4006, format!("module `{name}` beside its caller cannot be loaded: {e}"))
                .suggest("Fix the module (noesis validate).")
        })?;
        let module = Arc::new(module);
        self.cache.lock().unwrap_or_else(PoisonError::into_inner).insert(key, Arc::clone(&module));
        Ok(module)
    }
}
