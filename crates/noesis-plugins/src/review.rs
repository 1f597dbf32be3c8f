//! Code review: one step per changed file of a diff. A file whose earlier
//! review still holds (the same bytes, its frame live and visible) is not
//! sent to the model again: its findings are reused. Each finding is a child
//! frame of its file's review, resting on that file; a finding seen
//! [`noesis_review::PROMOTE_AT`] times becomes a principle (its frame is
//! promoted) that later reviews receive.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use noesis_code::{FileDiff, FileStatus};
use noesis_frames::{CausalFrame, Draft, Evidence, Status, Timestamp};
use noesis_review::{Finding, PastFinding, Principle, Promotion};
use noesis_store::FrameFilter;
use serde_json::{Value, json};

use noesis_plugin::{ContextSlice, Core, CoreContext, CoreError, Parsed, Plugin, PluginError, Step, Think, Thought};

use crate::{Error, Setting};

/// The query of a file's review frame.
#[must_use]
pub fn review_query(path: &str) -> String {
    format!("review: {path}")
}

const FINDING: &str = "finding: ";
const FILE_BUDGET: usize = 16 * 1024;

/// What a finding frame keeps (its context slice), enough to rebuild the
/// finding and count it.
fn finding_record(f: &Finding) -> Value {
    json!({
        "severity": f.severity().as_str(), "category": f.category().as_str(), "file": f.file(),
        "start_line": f.start_line(), "end_line": f.end_line(), "title": f.title(), "message": f.message(),
        "resolves_when": f.resolves_when(), "fingerprint": f.fingerprint(),
    })
}

/// The finding a finding frame records, if it is one.
#[must_use]
pub fn finding_of(frame: &CausalFrame) -> Option<Finding> {
    if !frame.query.starts_with(FINDING) {
        return None;
    }
    let mut v: Value = serde_json::from_str(&frame.context_slice).ok()?;
    v.as_object_mut()?.remove("fingerprint");
    Finding::from_model(0, &v).ok()
}

/// A principle's rule: the reason it was promoted with (else its
/// conclusion).
#[must_use]
pub fn rule_of(frame: &CausalFrame) -> String {
    frame
        .timestamps
        .history
        .iter()
        .rev()
        .find(|h| h.status == Status::Promoted)
        .and_then(|h| h.reason.clone())
        .unwrap_or_else(|| frame.conclusion.clone())
}

/// The built-in review plugin.
#[derive(Debug, Clone)]
pub struct Review {
    root: PathBuf,
}

impl Review {
    /// Reviews of the project at `root`.
    #[must_use]
    pub fn new(root: &Path) -> Review {
        Review { root: root.to_owned() }
    }

    fn fail(method: &str, message: String) -> PluginError {
        PluginError::Failed { plugin: "review".into(), method: method.into(), message }
    }
}

impl Plugin for Review {
    fn name(&self) -> &str {
        "review"
    }

    fn transform_input(&self, raw: &Value, ctx: &CoreContext<'_>) -> Result<ContextSlice, PluginError> {
        let path =
            raw["file"].as_str().ok_or_else(|| Self::fail("transform_input", "`file` must be a string".into()))?;
        let diff = raw["diff"].as_str().unwrap_or_default();
        let file = crate::inside(&self.root, path)
            .ok_or_else(|| Self::fail("transform_input", format!("{path}: not a file inside the project")))?;
        let text = std::fs::read_to_string(file).map_err(|e| Self::fail("transform_input", format!("{path}: {e}")))?;
        // "Last time we flagged X here": findings of visible reviews of this
        // file, with whether they still hold.
        let past: Vec<Value> = ctx
            .frames()
            .iter()
            .filter_map(|f| finding_of(f).filter(|x| x.file() == path).map(|x| (f, x)))
            .map(|(f, x)| {
                json!({"title": x.title(), "category": x.category().as_str(), "lines": [x.start_line(), x.end_line()],
                       "resolves_when": x.resolves_when(),
                       "state": if f.status.is_live() { "flagged earlier; file unchanged since" } else { "flagged earlier; the file changed since" }})
            })
            .collect();
        let principles: Vec<Value> = ctx
            .principles()
            .iter()
            .filter(|f| f.query.starts_with(FINDING))
            .map(|f| json!({"principle": rule_of(f)}))
            .collect();
        let set_aside: Vec<Value> = ctx
            .suspended_frames()
            .into_iter()
            .filter(|f| f.query.starts_with("review"))
            .map(|f| json!({"frame_id": f.frame_id, "query": f.query}))
            .collect();
        let slice = format!(
            "review of {path}: {} past finding(s) here, {} principle(s), {} set-aside review(s)",
            past.len(),
            principles.len(),
            set_aside.len()
        );
        let input = json!({"diff": diff, "files": [{"path": path, "text": crate::clip_file(&text, FILE_BUDGET)}], "past_findings": past,
                           "principles": principles, "set_aside": set_aside});
        Ok(ContextSlice { text: slice, input, files: vec![path.to_owned()] })
    }

