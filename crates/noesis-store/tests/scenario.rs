//! The cross-session scenario of the issue, on both back ends: a generated
//! repository of 500 files, frames citing subsets of them, k files changed
//! → exactly the dependent frames are invalidated (precision and recall
//! 100%), suspended frames are kept and listed as resumable.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use noesis_frames::project::Project;
use noesis_frames::session::PromptChange;
use noesis_frames::{CausalFrame, Draft, Evidence, FileRole, FrameId, Status, Timestamp, pivot};
use noesis_store::{FrameFilter, Store, ops};

use crate::support::{Rng, TestStore};

fn t(ms: i64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + ms)
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// 500 tracked files in nested folders, plus ignored build output.
fn generate_repo(root: &Path) -> Vec<String> {
    write(root, ".gitignore", "target/\n*.tmp\n");
    let mut files = Vec::new();
    for i in 0..499 {
        let rel = format!("src/m{:02}/s{}/file{i:03}.rs", i % 23, i % 4);
        write(root, &rel, &format!("// file {i}\npub fn f{i}() -> u32 {{ {i} }}\n"));
        files.push(rel);
    }
    files.push(".gitignore".into());
    for i in 0..40 {
        write(root, &format!("target/debug/junk{i}.o"), "ignored");
        write(root, &format!("src/scratch{i}.tmp"), "ignored");
    }
    files
}

/// The dependents computed the slow, obvious way: a fixpoint over all frames.
fn reference(frames: &[CausalFrame], changed: &BTreeSet<String>) -> BTreeSet<FrameId> {
    let live: HashMap<&FrameId, &CausalFrame> =
        frames.iter().filter(|f| f.status != Status::Invalidated).map(|f| (&f.frame_id, f)).collect();
    let mut doomed: BTreeSet<FrameId> = live
        .values()
        .filter(|f| f.invalidation_condition.files.iter().any(|r| changed.contains(&r.path)))
        .map(|f| f.frame_id.clone())
        .collect();
    loop {
        let before = doomed.len();
        for f in live.values() {
            let parent_doomed = f.parent_id.as_ref().is_some_and(|p| doomed.contains(p));
            let cites_doomed = f.invalidation_condition.frames.iter().any(|d| doomed.contains(d));
            if parent_doomed || cites_doomed {
                doomed.insert(f.frame_id.clone());
            }
        }
        if doomed.len() == before {
            return doomed;
        }
    }
}

both!(five_hundred_files_k_changed_exactly_the_dependents_invalidated);

