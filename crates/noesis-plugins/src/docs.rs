//! Living docs: one YAML knowledge node per code unit (a folder's source
//! files) is the truth; Markdown is rendered from it with no model. A sync
//! asks the model again only for units whose node is missing, whose frame
//! was invalidated or whose file set changed; every other node is left
//! byte-identical.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use noesis_frames::{CausalFrame, FileRef, FrameId, Status, Timestamp};
use serde::Deserialize;
use serde_json::{Value, json};

use noesis_plugin::{ContextSlice, Core, CoreContext, CoreError, Parsed, Plugin, PluginError, Step, Think};

use crate::{Error, Setting};

/// How much of each file the model is shown.
const FILE_BUDGET: usize = 8 * 1024;

/// A unit of code: a folder (project-relative, `.` for the root) and its
/// source files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// The folder.
    pub path: String,
    /// Its source files, project-relative, sorted.
    pub files: Vec<String>,
}

/// Whether noesis documents this file (a language noesis-code reads).
#[must_use]
pub fn is_source(path: &str) -> bool {
    noesis_code::Lang::from_path(Path::new(path)).is_some()
}

/// Groups source files by folder, folders sorted.
#[must_use]
pub fn units<'a>(files: impl IntoIterator<Item = &'a str>) -> Vec<Unit> {
    let mut by_dir: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in files.into_iter().filter(|f| is_source(f)) {
        let dir = f.rsplit_once('/').map_or(".", |(d, _)| d);
        by_dir.entry(dir.to_owned()).or_default().push(f.to_owned());
    }
    by_dir
        .into_iter()
        .map(|(path, mut files)| {
            files.sort();
            Unit { path, files }
        })
        .collect()
}

/// The node's file name inside the docs folder: `src/calc` → `src.calc`,
/// a `.` or `%` in a folder's name escaped (`%2E`, `%25`) so no two units
/// share a file; the project's top folder is `_root` (`_` cannot start an
/// escaped name of another unit that reads the same, since `.` is never
/// produced for it).
#[must_use]
pub fn slug(unit: &str) -> String {
    if unit == "." {
        return "%2E".to_owned();
    }
    unit.split('/').map(|seg| seg.replace('%', "%25").replace('.', "%2E")).collect::<Vec<_>>().join(".")
}

/// A knowledge node: what one unit is, and when that stops holding.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Node {
    /// The unit's folder.
    pub module: String,
    /// What it is for (the model's words).
    pub purpose: String,
    /// What it imports (read from the code).
    pub dependencies: Vec<String>,
    /// Public signatures (read from the code).
    pub public_api: Vec<String>,
    /// Notes on the API (the model's words), by name.
    #[serde(default)]
    pub api_notes: Vec<ApiNote>,
    /// The files and hashes the node rests on.
    pub invalidation_condition: NodeCondition,
    /// When the node was last made from the code.
    pub last_verified: String,
    /// The frame that made it.
    pub frame_id: String,
}

/// A note on one public function.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ApiNote {
    /// Its name.
    pub name: String,
    /// One sentence.
    pub note: String,
}

/// A node's invalidation condition: its files with their hashes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct NodeCondition {
    /// Path and hash of each file.
    pub files: Vec<FileRef>,
}

/// A YAML double-quoted scalar (JSON string syntax is valid there).
fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_owned())
}

impl Node {
    /// The node as YAML, byte-stable for equal nodes.
    #[must_use]
    pub fn to_yaml(&self) -> String {
        let mut y = String::from(
            "# Living docs node, written by `noesis docs sync`; the Markdown beside it is rendered from it.\n",
        );
        y.push_str(&format!("module: {}\n", q(&self.module)));
        y.push_str(&format!("purpose: {}\n", q(&self.purpose)));
        let list = |y: &mut String, key: &str, items: &[String]| {
            if items.is_empty() {
                y.push_str(&format!("{key}: []\n"));
            } else {
                y.push_str(&format!("{key}:\n"));
                for i in items {
                    y.push_str(&format!("  - {}\n", q(i)));
                }
            }
        };
        list(&mut y, "dependencies", &self.dependencies);
        list(&mut y, "public_api", &self.public_api);
        if self.api_notes.is_empty() {
            y.push_str("api_notes: []\n");
        } else {
            y.push_str("api_notes:\n");
            for n in &self.api_notes {
                y.push_str(&format!("  - name: {}\n    note: {}\n", q(&n.name), q(&n.note)));
            }
        }
        y.push_str("invalidation_condition:\n  files:\n");
        for f in &self.invalidation_condition.files {
            y.push_str(&format!("    - path: {}\n      hash: {}\n", q(&f.path), q(&f.hash)));
        }
        y.push_str(&format!("last_verified: {}\n", q(&self.last_verified)));
        y.push_str(&format!("frame_id: {}\n", q(&self.frame_id)));
        y
    }