    fn parse_output(&self, raw: &Value, _frame: &CausalFrame) -> Result<Parsed, PluginError> {
        let path = raw["input"]["files"][0]["path"].as_str().unwrap_or_default();
        let out = &raw["output"];
        let reply = json!({"findings": out["findings"], "summary": out["summary"]});
        let (reply, errors) = noesis_review::parse_reply(&reply);
        if let Some(e) = errors.first() {
            return Err(Self::fail("parse_output", format!("{e} ({} problem(s) in the reply)", errors.len())));
        }
        // A finding on another file is not this review's: it is left out
        // (and named), the rest stand.
        let (own, other): (Vec<&Finding>, Vec<&Finding>) = reply.findings.iter().partition(|f| f.file() == path);
        let mut conclusion =
            if reply.summary.is_empty() { format!("{} finding(s)", own.len()) } else { reply.summary.clone() };
        if !other.is_empty() {
            let names: Vec<&str> = other.iter().map(|f| f.file()).collect();
            conclusion.push_str(&format!(
                " ({} finding(s) on other files left out: {})",
                other.len(),
                names.join(", ")
            ));
        }
        let data = json!({"file": path, "summary": reply.summary, "findings": own.iter().map(|f| finding_record(f)).collect::<Vec<_>>(),
                          "left_out": other.iter().map(|f| finding_record(f)).collect::<Vec<_>>()});
        Ok(Parsed::new(conclusion, 0.7, data))
    }

    fn store(&self, _parsed: &Parsed, _frame: &CausalFrame) -> Result<(), PluginError> {
        Ok(())
    }
}

/// The model of a review step: `inner` (a module run), whose findings
/// become child frames resting on the reviewed file.
pub struct FindingsThink<'a> {
    /// The module run.
    pub inner: &'a dyn Think,
    /// The project root (to hash the reviewed file).
    pub root: PathBuf,
}

#[async_trait]
impl Think for FindingsThink<'_> {
    async fn think(&self, slice: &ContextSlice, frame: &CausalFrame) -> Result<Thought, String> {
        let mut t = self.inner.think(slice, frame).await?;
        let out = &t.raw["output"];
        let (reply, _) = noesis_review::parse_reply(&json!({"findings": out["findings"], "summary": out["summary"]}));
        // Findings on another file than the one reviewed make no frames
        // (parse_output leaves them out and names them).
        let reviewed = slice.input["files"][0]["path"].as_str().unwrap_or_default();
        for f in reply.findings.iter().filter(|f| f.file() == reviewed) {
            let file = crate::inside(&self.root, f.file())
                .ok_or_else(|| format!("{}: not a file inside the project", f.file()))?;
            let hash = noesis_frames::scan::hash_file(&file).map_err(|e| e.to_string())?;
            t.children.push(Draft {
                context_slice: finding_record(f).to_string(),
                evidence: vec![Evidence::File { path: f.file().to_owned(), hash }],
                conclusion: format!("{} — resolved when: {}", f.message(), f.resolves_when()),
                confidence: 0.7,
                ..Draft::new(format!(
                    "{FINDING}{} {}:{}-{} {}",
                    f.category().as_str(),
                    f.file(),
                    f.start_line(),
                    f.end_line(),
                    f.title()
                ))
            });
        }
        Ok(t)
    }
}