async fn five_hundred_files_k_changed_exactly_the_dependents_invalidated(t_: &TestStore) {
    let store: &dyn Store = &t_.store;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let files = generate_repo(&root);
    assert_eq!(files.len(), 500);
    let project = Project { project_id: format!("path:{}", root.display()), root: root.clone() };

    // Session 1: every tracked file hashed (read), nothing ignored.
    let s1 = ops::start_session(store, &project, &[], &[], Some("map the code".into()), None, t(0)).await.unwrap();
    assert_eq!(s1.session.files.len(), 500);
    assert!(s1.session.files.keys().all(|p| !p.starts_with("target/") && !p.ends_with(".tmp")));
    assert!(s1.session.files.values().all(|e| e.role == FileRole::Read));
    assert_eq!(s1.diff.prompt, PromptChange::First);
    assert!(s1.invalidated.is_empty());
    let session_root = store.frame(s1.session.root_frame_id.as_ref().unwrap()).await.unwrap().unwrap();

    // 300 frames citing random subsets of 1–6 files; random parents; a
    // quarter also cite an earlier frame.
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let mut frames: Vec<CausalFrame> = vec![session_root.clone()];
    for i in 0..300 {
        // A bushy tree: a third hang off the session root.
        let parent = if rng.below(3) == 0 { session_root.clone() } else { frames[rng.below(frames.len())].clone() };
        let mut evidence: Vec<Evidence> = (0..=rng.below(6))
            .map(|_| {
                let path = &files[rng.below(files.len())];
                Evidence::File { path: path.clone(), hash: s1.session.files[path].hash.clone() }
            })
            .collect();
        if frames.len() > 1 && rng.below(4) == 0 {
            evidence.push(Evidence::Frame { frame_id: frames[1 + rng.below(frames.len() - 1)].frame_id.clone() });
        }
        let f = Draft { evidence, confidence: 0.8, ..Draft::new(format!("frame {i}")) }
            .into_frame(&project.project_id, None, Some(&parent), t(1 + i))
            .unwrap();
        store.insert_frames(std::slice::from_ref(&f)).await.unwrap();
        frames.push(f);
    }
    // 30 pivots: their frames become suspended (some cite files that will change).
    for i in 0..30 {
        let cur = store.frame(&frames[1 + rng.below(300)].frame_id).await.unwrap().unwrap();
        if cur.status != Status::Active {
            continue;
        }
        let parent = match &cur.parent_id {
            Some(p) => store.frame(p).await.unwrap(),
            None => None,
        };
        let change =
            pivot(&cur, parent.as_ref(), Draft { confidence: 0.5, ..Draft::new(format!("pivot {i}")) }, t(400 + i))
                .unwrap();
        store.apply(&change).await.unwrap();
    }
    let before = store.frames(&FrameFilter::project(&project.project_id)).await.unwrap();
    let suspended_before: BTreeSet<FrameId> =
        before.iter().filter(|f| f.status == Status::Suspended).map(|f| f.frame_id.clone()).collect();
    assert!(suspended_before.len() >= 10, "the scenario needs suspended frames");

    // k = 12 files change: 9 edited, 3 deleted; one ignored file changes too.
    let mut changed = BTreeSet::new();
    while changed.len() < 12 {
        changed.insert(files[rng.below(499)].clone());
    }
    let all_changed: Vec<String> = changed.iter().cloned().collect();
    let (edited, deleted) = all_changed.split_at(9);
    for p in edited {
        write(&root, p, "// changed\n");
    }
    for p in deleted {
        std::fs::remove_file(root.join(p)).unwrap();
    }
    write(&root, "target/debug/junk0.o", "changed but ignored");
    let expected = reference(&before, &changed);
    assert!(!expected.is_empty() && expected.len() + 50 < before.len(), "{} of {}", expected.len(), before.len());

    // Session 2.
    let s2 = ops::start_session(store, &project, &[], &[], Some("map the code".into()), None, t(1000)).await.unwrap();
    let got: BTreeSet<FrameId> = s2.invalidated.iter().map(|i| i.frame_id.clone()).collect();
    let false_pos: Vec<_> = got.difference(&expected).collect();
    let missed: Vec<_> = expected.difference(&got).collect();
    assert!(false_pos.is_empty() && missed.is_empty(), "precision/recall: {false_pos:?} wrongly, {missed:?} missed");
    assert_eq!(got.len(), s2.invalidated.len(), "each frame once");
    // Seeds name the file; the cascade names the frame it came through.
    for inv in &s2.invalidated {
        assert!(
            inv.reason.starts_with("file ") || inv.reason.starts_with("parent ") || inv.reason.starts_with("cites "),
            "{inv:?}"
        );
    }

    // Everything else kept its status; nothing was deleted.
    let after = store.frames(&FrameFilter::project(&project.project_id)).await.unwrap();
    assert_eq!(after.len(), before.len() + 1, "only the new session's root was added");
    let by_id: HashMap<&FrameId, &CausalFrame> = before.iter().map(|f| (&f.frame_id, f)).collect();
    for f in &after {
        match by_id.get(&f.frame_id) {
            Some(old) if expected.contains(&f.frame_id) => {
                assert_eq!(f.status, Status::Invalidated);
                let last = f.timestamps.history.last().unwrap();
                assert_eq!((last.at, last.session_id.as_deref()), (t(1000), Some(s2.session.session_id.as_str())));
                assert_eq!(f.timestamps.history.len(), old.timestamps.history.len() + 1);
            }
            Some(old) => assert_eq!(f.status, old.status, "{} changed status", f.frame_id),
            None => assert_eq!(Some(&f.frame_id), s2.session.root_frame_id.as_ref()),
        }
    }

    // Suspended frames that still hold are listed as resumable; suspended
    // dependents were invalidated like any other.
    let resumable: BTreeSet<FrameId> = s2.resumable.iter().map(|f| f.frame_id.clone()).collect();
    let want: BTreeSet<FrameId> = suspended_before.difference(&expected).cloned().collect();
    assert_eq!(resumable, want);
    assert!(!want.is_empty());

    // The session diff names the files and agrees with the store's record.
    assert_eq!(s2.diff.files.changed, edited);
    assert_eq!(s2.diff.files.removed, deleted);
    assert!(s2.diff.files.added.is_empty());
    assert_eq!(s2.diff.prompt, PromptChange::Same);
    for p in edited {
        // The scan read the file: the role says what the session did, the
        // diff what changed.
        assert_eq!(s2.session.files[p].role, FileRole::Read);
        assert_ne!(s2.session.files[p].hash, s1.session.files[p].hash);
    }
    let report = ops::session_report(store, &project.project_id).await.unwrap().unwrap();
    assert_eq!(report.diff, s2.diff);
    let reported: BTreeSet<FrameId> = report.invalidated.iter().map(|i| i.frame_id.clone()).collect();
    assert_eq!(reported, expected);
    assert_eq!(report.resumable.len(), want.len());

    // Session 3 with nothing changed: nothing more is invalidated.
    let s3 = ops::start_session(store, &project, &[PathBuf::from("src")], &[], Some("next".into()), None, t(2000))
        .await
        .unwrap();
    assert!(s3.invalidated.is_empty(), "{:?}", s3.invalidated);
    assert!(matches!(s3.diff.prompt, PromptChange::New { .. }));
    assert!(s3.diff.files.changed.is_empty() && s3.diff.files.removed.is_empty());
    assert!(store.check().await.unwrap().is_empty());
}