    /// Reads a node back.
    ///
    /// # Errors
    /// The YAML error, in words.
    pub fn from_yaml(text: &str) -> Result<Node, String> {
        serde_saphyr::from_str(text).map_err(|e| e.to_string())
    }

    /// The Markdown page, rendered from the node alone (no model, no clock):
    /// equal nodes give equal bytes.
    #[must_use]
    pub fn to_markdown(&self) -> String {
        let mut m = format!("# {}\n\n{}\n", self.module, self.purpose.trim());
        if !self.public_api.is_empty() {
            m.push_str("\n## Public API\n\n");
            for sig in &self.public_api {
                m.push_str(&format!("- `{}`", sig.replace('`', "'")));
                if let Some(n) = self.api_notes.iter().find(|n| sig_names(sig, &n.name)) {
                    m.push_str(&format!(" — {}", n.note.trim()));
                }
                m.push('\n');
            }
        }
        if !self.dependencies.is_empty() {
            m.push_str("\n## Dependencies\n\n");
            for d in &self.dependencies {
                m.push_str(&format!("- `{d}`\n"));
            }
        }
        m.push_str("\n## Files\n\n");
        for f in &self.invalidation_condition.files {
            m.push_str(&format!("- `{}` ({})\n", f.path, &f.hash[..f.hash.len().min(12)]));
        }
        m.push_str(&format!("\n_Verified {} from frame `{}`._\n", self.last_verified, self.frame_id));
        m
    }
}

/// Whether a signature declares `name` (`def name(`, `fn name(`, `fn name<`).
fn sig_names(sig: &str, name: &str) -> bool {
    let short = name.rsplit(['.', ':']).next().unwrap_or(name);
    sig.contains(&format!(" {short}(")) || sig.contains(&format!(" {short}<"))
}

/// The built-in living-docs plugin.
#[derive(Debug, Clone)]
pub struct Docs {
    root: PathBuf,
    out: PathBuf,
}

impl Docs {
    /// Docs for the project at `root`, nodes written under `out`.
    #[must_use]
    pub fn new(root: &Path, out: &Path) -> Docs {
        Docs { root: root.to_owned(), out: out.to_owned() }
    }

    /// Where a unit's node lives.
    #[must_use]
    pub fn node_path(&self, unit: &str) -> PathBuf {
        self.out.join(format!("{}.yaml", slug(unit)))
    }

    fn fail(method: &str, message: String) -> PluginError {
        PluginError::Failed { plugin: "docs".into(), method: method.into(), message }
    }
}

impl Plugin for Docs {
    fn name(&self) -> &str {
        "docs"
    }

    fn transform_input(&self, raw: &Value, _ctx: &CoreContext<'_>) -> Result<ContextSlice, PluginError> {
        let unit = raw
            .get("unit")
            .and_then(Value::as_str)
            .ok_or_else(|| Self::fail("transform_input", "`unit` must be a string".into()))?;
        let files: Vec<String> = raw
            .get("files")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default();
        if files.is_empty() {
            return Err(Self::fail("transform_input", format!("unit {unit}: no files")));
        }
        let mut shown = Vec::new();
        let mut api = Vec::new();
        let mut deps = std::collections::BTreeSet::new();
        for f in &files {
            let path = crate::inside(&self.root, f)
                .ok_or_else(|| Self::fail("transform_input", format!("{f}: not a file inside the project")))?;
            let text = std::fs::read_to_string(path).map_err(|e| Self::fail("transform_input", format!("{f}: {e}")))?;
            if let Some(lang) = noesis_code::Lang::from_path(Path::new(f)) {
                for func in noesis_code::functions(lang, &text).unwrap_or_default() {
                    if func.is_public && !func.is_test {
                        api.push(func.signature.clone());
                    }
                }
                deps.extend(noesis_code::imports(lang, &text).unwrap_or_default());
            }
            shown.push(json!({"path": f, "text": crate::clip_file(&text, FILE_BUDGET)}));
        }
        let text = format!("unit {unit}: {} files, {} public functions", files.len(), api.len());
        let input = json!({"unit": unit, "files": shown, "public_api": api, "dependencies": deps.into_iter().collect::<Vec<_>>()});
        Ok(ContextSlice { text, input, files })
    }