/// One file's review.
#[derive(Debug, Clone)]
pub struct FileReview {
    /// The file.
    pub path: String,
    /// Its review frame.
    pub frame: CausalFrame,
    /// Whether the findings were reused from a review that still holds.
    pub reused: bool,
    /// The findings.
    pub findings: Vec<Finding>,
}

/// What a review did.
#[derive(Debug, Clone, Default)]
pub struct ReviewReport {
    /// Per file, in diff order.
    pub files: Vec<FileReview>,
    /// Files left out (deleted, binary, gone), with why.
    pub skipped: Vec<(String, String)>,
    /// Files that failed, with the error.
    pub failed: Vec<(String, String)>,
    /// Findings promoted to principles by this review.
    pub promotions: Vec<Promotion>,
    /// Every principle of the project, after this review.
    pub principles: Vec<Principle>,
}

impl ReviewReport {
    /// The report as `format` says: `json`, `sarif` (SARIF 2.1.0, the tool
    /// named `noesis` at `version`) or text (findings, the principles
    /// promoted and the files that failed).
    #[must_use]
    pub fn render(&self, format: &str, version: &str) -> String {
        let findings = self.findings();
        match format {
            "json" => format!("{}\n", serde_json::to_string_pretty(&self.to_json()).unwrap_or_default()),
            "sarif" => {
                let tool = noesis_review::SarifTool { name: "noesis", version, information_uri: None };
                let sarif = noesis_review::to_sarif(&tool, &findings, &self.principles);
                format!("{}\n", serde_json::to_string_pretty(&sarif).unwrap_or_default())
            }
            _ => {
                let mut t = noesis_review::render_text(&findings, &self.summary());
                for p in &self.promotions {
                    t.push_str(&format!("promoted: {}\n", p.principle().text));
                }
                for (f, e) in &self.failed {
                    t.push_str(&format!("failed: {f}: {e}\n"));
                }
                t
            }
        }
    }

    /// Every finding, file by file.
    #[must_use]
    pub fn findings(&self) -> Vec<Finding> {
        self.files.iter().flat_map(|f| f.findings.iter().cloned()).collect()
    }
}

/// The diff text of one file (its header and hunks).
fn file_diff_text(f: &FileDiff) -> String {
    let mut t = format!(
        "--- {}\n+++ {}\n",
        f.old_path.as_deref().unwrap_or("/dev/null"),
        f.new_path.as_deref().unwrap_or("/dev/null")
    );
    for h in &f.hunks {
        t.push_str(&format!(
            "@@ -{},{} +{},{} @@ {}\n",
            h.old_start, h.old_lines, h.new_start, h.new_lines, h.header_context
        ));
        for l in &h.lines {
            let mark = match l.kind {
                noesis_code::LineKind::Added => '+',
                noesis_code::LineKind::Removed => '-',
                noesis_code::LineKind::Context => ' ',
            };
            t.push(mark);
            t.push_str(&l.text);
            t.push('\n');
        }
    }
    t
}

/// The live, visible review of `path` made from the bytes it has now.
fn holding_review<'c>(core: &'c Core<'_>, path: &str) -> Option<&'c CausalFrame> {
    let hash = core.hash_now(path)?;
    let query = review_query(path);
    core.frames()
        .iter()
        .filter(|f| f.query == query && f.status == Status::Completed)
        .filter(|f| f.invalidation_condition.files.iter().any(|r| r.path == path && r.hash == hash))
        .max_by(|a, b| a.timestamps.created_at.cmp(&b.timestamps.created_at).then_with(|| a.frame_id.cmp(&b.frame_id)))
}

/// The principles of the project: its promoted findings.
async fn principles(core: &Core<'_>) -> Result<Vec<(CausalFrame, Principle)>, CoreError> {
    let filter = FrameFilter { status: Some(Status::Promoted), ..FrameFilter::project(&core.project().project_id) };
    Ok(core
        .store()
        .frames(&filter)
        .await?
        .into_iter()
        .filter_map(|f| {
            let x = finding_of(&f)?;
            let p = Principle {
                category: x.category().clone(),
                fingerprint: x.fingerprint().to_owned(),
                text: f.conclusion.clone(),
            };
            Some((f, p))
        })
        .collect())
}