    fn parse_output(&self, raw: &Value, _frame: &CausalFrame) -> Result<Parsed, PluginError> {
        let out = &raw["output"];
        let purpose = out
            .get("purpose")
            .and_then(Value::as_str)
            .filter(|p| !p.trim().is_empty())
            .ok_or_else(|| Self::fail("parse_output", "the reply has no `purpose`".into()))?;
        let notes: Vec<Value> = out
            .get("api_notes")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter(|n| n["name"].is_string() && n["note"].is_string()).cloned().collect())
            .unwrap_or_default();
        let data = json!({
            "module": raw["input"]["unit"],
            "purpose": purpose.trim(),
            "dependencies": raw["input"]["dependencies"],
            "public_api": raw["input"]["public_api"],
            "api_notes": notes,
        });
        Ok(Parsed::new(purpose.trim(), 0.8, data))
    }

    fn store(&self, parsed: &Parsed, frame: &CausalFrame) -> Result<(), PluginError> {
        let d = parsed.data();
        let strings = |v: &Value| -> Vec<String> {
            v.as_array().map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect()).unwrap_or_default()
        };
        let module = d["module"].as_str().unwrap_or_default().to_owned();
        let node = Node {
            purpose: parsed.conclusion().to_owned(),
            dependencies: strings(&d["dependencies"]),
            public_api: strings(&d["public_api"]),
            api_notes: d["api_notes"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|n| ApiNote {
                            name: n["name"].as_str().unwrap_or_default().to_owned(),
                            note: n["note"].as_str().unwrap_or_default().to_owned(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            invalidation_condition: NodeCondition {
                files: frame
                    .invalidation_condition
                    .files
                    .iter()
                    .filter(|f| noesis_frames::split_part(&f.path).1.is_none())
                    .cloned()
                    .collect(),
            },
            last_verified: frame.timestamps.created_at.to_string(),
            frame_id: frame.frame_id.to_string(),
            module,
        };
        let yaml = self.node_path(&node.module);
        let io = |e: std::io::Error| Self::fail("store", format!("{}: {e}", yaml.display()));
        noesis_fs::write_atomic(&yaml, node.to_yaml().as_bytes()).map_err(|e| io(e.source))?;
        noesis_fs::write_atomic(&yaml.with_extension("md"), node.to_markdown().as_bytes()).map_err(|e| io(e.source))
    }
}

/// Why a node must be made again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stale {
    /// No node yet.
    Missing,
    /// The node file cannot be read.
    Unreadable(String),
    /// Its frame was invalidated (a file changed), or is gone.
    Invalidated(String),
    /// The unit's files are not those the node rests on.
    FilesChanged,
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stale::Missing => f.write_str("no node yet"),
            Stale::Unreadable(e) => write!(f, "node unreadable: {e}"),
            Stale::Invalidated(why) => write!(f, "frame invalidated: {why}"),
            Stale::FilesChanged => f.write_str("files added or removed"),
        }
    }
}

/// Whether `unit`'s node holds, judged by its frame's status in the store.
///
/// # Errors
/// A store error.
pub async fn staleness(core: &Core<'_>, docs: &Docs, unit: &Unit) -> Result<Option<Stale>, CoreError> {
    let path = docs.node_path(&unit.path);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Some(Stale::Missing)),
        Err(e) => return Ok(Some(Stale::Unreadable(e.to_string()))),
    };
    let node = match Node::from_yaml(&text) {
        Ok(n) => n,
        Err(e) => return Ok(Some(Stale::Unreadable(e))),
    };
    if node.module != unit.path {
        return Ok(Some(Stale::Unreadable(format!("the node is for {}", node.module))));
    }
    let Ok(id) = FrameId::parse(&node.frame_id) else { return Ok(Some(Stale::Unreadable("bad frame_id".into()))) };
    match core.frame(&id).await? {
        None => return Ok(Some(Stale::Invalidated(format!("frame {id} is not in the store")))),
        Some(f) if f.status == Status::Invalidated => {
            let why = f.timestamps.history.last().and_then(|h| h.reason.clone()).unwrap_or_default();
            return Ok(Some(Stale::Invalidated(why)));
        }
        Some(_) => {}
    }
    let node_files: Vec<&str> = node.invalidation_condition.files.iter().map(|f| f.path.as_str()).collect();
    if node_files != unit.files.iter().map(String::as_str).collect::<Vec<_>>() {
        return Ok(Some(Stale::FilesChanged));
    }
    for f in &node.invalidation_condition.files {
        if core.hash_now(&f.path).as_deref() != Some(f.hash.as_str()) {
            return Ok(Some(Stale::Invalidated(format!("file {} changed", f.path))));
        }
    }
    Ok(None)
}

/// What a sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct SyncReport {
    /// Units whose node was made (again), with why.
    pub regenerated: Vec<(String, String)>,
    /// Units whose node was left as it was.
    pub kept: Vec<String>,
    /// Units that failed, with the error (their old node is left alone).
    pub failed: Vec<(String, String)>,
    /// Nodes of units that are gone (their files removed), removed.
    pub removed: Vec<String>,
}

/// Nodes in the docs folder whose unit is no longer among `units`: the
/// unit's module and the node file. Only nodes under `under` (a folder,
/// project-relative) count when it is given.
#[must_use]
pub fn orphans(docs: &Docs, units: &[Unit], under: Option<&str>) -> Vec<(String, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(&docs.out) else { return Vec::new() };
    let mut found: Vec<(String, PathBuf)> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter_map(|p| {
            let node = Node::from_yaml(&std::fs::read_to_string(&p).ok()?).ok()?;
            Some((node.module, p))
        })
        .filter(|(m, _)| !units.iter().any(|u| &u.path == m))
        .filter(|(m, _)| under.is_none_or(|u| u.is_empty() || u == "." || m == u || m.starts_with(&format!("{u}/"))))
        .collect();
    found.sort();
    found
}

/// Makes the node of every unit that needs one and leaves the rest alone.
/// A unit that fails is reported and the others go on.
///
/// # Errors
/// A store error while judging staleness.
pub async fn sync(
    core: &mut Core<'_>,
    docs: &Docs,
    think: &dyn Think,
    units: &[Unit],
    under: Option<&str>,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<SyncReport, CoreError> {
    let mut report = SyncReport::default();
    for (module, path) in orphans(docs, units, under) {
        // The unit is gone: so is its page.
        let _ = std::fs::remove_file(path.with_extension("md"));
        match std::fs::remove_file(&path) {
            Ok(()) => report.removed.push(module),
            Err(e) => report.failed.push((module, format!("{}: {e}", path.display()))),
        }
    }
    for unit in units {
        let Some(why) = staleness(core, docs, unit).await? else {
            report.kept.push(unit.path.clone());
            continue;
        };
        progress(&unit.path);
        let raw = json!({"unit": unit.path, "files": unit.files});
        let step = Step { query: format!("docs: {}", unit.path), raw: &raw, parent: None };
        match core.step(docs, step, think, Timestamp::now()).await {
            Ok(_) => report.regenerated.push((unit.path.clone(), why.to_string())),
            Err(CoreError::Store(e)) => return Err(CoreError::Store(e)),
            Err(e) => report.failed.push((unit.path.clone(), e.to_string())),
        }
    }
    Ok(report)
}

/// The project's code units under `scope` (an absolute folder; the whole
/// project when `None`), leaving out the docs folder `out`.
///
/// # Errors
/// `scope` is not a folder, or the files cannot be scanned.
pub fn units_in(setting: &Setting<'_>, scope: Option<&Path>, out: &Path) -> Result<Vec<Unit>, Error> {
    if let Some(p) = scope
        && !p.is_dir()
    {
        return Err(Error::Invalid(format!("{}: not a folder (docs are kept per folder of source)", p.display())));
    }
    let scope: Vec<PathBuf> = scope.map(Path::to_owned).into_iter().collect();
    let files = setting.files(&scope, &[out.to_owned()])?;
    Ok(units(files.iter().map(String::as_str)))
}

/// A scope folder as the project names it (`None`: the whole project).
fn scope_name(setting: &Setting<'_>, scope: Option<&Path>) -> Option<String> {
    let p = scope?;
    let abs = p.canonicalize().unwrap_or_else(|_| p.to_owned());
    Some(noesis_frames::project::relative_path(&setting.project.root, &abs))
}

/// Makes the node of every unit under `scope` (an absolute folder; the
/// whole project when `None`) that needs one, into `out`, with `think` as the
/// model (`docs-node` on the command line); `progress` hears each unit
/// written. A sync of the project's session.
///
/// # Errors
/// The scope is not a folder, the files cannot be scanned, or the store
/// failed.
pub async fn sync_in(
    setting: &Setting<'_>,
    think: &dyn Think,
    scope: Option<&Path>,
    out: &Path,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<SyncReport, Error> {
    let units = units_in(setting, scope, out)?;
    let mut core = setting.core(None).await?;
    let plugin = Docs::new(&setting.project.root, out);
    let under = scope_name(setting, scope);
    Ok(sync(&mut core, &plugin, think, &units, under.as_deref(), progress).await?)
}

impl SyncReport {
    /// The report as JSON: units removed, regenerated (with why), kept and
    /// failed (with the error).
    #[must_use]
    pub fn to_json(&self) -> Value {
        json!({"removed": self.removed,
               "regenerated": self.regenerated.iter().map(|(u, w)| json!({"unit": u, "why": w})).collect::<Vec<_>>(),
               "kept": self.kept,
               "failed": self.failed.iter().map(|(u, e)| json!({"unit": u, "error": e})).collect::<Vec<_>>()})
    }
}

/// What `docs status` found.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct DocsStatus {
    /// How many units there are.
    pub units: usize,
    /// The units whose node is stale, with why (a node whose files are gone
    /// among them).
    pub stale: Vec<(String, String)>,
}

/// The stale nodes under `scope` in `out`, and why, without a model.
///
/// # Errors
/// The scope is not a folder, the files cannot be scanned, or the store
/// failed.
pub async fn status_in(setting: &Setting<'_>, scope: Option<&Path>, out: &Path) -> Result<DocsStatus, Error> {
    let units = units_in(setting, scope, out)?;
    let core = setting.core(None).await?;
    let plugin = Docs::new(&setting.project.root, out);
    let under = scope_name(setting, scope);
    let mut stale = Vec::new();
    for (module, _) in orphans(&plugin, &units, under.as_deref()) {
        stale.push((module, "its files are gone".to_owned()));
    }
    for u in &units {
        if let Some(why) = staleness(&core, &plugin, u).await? {
            stale.push((u.path.clone(), why.to_string()));
        }
    }
    Ok(DocsStatus { units: units.len(), stale })
}

impl DocsStatus {
    /// The status as JSON: how many units, and the stale ones with why.
    #[must_use]
    pub fn to_json(&self) -> Value {
        json!({"units": self.units, "stale": self.stale.iter().map(|(u, w)| json!({"unit": u, "why": w})).collect::<Vec<_>>()})
    }
}

impl SyncReport {
    /// The report as text, a line per unit written, failed or removed, and
    /// the counts; `out` is where the nodes are.
    #[must_use]
    pub fn to_text(&self, out: &Path) -> String {
        let mut text = String::new();
        for (u, why) in &self.regenerated {
            text.push_str(&format!("wrote  {u}  ({why})\n"));
        }
        for (u, e) in &self.failed {
            text.push_str(&format!("failed {u}  {e}\n"));
        }
        for u in &self.removed {
            text.push_str(&format!("removed {u}  (its files are gone)\n"));
        }
        text.push_str(&format!(
            "{} regenerated, {} unchanged, {} removed, {} failed; nodes in {}\n",
            self.regenerated.len(),
            self.kept.len(),
            self.removed.len(),
            self.failed.len(),
            out.display()
        ));
        text
    }
}

impl DocsStatus {
    /// The status as text: a line per stale node, and the count.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        for (u, why) in &self.stale {
            text.push_str(&format!("stale  {u}  ({why})\n"));
        }
        text.push_str(&format!("{} of {} nodes stale\n", self.stale.len(), self.units));
        text
    }
}