/// Reviews every changed file of `diff`: reuses reviews that still hold,
/// asks the model for the rest, then promotes what has been seen often
/// enough.
///
/// # Errors
/// A diff that cannot be read, or a store error.
pub async fn review(
    core: &mut Core<'_>,
    plugin: &Review,
    think: &dyn Think,
    diff: &str,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<ReviewReport, CoreError> {
    let files = noesis_code::parse_unified(diff).map_err(|e| CoreError::Invalid(format!("the diff: {e}")))?;
    let mut report = ReviewReport::default();
    let findings_think = FindingsThink { inner: think, root: core.project().root.clone() };
    let mut fresh: Vec<Finding> = Vec::new();
    let mut fresh_frames: Vec<CausalFrame> = Vec::new();
    for f in &files {
        let Some(path) = f.path().map(str::to_owned) else { continue };
        if f.status == FileStatus::Deleted || f.binary {
            report.skipped.push((path, if f.binary { "binary".into() } else { "deleted".into() }));
            continue;
        }
        let relative = !path.starts_with('/') && !path.split('/').any(|c| c == "..");
        match crate::inside(&core.project().root, &path) {
            Some(p) if p.is_file() => {}
            _ if relative => {
                report.skipped.push((path, "not in the working tree".into()));
                continue;
            }
            _ => {
                // Absolute, `..`, or a link out of the project: never read,
                // never sent to a model.
                report.skipped.push((path, "outside the project: not read".into()));
                continue;
            }
        }
        if let Some(held) = holding_review(core, &path) {
            let children: Vec<Finding> =
                held.children.iter().filter_map(|c| core.frames().get(c)).filter_map(finding_of).collect();
            report.files.push(FileReview { path, frame: held.clone(), reused: true, findings: children });
            continue;
        }
        progress(&path);
        let raw = json!({"file": path, "diff": file_diff_text(f)});
        match core
            .step(
                plugin,
                Step { query: review_query(&path), raw: &raw, parent: None },
                &findings_think,
                Timestamp::now(),
            )
            .await
        {
            Ok(out) => {
                let found: Vec<Finding> = out.children.iter().filter_map(finding_of).collect();
                fresh.extend(found.iter().cloned());
                fresh_frames.extend(out.children.iter().cloned());
                report.files.push(FileReview { path, frame: out.frame, reused: false, findings: found });
            }
            Err(CoreError::Store(e)) => return Err(CoreError::Store(e)),
            Err(e) => report.failed.push((path, e.to_string())),
        }
    }
    // Promotion counts every earlier finding of the project (the core sees
    // them all; plugins see only what is linked).
    let fresh_ids: std::collections::HashSet<_> = fresh_frames.iter().map(|f| f.frame_id.clone()).collect();
    let all = core
        .store()
        .frames(&FrameFilter {
            text: Some(FINDING.trim().to_owned()),
            ..FrameFilter::project(&core.project().project_id)
        })
        .await?;
    let history: Vec<PastFinding> = all
        .iter()
        .filter(|f| !fresh_ids.contains(&f.frame_id))
        .filter_map(|f| {
            let x = finding_of(f)?;
            Some(PastFinding::new(f.parent_id.as_ref().map_or_else(|| f.frame_id.to_string(), ToString::to_string), &x))
        })
        .collect();
    let known: Vec<Principle> = principles(core).await?.into_iter().map(|(_, p)| p).collect();
    let promotions = noesis_review::repeats(&history, &fresh, &known);
    for p in &promotions {
        let Some(frame) = fresh_frames
            .iter()
            .find(|f| finding_of(f).is_some_and(|x| x.fingerprint() == p.fingerprint && x.category() == &p.category))
        else {
            continue;
        };
        let principle = p.principle();
        let up = noesis_frames::transition(
            frame,
            Status::Promoted,
            Some(&principle.text),
            Some(&core.session().session_id),
            Timestamp::now(),
        )?;
        core.store().apply(&noesis_frames::Changeset { frames: vec![], statuses: vec![up] }).await?;
    }
    report.promotions = promotions;
    report.principles =
        principles(core).await?.into_iter().map(|(f, p)| Principle { text: rule_of(&f), ..p }).collect();
    Ok(report)
}

/// Reviews `diff` in the project's session, with `think` as the model
/// (`review-diff` on the command line); `progress` hears each file sent to
/// the model.
///
/// # Errors
/// A diff that cannot be read, or a store error.
pub async fn review_in(
    setting: &Setting<'_>,
    think: &dyn Think,
    diff: &str,
    progress: &(dyn Fn(&str) + Sync),
) -> Result<ReviewReport, Error> {
    let mut core = setting.core(None).await?;
    let plugin = Review::new(&setting.project.root);
    Ok(review(&mut core, &plugin, think, diff, progress).await?)
}

/// `git diff RANGE` in `root` (the working tree against `HEAD` without a
/// range), as text.
///
/// # Errors
/// A range that looks like an option, git missing or refusing, or a diff
/// that is not UTF-8.
pub fn git_diff(root: &Path, range: Option<&str>) -> Result<String, Error> {
    let range = range.unwrap_or("HEAD");
    // A range comes from a person or a client: never let it be an option.
    if range.is_empty() || range.starts_with('-') {
        return Err(Error::Invalid(format!("`{range}` is not a git range (such as main..HEAD)")));
    }
    let out = std::process::Command::new("git")
        .current_dir(root)
        .args(["diff", "--no-color", "--no-ext-diff", range, "--"])
        .output()
        .map_err(|e| Error::Invalid(format!("run git (is it installed?): {e}")))?;
    if !out.status.success() {
        return Err(Error::Invalid(format!("git diff {range}: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    String::from_utf8(out.stdout).map_err(|_| Error::Invalid("git diff printed something that is not UTF-8".into()))
}

impl ReviewReport {
    /// One line saying what the review did.
    #[must_use]
    pub fn summary(&self) -> String {
        format!(
            "{} file(s) reviewed ({} reused), {} finding(s), {} promoted to principles",
            self.files.len(),
            self.files.iter().filter(|f| f.reused).count(),
            self.findings().len(),
            self.promotions.len()
        )
    }

    /// The report as JSON: the findings (`noesis_review::to_json`), the
    /// files with their frames, promotions, failures and skipped files.
    #[must_use]
    pub fn to_json(&self) -> Value {
        let mut v = noesis_review::to_json(&self.findings(), &self.summary());
        v["files"] = json!(
            self.files
                .iter()
                .map(|f| json!({"path": f.path, "frame_id": f.frame.frame_id, "reused": f.reused}))
                .collect::<Vec<_>>()
        );
        v["promotions"] = json!(self.promotions.iter().map(Promotion::principle).collect::<Vec<_>>());
        v["failed"] = json!(self.failed.iter().map(|(f, e)| json!({"path": f, "error": e})).collect::<Vec<_>>());
        v["skipped"] = json!(self.skipped.iter().map(|(f, e)| json!({"path": f, "why": e})).collect::<Vec<_>>());
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_git_range_is_never_an_option() {
        let dir = tempfile::tempdir().unwrap();
        for range in ["--output=/tmp/x", "-p", ""] {
            let e = git_diff(dir.path(), Some(range)).unwrap_err();
            assert!(matches!(&e, Error::Invalid(m) if m.contains("is not a git range")), "{range}: {e}");
        }
    }

    #[test]
    fn findings_on_other_files_are_left_out_and_named() {
        let frame = Draft::new("review: a.py").into_frame("p", None, None, Timestamp::now()).unwrap();
        let finding = |file: &str| {
            json!({"severity": "warning", "category": "correctness", "file": file, "start_line": 1, "end_line": 1,
                   "title": "T", "message": "M", "resolves_when": "R"})
        };
        let raw = json!({"input": {"files": [{"path": "a.py", "text": ""}]},
                         "output": {"findings": [finding("a.py"), finding("b.py")], "summary": "two"}});
        let p = Review::new(Path::new("/nonexistent")).parse_output(&raw, &frame).unwrap();
        assert_eq!(p.data()["findings"].as_array().unwrap().len(), 1);
        assert_eq!(p.data()["left_out"][0]["file"], "b.py");
        assert!(p.conclusion().contains("left out: b.py"), "{}", p.conclusion());
        let bad = json!({"input": raw["input"], "output": {"findings": [{"file": "a.py"}], "summary": "x"}});
        assert!(Review::new(Path::new("/x")).parse_output(&bad, &frame).is_err(), "an invalid finding is refused");
    }
}