/// The docs folder: `flag` (relative to `cwd`), else `configured` (`[frames]
/// docs_dir`, relative to the project's `root`), else `docs/noesis` there.
#[must_use]
pub fn out_dir(flag: Option<&Path>, configured: Option<&str>, root: &Path, cwd: &Path) -> PathBuf {
    match flag {
        Some(p) if p.is_absolute() => p.to_owned(),
        Some(p) => cwd.join(p),
        None => root.join(configured.unwrap_or("docs/noesis")),
    }
}

/// The scope folder a person typed (relative to `cwd`), checked to be a
/// folder.
///
/// # Errors
/// It is not a folder.
pub fn scope(path: Option<&Path>, cwd: &Path) -> Result<Option<PathBuf>, Error> {
    let Some(p) = path else { return Ok(None) };
    let abs = if p.is_absolute() { p.to_owned() } else { cwd.join(p) };
    if !abs.is_dir() {
        return Err(Error::Invalid(format!("{}: not a folder (docs are kept per folder of source)", p.display())));
    }
    Ok(Some(abs))
}

#[cfg(test)]
mod text_tests {
    use super::*;

    #[test]
    fn the_docs_folder_is_the_flag_the_config_or_docs_noesis() {
        let (root, cwd) = (Path::new("/p"), Path::new("/p/sub"));
        assert_eq!(out_dir(Some(Path::new("/abs")), Some("c"), root, cwd), Path::new("/abs"));
        assert_eq!(out_dir(Some(Path::new("rel")), Some("c"), root, cwd), Path::new("/p/sub/rel"));
        assert_eq!(out_dir(None, Some("c"), root, cwd), Path::new("/p/c"));
        assert_eq!(out_dir(None, None, root, cwd), Path::new("/p/docs/noesis"));
    }

    #[test]
    fn a_scope_must_be_a_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "").unwrap();
        assert_eq!(scope(None, dir.path()).unwrap(), None);
        assert_eq!(scope(Some(Path::new(".")), dir.path()).unwrap(), Some(dir.path().join(".")));
        let e = scope(Some(Path::new("f")), dir.path()).unwrap_err().to_string();
        assert_eq!(e, "f: not a folder (docs are kept per folder of source)");
    }

    #[test]
    fn reports_read_as_a_line_per_unit_and_the_counts() {
        let report = SyncReport {
            regenerated: vec![("a".into(), "new".into())],
            kept: vec!["b".into()],
            failed: vec![("c".into(), "boom".into())],
            removed: vec!["d".into()],
        };
        assert_eq!(
            report.to_text(Path::new("/o")),
            "wrote  a  (new)\nfailed c  boom\nremoved d  (its files are gone)\n1 regenerated, 1 unchanged, 1 removed, 1 failed; nodes in /o\n"
        );
        let status = DocsStatus { units: 3, stale: vec![("a".into(), "changed".into())] };
        assert_eq!(status.to_text(), "stale  a  (changed)\n1 of 3 nodes stale\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Node {
        Node {
            module: "src/calc".into(),
            purpose: "Adds \"numbers\".\nTwo lines: ünïcode".into(),
            dependencies: vec!["math".into()],
            public_api: vec!["def add(a: int, b: int) -> int".into()],
            api_notes: vec![ApiNote { name: "add".into(), note: "Sums two ints.".into() }],
            invalidation_condition: NodeCondition {
                files: vec![FileRef { path: "src/calc/a.py".into(), hash: "ab".repeat(32) }],
            },
            last_verified: "2026-11-25T10:00:00.000Z".into(),
            frame_id: "0192-x".into(),
        }
    }

    #[test]
    fn nodes_round_trip_and_render_the_same_bytes() {
        let n = node();
        let y = n.to_yaml();
        assert_eq!(Node::from_yaml(&y).unwrap(), n);
        assert_eq!(Node::from_yaml(&y).unwrap().to_yaml(), y);
        let md = n.to_markdown();
        assert_eq!(md, node().to_markdown());
        assert!(md.contains("- `def add(a: int, b: int) -> int` — Sums two ints.\n"), "{md}");
        assert!(md.contains("- `src/calc/a.py` (abababababab)\n"), "{md}");
        let empty = Node { dependencies: vec![], public_api: vec![], api_notes: vec![], ..node() };
        assert_eq!(Node::from_yaml(&empty.to_yaml()).unwrap(), empty);
    }

    #[test]
    fn units_are_folders_of_source_files() {
        let u = units(["b/x.py", "a/z.rs", "a/y.rs", "README.md", "top.py", "a/deep/w.py"]);
        let got: Vec<(&str, Vec<&str>)> =
            u.iter().map(|u| (u.path.as_str(), u.files.iter().map(String::as_str).collect())).collect();
        assert_eq!(
            got,
            vec![
                (".", vec!["top.py"]),
                ("a", vec!["a/y.rs", "a/z.rs"]),
                ("a/deep", vec!["a/deep/w.py"]),
                ("b", vec!["b/x.py"])
            ]
        );
        assert_eq!(slug("."), "%2E");
        assert_eq!(slug("a/deep"), "a.deep");
        assert_ne!(slug("a/b.c"), slug("a.b/c"));
        assert_ne!(slug("_root"), slug("."));
        assert_ne!(slug("a%2Eb"), slug("a.b"));
    }
}
