//! The behavioural suite: every test runs on SQLite and on PostgreSQL.

use noesis_frames::{
    Cause, Changeset, Draft, Evidence, FileEntry, FileRole, FrameId, FrameTree, Invalidation, InvalidationCondition,
    SessionArtifacts, SessionLink, Status, StatusChange, StatusUpdate, Timestamp, backtrack, pivot, refine,
};
use noesis_store::{FrameFilter, NewSession, SessionKind, Store, StoreError};

use crate::support::{Rng, TestStore, raw};

const P: &str = "git:0000000000000000000000000000000000000001";

fn t(ms: i64) -> Timestamp {
    Timestamp::from_millis(1_700_000_000_000 + ms)
}

fn draft(q: &str) -> Draft {
    Draft { confidence: 0.5, ..Draft::new(q) }
}

fn file(p: &str, h: &str) -> Evidence {
    Evidence::File { path: p.into(), hash: h.into() }
}

async fn project(s: &dyn Store) {
    s.ensure_project(P, "/tmp/project").await.unwrap();
}

fn root_frame(q: &str) -> noesis_frames::CausalFrame {
    draft(q).into_frame(P, None, None, t(0)).unwrap()
}

fn ids(v: &[Invalidation]) -> Vec<FrameId> {
    let mut v: Vec<FrameId> = v.iter().map(|i| i.frame_id.clone()).collect();
    v.sort();
    v
}

both!(
    frames_round_trip,
    bad_frames_are_refused_whole,
    fabricated_frames_are_never_evidence,
    reads_during_writes_see_whole_frames,
    branching_and_lost_updates,
    cascade_matches_the_algebra,
    queries,
    sessions_round_trip,
    recorded_sessions_keep_their_frames_and_links,
    file_conditions_and_expiry,
    prefixes_resolve,
    migrations_run_once_and_refuse_newer_schemas,
    stores_of_the_earlier_runner_are_adopted,
    agent_run_states_are_kept_by_step,
    agent_runs_are_a_log_of_changes,
    a_stale_base_or_writer_never_breaks_the_log,
    run_leases_fence_stale_holders,
    streamed_events_are_kept_by_id_and_never_reused,
    batch_items_are_answered_once,
    workflow_versions_never_overwrite_each_other,
    memory_is_searched_by_any_word_best_first,
    check_finds_partial_frames,
);

async fn frames_round_trip(t_: &TestStore) {
    let s = &t_.store;
    project(s).await;
    let root = root_frame("root question");
    let child = Draft {
        context_slice: "slice".into(),
        evidence: vec![
            file("src/a.rs", "aa"),
            Evidence::Observation { tool: "grep".into(), content: "3 hits".into() },
            file("src/b.rs", "bb"),
        ],
        conclusion: "it works — ünïcode ok".into(),
        confidence: 0.75,
        condition: InvalidationCondition {
            expires_at: Some(t(99)),
            note: Some("until the refactor".into()),
            ..Default::default()
        },
        status: Some(Status::Completed),
        ..Draft::new("child")
    }
    .into_frame(P, Some("sess"), Some(&root), t(1))
    .unwrap();
    let citing = Draft { evidence: vec![Evidence::Frame { frame_id: child.frame_id.clone() }], ..draft("citing") }
        .into_frame(P, None, Some(&root), t(2))
        .unwrap();
    s.insert_frames(&[root.clone(), child.clone(), citing.clone()]).await.unwrap();
    let tree = FrameTree::from_frames([root.clone(), child.clone(), citing.clone()]);
    let expected: Vec<_> = tree.iter().cloned().collect();
    assert_eq!(s.frames(&FrameFilter::project(P)).await.unwrap(), expected);
    let back = s.frame(&child.frame_id).await.unwrap().unwrap();
    assert_eq!(back, child);
    assert_eq!(back.invalidation_condition.files.len(), 2);
    assert_eq!(back.invalidation_condition.expires_at, Some(t(99)));
    assert_eq!(s.frame(&root.frame_id).await.unwrap().unwrap().children, vec![child.frame_id, citing.frame_id]);
    assert!(s.frame(&FrameId::parse("nope").unwrap()).await.unwrap().is_none());
}

async fn bad_frames_are_refused_whole(t_: &TestStore) {
    let s = &t_.store;
    project(s).await;
    s.ensure_project("git:other", "/tmp/other").await.unwrap();
    let root = root_frame("r");
    s.insert_frames(std::slice::from_ref(&root)).await.unwrap();
    let ok = draft("fine").into_frame(P, None, Some(&root), t(1)).unwrap();
    let err = |e: StoreError| e.to_string();

    let mut orphan = draft("orphan").into_frame(P, None, Some(&root), t(1)).unwrap();
    orphan.parent_id = Some(FrameId::parse("missing-parent").unwrap());
    let e = err(s.insert_frames(&[ok.clone(), orphan]).await.unwrap_err());
    assert!(e.contains("missing-parent"), "{e}");

    let mut deep = draft("deep").into_frame(P, None, Some(&root), t(1)).unwrap();
    deep.depth = 5;
    let e = err(s.insert_frames(&[ok.clone(), deep.clone()]).await.unwrap_err());
    assert!(e.contains(&format!("frame {}: depth 5", deep.frame_id)), "{e}");

    let mut foreign = draft("foreign").into_frame(P, None, Some(&root), t(1)).unwrap();
    foreign.project_id = "git:other".into();
    let e = err(s.insert_frames(&[foreign]).await.unwrap_err());
    assert!(e.contains("belongs to project"), "{e}");

    let cites_unknown = Draft {
        evidence: vec![Evidence::Frame { frame_id: FrameId::parse("ghost").unwrap() }],
        ..draft("cites a ghost")
    }
    .into_frame(P, None, None, t(1))
    .unwrap();
    let e = err(s.insert_frames(&[cites_unknown]).await.unwrap_err());
    assert!(e.contains("ghost"), "{e}");

    let mut wild = draft("wild").into_frame(P, None, None, t(1)).unwrap();
    wild.confidence = 2.0;
    let e = err(s.insert_frames(&[wild]).await.unwrap_err());
    assert!(e.contains("confidence 2"), "{e}");

    let e = err(s.insert_frames(std::slice::from_ref(&root)).await.unwrap_err());
    assert!(e.contains("insert frames"), "a duplicate id is refused: {e}");

    // Nothing of the refused batches was written.
    assert_eq!(s.count(&FrameFilter::project(P)).await.unwrap(), 1);

    s.invalidate(&[Invalidation::new(root.frame_id.clone(), &Cause::Manual(String::new()))], None, t(3)).await.unwrap();
    let e = err(s.insert_frames(&[ok]).await.unwrap_err());
    assert!(e.contains("is invalidated"), "{e}");
}

async fn fabricated_frames_are_never_evidence(t_: &TestStore) {
    let s = &t_.store;
    project(s).await;
    let err = |e: StoreError| e.to_string();
    // A frame the test model fabricated is never evidence.
    let fabricated =
        Draft { context_slice: r#"{"model": "test/schema", "fabricated": true}"#.into(), ..draft("made up") }
            .into_frame(P, None, None, t(1))
            .unwrap();
    s.insert_frames(std::slice::from_ref(&fabricated)).await.unwrap();
    let cites_fabricated = Draft {
        evidence: vec![Evidence::Frame { frame_id: fabricated.frame_id.clone() }],
        ..draft("cites a made-up answer")
    }
    .into_frame(P, None, None, t(2))
    .unwrap();
    let e = err(s.insert_frames(std::slice::from_ref(&cites_fabricated)).await.unwrap_err());
    assert!(e.contains("fabricated") && e.contains(fabricated.frame_id.as_str()), "{e}");
    // Nor within one batch.
    let fresh = Draft { context_slice: r#"{"fabricated": true}"#.into(), ..draft("made up too") }
        .into_frame(P, None, None, t(1))
        .unwrap();
    let cites_fresh =
        Draft { evidence: vec![Evidence::Frame { frame_id: fresh.frame_id.clone() }], ..draft("cites it") }
            .into_frame(P, None, None, t(2))
            .unwrap();
    assert!(err(s.insert_frames(&[fresh, cites_fresh]).await.unwrap_err()).contains("fabricated"));
}

/// Regression: a load ran its queries outside a transaction, so a frame
/// committed by another writer between two of them made the reader fail
/// with "row for unknown frame". Reads now see one snapshot.
async fn reads_during_writes_see_whole_frames(t_: &TestStore) {
    let s = &t_.store;
    project(s).await;
    let writer = noesis_store::SqlStore::open(&t_.url).await.unwrap();
    let write = tokio::spawn(async move {
        for i in 0..150i64 {
            let f = Draft { evidence: vec![file(&format!("src/{i}.rs"), "h")], ..draft(&format!("w{i}")) }
                .into_frame(P, None, None, t(i))
                .unwrap();
            writer.insert_frames(&[f]).await.unwrap();
        }
    });
    let mut reads = 0;
    while !write.is_finished() {
        let frames = s.frames(&FrameFilter::project(P)).await.unwrap();
        assert!(frames.iter().all(|f| f.invalidation_condition.files.len() == 1), "a frame was read half-written");
        reads += 1;
    }
    write.await.unwrap();
    assert!(reads > 1, "the reads did not overlap the writes");
    assert_eq!(s.count(&FrameFilter::project(P)).await.unwrap(), 150);
}

async fn branching_and_lost_updates(t_: &TestStore) {
    let s = &t_.store;
    project(s).await;
    let root = root_frame("r");
    s.insert_frames(std::slice::from_ref(&root)).await.unwrap();
    let step = refine(&root, draft("a"), t(1)).unwrap();
    s.apply(&step).await.unwrap();
    let a = s.frame(&step.frames[0].frame_id).await.unwrap().unwrap();
    let step = refine(&a, draft("a1"), t(2)).unwrap();
    s.apply(&step).await.unwrap();
    let a1 = s.frame(&step.frames[0].frame_id).await.unwrap().unwrap();

    let p = pivot(&a1, Some(&a), draft("b"), t(3)).unwrap();
    s.apply(&p).await.unwrap();
    let b = s.frame(&p.frames[0].frame_id).await.unwrap().unwrap();
    assert_eq!((b.parent_id.as_ref(), b.depth, b.branched_from.as_ref()), (Some(&a.frame_id), 2, Some(&a1.frame_id)));
    let a1_now = s.frame(&a1.frame_id).await.unwrap().unwrap();
    assert_eq!(a1_now.status, Status::Suspended);
    let last = a1_now.timestamps.history.last().unwrap();
    assert_eq!((last.at, last.reason.clone()), (t(3), Some(format!("pivot to {}", b.frame_id))));

    let root_now = s.frame(&root.frame_id).await.unwrap().unwrap();
    let chain = vec![&root_now, &a, &b];
    let bt = backtrack(&chain, draft("again"), t(4)).unwrap();
    s.apply(&bt).await.unwrap();
    let again = s.frame(&bt.frames[0].frame_id).await.unwrap().unwrap();
    assert_eq!((again.parent_id.as_ref(), again.depth), (Some(&root.frame_id), 1));
    for id in [&a.frame_id, &b.frame_id, &a1.frame_id] {
        assert_eq!(s.frame(id).await.unwrap().unwrap().status, Status::Suspended, "{id}");
    }
    assert_eq!(s.count(&FrameFilter { pivots: true, ..FrameFilter::project(P) }).await.unwrap(), 2);

    // A change computed from a stale read (a was active then, is suspended
    // now) fails whole: the new frame it carried is not written either.
    let stale = pivot(&a, Some(&root_now), draft("late"), t(5)).unwrap();
    let e = s.apply(&stale).await.unwrap_err().to_string();
    assert!(e.contains("is suspended; it cannot become suspended"), "{e}");
    assert!(s.frame(&stale.frames[0].frame_id).await.unwrap().is_none());

    // Resume: suspended → active, with history.
    let resume = Changeset {
        frames: vec![],
        statuses: vec![StatusUpdate {
            frame_id: a1.frame_id.clone(),
            from: Status::Suspended,
            change: StatusChange { status: Status::Active, at: t(6), reason: Some("resumed".into()), session_id: None },
        }],
    };
    s.apply(&resume).await.unwrap();
    let a1_now = s.frame(&a1.frame_id).await.unwrap().unwrap();
    let statuses: Vec<Status> = a1_now.timestamps.history.iter().map(|h| h.status).collect();
    assert_eq!(statuses, vec![Status::Active, Status::Suspended, Status::Active]);
    assert_eq!(s.count(&FrameFilter::project(P)).await.unwrap(), 5, "nothing is ever deleted");
}

/// A random forest with random citations; random seeds; the store's SQL
/// cascade must invalidate exactly what the in-memory algebra does.
async fn cascade_matches_the_algebra(t_: &TestStore) {
    let s = &t_.store;
    project(s).await;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut frames: Vec<noesis_frames::CausalFrame> = Vec::new();
    for i in 0..400 {
        let parent = if i < 5 || rng.below(10) == 0 { None } else { Some(frames[rng.below(frames.len())].clone()) };
        let mut evidence = vec![];
        if !frames.is_empty() && rng.below(4) == 0 {
            evidence.push(Evidence::Frame { frame_id: frames[rng.below(frames.len())].frame_id.clone() });
        }
        let f = Draft { evidence, ..draft(&format!("f{i}")) }.into_frame(P, None, parent.as_ref(), t(i)).unwrap();
        frames.push(f);
    }
    s.insert_frames(&frames).await.unwrap();
    let mut tree = FrameTree::from_frames(frames.clone());
    for round in 0..6 {
        let seeds: Vec<Invalidation> = (0..3)
            .map(|_| {
                Invalidation::new(frames[rng.below(frames.len())].frame_id.clone(), &Cause::Manual(format!("r{round}")))
            })
            .collect();
        let expected = tree.invalidate(&seeds, None, t(1000 + round));
        let got = s.invalidate(&seeds, None, t(1000 + round)).await.unwrap();
        assert_eq!(ids(&got), ids(&expected), "round {round}");
        // Seeds come first, in order, with their own reasons.
        let live_seeds: Vec<&Invalidation> = expected.iter().take_while(|i| i.reason.starts_with('i')).collect();
        for (g, e) in got.iter().zip(live_seeds) {
            assert_eq!(g, e);
        }
        for g in &got {
            assert!(
                g.reason.starts_with("invalidated by hand")
                    || g.reason.starts_with("parent ")
                    || g.reason.starts_with("cites invalidated frame "),
                "{g:?}"
            );
        }
    }
    let stored = s.frames(&FrameFilter::project(P)).await.unwrap();
    for f in &stored {
        assert_eq!(f.status, tree.get(&f.frame_id).unwrap().status, "{}", f.frame_id);
    }
    assert!(s.check().await.unwrap().is_empty());
}

async fn queries(t_: &TestStore) {
    let s = &t_.store;
    project(s).await;
    let root = root_frame("Why is the CACHE cold?");
    let a = Draft {
        evidence: vec![file("src/cache.rs", "h1")],
        conclusion: "eviction at 100%_full".into(),
        ..draft("read cache")
    }
    .into_frame(P, Some("s1"), Some(&root), t(1))
    .unwrap();
    let b = Draft { evidence: vec![file("src/main.rs", "h2")], ..draft("read main") }
        .into_frame(P, None, Some(&root), t(2))
        .unwrap();
    let b1 = draft("deeper").into_frame(P, None, Some(&b), t(3)).unwrap();
    s.insert_frames(&[root.clone(), a.clone(), b.clone(), b1.clone()]).await.unwrap();
    let p = pivot(&a, Some(&root), draft("another way"), t(4)).unwrap();
    s.apply(&p).await.unwrap();
    s.invalidate(&[Invalidation::new(b.frame_id.clone(), &Cause::Manual(String::new()))], None, t(5)).await.unwrap();

    let q =
        |f: FrameFilter| async move { s.frames(&f).await.unwrap().into_iter().map(|f| f.query).collect::<Vec<_>>() };
    let base = || FrameFilter::project(P);
    assert_eq!(
        q(FrameFilter { status: Some(Status::Active), ..base() }).await,
        vec!["Why is the CACHE cold?", "another way"]
    );
    assert_eq!(q(FrameFilter { status: Some(Status::Suspended), ..base() }).await, vec!["read cache"]);
    assert_eq!(q(FrameFilter { status: Some(Status::Invalidated), ..base() }).await, vec!["read main", "deeper"]);
    assert_eq!(q(FrameFilter { pivots: true, ..base() }).await, vec!["another way"]);
    assert_eq!(q(FrameFilter { file: Some("src/cache.rs".into()), ..base() }).await, vec!["read cache"]);
    assert_eq!(q(FrameFilter { file: Some("src/none.rs".into()), ..base() }).await, Vec::<String>::new());
    assert_eq!(
        q(FrameFilter { text: Some("cache".into()), ..base() }).await,
        vec!["Why is the CACHE cold?", "read cache"]
    );
    assert_eq!(q(FrameFilter { text: Some("100%_".into()), ..base() }).await, vec!["read cache"]);
    assert_eq!(q(FrameFilter { text: Some("0%x".into()), ..base() }).await, Vec::<String>::new(), "% is literal");
    // The pivot stays in the session of the frame it branched from.
    assert_eq!(q(FrameFilter { session_id: Some("s1".into()), ..base() }).await, vec!["read cache", "another way"]);
    assert_eq!(q(FrameFilter { under: Some(b.frame_id.clone()), ..base() }).await, vec!["read main", "deeper"]);
    assert_eq!(q(FrameFilter { limit: Some(2), ..base() }).await, vec!["deeper", "another way"]);
    assert_eq!(s.count(&base()).await.unwrap(), 5);
    assert_eq!(s.count(&FrameFilter::project("git:nobody")).await.unwrap(), 0);
}

async fn sessions_round_trip(t_: &TestStore) {
    let s = &t_.store;
    project(s).await;
    let tracked =
        Draft { evidence: vec![file("a.rs", "1")], ..draft("uses a.rs") }.into_frame(P, None, None, t(0)).unwrap();
    s.insert_frames(std::slice::from_ref(&tracked)).await.unwrap();
    let mut files = std::collections::BTreeMap::new();
    for i in 0..1000 {
        files.insert(format!("dir/f{i:04}.rs"), FileEntry { hash: format!("{i:064x}"), role: FileRole::Created });
    }
    files.insert("a.rs".into(), FileEntry { hash: "2".into(), role: FileRole::Modified });
    let mut sessions = Vec::new();
    for (i, prompt) in [Some("first"), None].into_iter().enumerate() {
        let id = format!("session-{i}");
        let root = draft("session root").into_frame(P, Some(&id), None, t(10 + i as i64)).unwrap();
        let art = SessionArtifacts {
            session_id: id.clone(),
            project_id: P.into(),
            initial_prompt: prompt.map(str::to_owned),
            files: files.clone(),
            scope: vec![String::new()],
            root_frame_id: Some(root.frame_id.clone()),
            conversation_log: (i == 0).then(|| "/tmp/log.jsonl".to_owned()),
            created_at: t(10 + i as i64),
        };
        let seeds = if i == 0 {
            vec![Invalidation::new(
                tracked.frame_id.clone(),
                &Cause::FileChanged { path: "a.rs".into(), was: "1".into(), now: Some("2".into()) },
            )]
        } else {
            vec![]
        };
        let hit = s.begin_session(&art, &root, &seeds).await.unwrap();
        assert_eq!(hit.len(), seeds.len());
        sessions.push(art);
    }
    let back = s.sessions(P, 10).await.unwrap();
    assert_eq!(back.len(), 2);
    assert_eq!(back[0], sessions[1], "newest first");
    assert_eq!(back[1], sessions[0]);
    assert_eq!(s.session("session-0").await.unwrap().as_ref(), Some(&sessions[0]));
    assert_eq!(s.latest_session_root(P).await.unwrap(), sessions[1].root_frame_id);
    assert_eq!(s.latest_session_root("git:none").await.unwrap(), None);
    assert!(s.session("nope").await.unwrap().is_none());
    let inv = s.invalidated_in_session("session-0").await.unwrap();
    assert_eq!(inv, vec![Invalidation { frame_id: tracked.frame_id.clone(), reason: "file a.rs changed".into() }]);
    assert!(s.invalidated_in_session("session-1").await.unwrap().is_empty());
    let h = s.frame(&tracked.frame_id).await.unwrap().unwrap().timestamps.history;
    assert_eq!(h.last().unwrap().session_id.as_deref(), Some("session-0"));
    // A session whose root is not named by it is refused.
    let root = draft("x").into_frame(P, None, None, t(20)).unwrap();
    let bad = SessionArtifacts { session_id: "s-bad".into(), root_frame_id: None, ..sessions[0].clone() };
    assert!(s.begin_session(&bad, &root, &[]).await.is_err());
    // A solve episode's files: readable by id, never the previous session
    // nor the parent of later runs.
    let root = draft("solve: fix").into_frame(P, Some("solve-ep1"), None, t(30)).unwrap();
    let episode = SessionArtifacts {
        session_id: "solve-ep1".into(),
        root_frame_id: Some(root.frame_id.clone()),
        created_at: t(30),
        ..sessions[0].clone()
    };
    s.record_session(&NewSession {
        kind: SessionKind::Episode,
        artifacts: &episode,
        frames: std::slice::from_ref(&root),
        source_hash: None,
    })
    .await
    .unwrap();
    assert_eq!(s.session("solve-ep1").await.unwrap().as_ref(), Some(&episode));
    assert_eq!(s.sessions(P, 10).await.unwrap()[0], sessions[1], "still the newest working session");
    assert_eq!(s.latest_session_root(P).await.unwrap(), sessions[1].root_frame_id);
    assert!(s.check().await.unwrap().is_empty());
}

fn artifacts(id: &str, root: &noesis_frames::CausalFrame, at: i64) -> SessionArtifacts {
    SessionArtifacts {
        session_id: id.into(),
        project_id: P.into(),
        initial_prompt: Some(root.query.clone()),
        files: [("a.rs".to_owned(), FileEntry { hash: "h1".into(), role: FileRole::Modified })].into(),
        scope: vec![],
        root_frame_id: Some(root.frame_id.clone()),
        conversation_log: Some("/tmp/t.jsonl".into()),
        created_at: t(at),
    }
}

async fn recorded_sessions_keep_their_frames_and_links(t_: &TestStore) {
    let s = &t_.store;
    project(s).await;
    let root = draft("fix the parser").into_frame(P, Some("tr-1"), None, t(0)).unwrap();
    let call = draft("Edit a.rs").into_frame(P, Some("tr-1"), Some(&root), t(1)).unwrap();
    let sub = draft("Read a.rs").into_frame(P, Some("tr-1"), Some(&call), t(2)).unwrap();
    let art = artifacts("tr-1", &root, 0);
    let new = NewSession {
        kind: SessionKind::Transcript,
        artifacts: &art,
        frames: &[root.clone(), call.clone(), sub.clone()],
        source_hash: Some("abc"),
    };
    s.record_session(&new).await.unwrap();
    assert_eq!(s.session("tr-1").await.unwrap().as_ref(), Some(&art));
    let under = s.frames(&FrameFilter { under: Some(root.frame_id.clone()), ..FrameFilter::project(P) }).await.unwrap();
    assert_eq!(under.len(), 3, "the root and its whole tree");
    assert_eq!(s.session_by_source(P, "abc").await.unwrap().as_deref(), Some("tr-1"));
    assert_eq!(s.session_by_source(P, "abd").await.unwrap(), None);
    assert!(s.sessions(P, 10).await.unwrap().is_empty(), "a transcript is never the previous session");
    // A broken tree leaves nothing behind: not the session, not a frame.
    let root2 = draft("second").into_frame(P, Some("tr-2"), None, t(5)).unwrap();
    let orphan = draft("orphan").into_frame(P, Some("tr-2"), Some(&sub), t(6)).unwrap();
    let art2 = artifacts("tr-2", &root2, 5);
    let bad = NewSession { frames: &[root2.clone(), orphan.clone(), orphan.clone()], artifacts: &art2, ..new };
    assert!(s.record_session(&bad).await.is_err());
    assert!(s.session("tr-2").await.unwrap().is_none());
    assert!(s.frame(&root2.frame_id).await.unwrap().is_none());
    let working =
        NewSession { kind: SessionKind::Working, artifacts: &art2, frames: std::slice::from_ref(&root2), ..new };
    assert!(s.record_session(&working).await.is_err(), "working sessions start by a scan");
    s.record_session(&NewSession { frames: std::slice::from_ref(&root2), artifacts: &art2, source_hash: None, ..new })
        .await
        .unwrap();

    assert_eq!(
        s.session_kinds(P).await.unwrap(),
        vec![("tr-2".to_owned(), SessionKind::Transcript), ("tr-1".to_owned(), SessionKind::Transcript)],
        "every kind, newest first"
    );
    // Links: undirected, both ends must exist, removable.
    let l = SessionLink::new("tr-2", "tr-1", Some("same bug".into()), t(9)).unwrap();
    assert!(s.link_sessions(&l).await.unwrap());
    let again = SessionLink { reason: Some("same parser bug".into()), ..l.clone() };
    assert!(!s.link_sessions(&again).await.unwrap(), "already linked");
    assert_eq!(s.session_links(P).await.unwrap(), vec![again]);
    let e = s.link_sessions(&SessionLink::new("tr-1", "nope", None, t(9)).unwrap()).await.unwrap_err();
    assert!(e.to_string().contains("no session nope"), "{e}");
    assert!(s.unlink_sessions("tr-2", "tr-1").await.unwrap());
    assert!(!s.unlink_sessions("tr-1", "tr-2").await.unwrap());
    assert!(s.session_links(P).await.unwrap().is_empty());
    assert!(s.check().await.unwrap().is_empty());
}

async fn file_conditions_and_expiry(t_: &TestStore) {
    let s = &t_.store;
    project(s).await;
    let a =
        Draft { evidence: vec![file("b", "2"), file("a", "1")], ..draft("a") }.into_frame(P, None, None, t(0)).unwrap();
    let gone = Draft { evidence: vec![file("c", "3")], ..draft("gone") }.into_frame(P, None, None, t(0)).unwrap();
    let exp =
        Draft { condition: InvalidationCondition { expires_at: Some(t(50)), ..Default::default() }, ..draft("exp") }
            .into_frame(P, None, None, t(0))
            .unwrap();
    s.insert_frames(&[a.clone(), gone.clone(), exp.clone()]).await.unwrap();
    s.invalidate(&[Invalidation::new(gone.frame_id.clone(), &Cause::Manual(String::new()))], None, t(1)).await.unwrap();
    let conds = s.file_conditions(P).await.unwrap();
    let got: Vec<(&FrameId, &str)> = conds.iter().map(|(f, r)| (f, r.path.as_str())).collect();
    assert_eq!(got, vec![(&a.frame_id, "a"), (&a.frame_id, "b")], "only live frames");
    assert!(s.expired(P, t(49)).await.unwrap().is_empty());
    assert_eq!(s.expired(P, t(50)).await.unwrap(), vec![(exp.frame_id.clone(), t(50))]);
}

async fn prefixes_resolve(t_: &TestStore) {
    let s = &t_.store;
    project(s).await;
    let a = root_frame("a");
    let b = root_frame("b");
    s.insert_frames(&[a.clone(), b.clone()]).await.unwrap();
    assert_eq!(s.resolve(Some(P), a.frame_id.as_str()).await.unwrap(), a.frame_id);
    let common: String =
        a.frame_id.as_str().chars().zip(b.frame_id.as_str().chars()).take_while(|(x, y)| x == y).map(|p| p.0).collect();
    if !common.is_empty() {
        let e = s.resolve(Some(P), &common).await.unwrap_err().to_string();
        assert!(e.contains("more than one frame"), "{e}");
    }
    let e = s.resolve(Some("git:other"), a.frame_id.as_str()).await.unwrap_err().to_string();
    assert!(e.contains("no frame") && e.contains("git:other"), "{e}");
    let e = s.resolve(None, "50%").await.unwrap_err().to_string();
    assert!(e.contains("`50%` is not a frame id"), "{e}");
    let upper = a.frame_id.as_str().to_uppercase();
    assert_eq!(s.resolve(None, &upper).await.unwrap(), a.frame_id);
}

async fn migrations_run_once_and_refuse_newer_schemas(t_: &TestStore) {
    let s = &t_.store;
    project(s).await;
    s.insert_frames(&[root_frame("kept")]).await.unwrap();
    // Reopening is a no-op that keeps the data.
    let again = noesis_store::SqlStore::open(&t_.url).await.unwrap();
    assert_eq!(again.count(&FrameFilter::project(P)).await.unwrap(), 1);
    again.close().await;
    let blob = if t_.url.starts_with("postgres") { "'\\x00'::bytea" } else { "X'00'" };
    raw(
        &t_.url,
        &format!(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES (999, 'from the future', TRUE, {blob}, 0)"
        ),
    )
    .await;
    let e = noesis_store::SqlStore::open(&t_.url).await.unwrap_err();
    assert!(matches!(e, StoreError::NewerSchema { found: 999, known: noesis_store::SCHEMA_VERSION, .. }), "{e}");
    assert!(e.to_string().contains("upgrade noesis"), "{e}");
}

/// A store made by the hand-written migration runner of earlier builds
/// (`noesis_migrations`) is adopted: nothing is re-run, its data stays,
/// and a later version is still applied.
async fn stores_of_the_earlier_runner_are_adopted(t_: &TestStore) {
    let s = &t_.store;
    project(s).await;
    s.insert_frames(&[root_frame("kept")]).await.unwrap();
    let legacy = |versions: &str| {
        format!(
            // Tables of later versions did not exist in the earlier runner's day.
            "DROP TABLE batch_items; DROP TABLE batches; DROP TABLE run_leases; DROP TABLE agent_run_events; DROP TABLE session_links; DROP INDEX sessions_by_source; ALTER TABLE sessions DROP COLUMN source_hash; ALTER TABLE sessions DROP COLUMN kind; DROP TABLE IF EXISTS memory_fts; DROP TABLE memory_entries; DROP TABLE workflow_states; DROP TABLE agent_run_states; DROP TABLE agent_runs; DROP TABLE _sqlx_migrations; \
             CREATE TABLE noesis_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL); \
             INSERT INTO noesis_migrations (version, name, applied_at) VALUES {versions}"
        )
    };
    for sql in legacy("(1, 'frames', 0), (2, 'emitted context', 0)").split("; ") {
        raw(&t_.url, sql).await;
    }
    let again = noesis_store::SqlStore::open(&t_.url).await.unwrap();
    assert_eq!(again.count(&FrameFilter::project(P)).await.unwrap(), 1);
    again.close().await;
    // Adopted: sqlx's table holds both versions, the old one is gone.
    sqlx::any::install_default_drivers();
    let pool = sqlx::any::AnyPoolOptions::new().max_connections(1).connect(&t_.url).await.unwrap();
    let applied: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE success").fetch_one(&pool).await.unwrap();
    assert_eq!(applied, noesis_store::SCHEMA_VERSION, "versions 1 and 2 adopted, the rest applied");
    assert!(sqlx::query("SELECT 1 FROM noesis_migrations").fetch_optional(&pool).await.is_err());
    pool.close().await;
    // An old store at version 1 gets version 2 applied.
    raw(&t_.url, "DROP TABLE context_entries").await;
    for sql in legacy("(1, 'frames', 0)").split("; ") {
        raw(&t_.url, sql).await;
    }
    let again = noesis_store::SqlStore::open(&t_.url).await.unwrap();
    again.close().await;
    let pool = sqlx::any::AnyPoolOptions::new().max_connections(1).connect(&t_.url).await.unwrap();
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM context_entries").fetch_one(&pool).await.unwrap();
    assert_eq!(rows, 0, "migration 2 ran on the version-1 store");
    pool.close().await;
    // A newer earlier-runner store is refused the same way.
    for sql in legacy("(1, 'frames', 0), (77, 'future', 0)").split("; ") {
        raw(&t_.url, sql).await;
    }
    let e = noesis_store::SqlStore::open(&t_.url).await.unwrap_err();
    assert!(matches!(e, StoreError::NewerSchema { found: 77, .. }), "{e}");
}

async fn agent_run_states_are_kept_by_step(t_: &TestStore) {
    use noesis_store::AgentState;
    let s = &t_.store;
    project(s).await;
    let state = |step: i64, status: &str| AgentState {
        run_id: "run-1".into(),
        project_id: P.into(),
        task: "fix the bug".into(),
        status: status.into(),
        step,
        forked_from: None,
        state: serde_json::json!({"schema_version": 1, "step": step}),
        at: step * 10,
    };
    assert_eq!(s.agent_state("run-1", None).await.unwrap(), None);
    for (step, status) in [(1, "running"), (4, "awaiting_approval"), (9, "done")] {
        s.save_agent_state(&state(step, status)).await.unwrap();
    }
    // A retried checkpoint of the same step keeps the last.
    s.save_agent_state(&state(9, "done")).await.unwrap();
    let latest = s.agent_state("run-1", None).await.unwrap().unwrap();
    assert_eq!((latest.step, latest.status.as_str(), &latest.state["step"]), (9, "done", &serde_json::json!(9)));
    // At a step: the last state stored at or before it (what fork and replay start from).
    let at = s.agent_state("run-1", Some(5)).await.unwrap().unwrap();
    assert_eq!((at.step, &at.state["step"]), (4, &serde_json::json!(4)));
    assert_eq!(s.agent_state("run-1", Some(0)).await.unwrap(), None);
    let forked =
        AgentState { run_id: "run-2".into(), forked_from: Some("run-1".into()), at: 100, ..state(4, "running") };
    s.save_agent_state(&forked).await.unwrap();
    let runs = s.agent_runs(P, 10).await.unwrap();
    let listed: Vec<(&str, i64, Option<&str>)> =
        runs.iter().map(|r| (r.run_id.as_str(), r.latest_step, r.forked_from.as_deref())).collect();
    assert_eq!(listed, [("run-2", 4, Some("run-1")), ("run-1", 9, None)]);
    // The original is untouched by the fork.
    assert_eq!(s.agent_state("run-1", None).await.unwrap().unwrap().step, 9);
    // The consistency check sees a summary whose state is gone.
    assert!(s.check().await.unwrap().is_empty());
    raw(&t_.url, "DELETE FROM agent_run_states WHERE run_id = 'run-1' AND step = 9").await;
    assert_eq!(s.check().await.unwrap(), ["agent run without its latest state: run-1"]);
}

/// A run that grows by a 4 KiB tool result per step, as stored: every
/// step reads back as saved, and the bytes stored follow the steps' sizes,
/// not the run's (whole copies would take Σ state sizes, quadratic).
async fn agent_runs_are_a_log_of_changes(t_: &TestStore) {
    use noesis_store::AgentState;
    let s = &t_.store;
    project(s).await;
    let steps = 300_i64;
    let mut state =
        serde_json::json!({"schema_version": 1, "step": 0, "status": "running", "calls": [], "entries": []});
    let mut saved = Vec::new();
    let mut whole_copies = 0usize;
    for step in 1..=steps {
        state["step"] = serde_json::json!(step);
        let calls = state["calls"].as_array_mut().unwrap();
        if let Some(last) = calls.last_mut() {
            last["status"] = serde_json::json!("completed");
        }
        calls.push(serde_json::json!({"id": format!("c{step}"), "status": "running",
                                      "result": format!("{step}:").repeat(4096 / (step.to_string().len() + 1))}));
        state["entries"].as_array_mut().unwrap().push(serde_json::json!({"kind": "tool_result", "call_id": step}));
        whole_copies += state.to_string().len();
        let row = AgentState {
            run_id: "long".into(),
            project_id: P.into(),
            task: "t".into(),
            status: "running".into(),
            step,
            forked_from: None,
            state: state.clone(),
            at: step,
        };
        s.save_agent_state(&row).await.unwrap();
        saved.push(state.clone());
    }
    for step in [1, 2, 17, 64, 65, 150, 299, 300] {
        let back = s.agent_state("long", Some(step)).await.unwrap().unwrap();
        assert_eq!((back.step, &back.state), (step, &saved[usize::try_from(step - 1).unwrap()]), "step {step}");
    }
    assert_eq!(s.agent_state("long", None).await.unwrap().unwrap().state, saved[299]);
    let stored = agent_log_bytes(&t_.url, "long").await;
    let last = saved[299].to_string().len();
    assert!(stored < 4 * last, "stored {stored} bytes for a final state of {last}");
    assert!(stored * 20 < whole_copies, "stored {stored} bytes; whole copies would be {whole_copies}");
    assert!(s.check().await.unwrap().is_empty());
}

async fn agent_log_bytes(url: &str, run: &str) -> usize {
    sqlx::any::install_default_drivers();
    let pool = sqlx::any::AnyPoolOptions::new().max_connections(1).connect(url).await.unwrap();
    let rows: Vec<String> = sqlx::query_scalar("SELECT state FROM agent_run_states WHERE run_id = $1")
        .bind(run.to_owned())
        .fetch_all(&pool)
        .await
        .unwrap();
    pool.close().await;
    rows.iter().map(String::len).sum()
}

/// Two store handles on one database writing one run: a delta is never
/// applied to a base its writer did not see, and a writer behind the
/// stored step is refused instead of moving the run back.
async fn a_stale_base_or_writer_never_breaks_the_log(t_: &TestStore) {
    use noesis_store::AgentState;
    let a = &t_.store;
    project(a).await;
    let b = noesis_store::SqlStore::open(&t_.url).await.unwrap();
    let state = |step: i64, who: &str| AgentState {
        run_id: "shared".into(),
        project_id: P.into(),
        task: "t".into(),
        status: "running".into(),
        step,
        forked_from: None,
        state: serde_json::json!({"step": step, "by": who, "items": (0..step).collect::<Vec<_>>()}),
        at: step,
    };
    for step in 1..=3 {
        a.save_agent_state(&state(step, "a")).await.unwrap();
    }
    b.save_agent_state(&state(4, "b")).await.unwrap();
    // a's last base is step 3; the store is at 4: a's step 5 must not be a delta from 3.
    a.save_agent_state(&state(5, "a")).await.unwrap();
    assert_eq!(a.agent_state("shared", None).await.unwrap().unwrap().state, state(5, "a").state);
    assert_eq!(b.agent_state("shared", Some(4)).await.unwrap().unwrap().state, state(4, "b").state);
    let e = b.save_agent_state(&state(3, "b")).await.unwrap_err();
    assert!(matches!(&e, StoreError::Conflict(m) if m.contains("holds step 5, ahead of this writer's step 3")), "{e}");
    let summary = a.agent_runs(P, 10).await.unwrap();
    assert_eq!(summary[0].latest_step, 5, "never moved back");
    assert!(a.check().await.unwrap().is_empty());
    b.close().await;
}

async fn run_leases_fence_stale_holders(t_: &TestStore) {
    use noesis_store::{AgentState, LeaseGrant};
    let s = &t_.store;
    project(s).await;
    let state = |step: i64| AgentState {
        run_id: "leased".into(),
        project_id: P.into(),
        task: "t".into(),
        status: "running".into(),
        step,
        forked_from: None,
        state: serde_json::json!({"step": step}),
        at: 1_000 + step,
    };
    let LeaseGrant::Granted(a) = s.acquire_run_lease("leased", "a", 100, 1_000).await.unwrap() else { panic!() };
    assert_eq!(a.epoch, 1);
    s.save_agent_state_held(&state(1), Some(&a)).await.unwrap();
    // Live: another holder is told who has it; a write without the lease is refused.
    match s.acquire_run_lease("leased", "b", 100, 1_050).await.unwrap() {
        LeaseGrant::Held(h) => assert_eq!((h.holder.as_str(), h.epoch), ("a", 1)),
        other => panic!("{other:?}"),
    }
    assert!(s.save_agent_state(&state(2)).await.unwrap_err().is_fenced());
    // The write at 1_001 was a heartbeat: the lease runs to 1_101 now, not 1_100.
    assert!(matches!(s.acquire_run_lease("leased", "b", 100, 1_100).await.unwrap(), LeaseGrant::Held(_)));
    // Lapsed: b takes it over with a higher epoch, and a's next write is refused.
    let LeaseGrant::Granted(b) = s.acquire_run_lease("leased", "b", 100, 5_000).await.unwrap() else { panic!() };
    assert_eq!(b.epoch, 2);
    let e = s.save_agent_state_held(&state(2), Some(&a)).await.unwrap_err();
    assert!(e.is_fenced() && e.to_string().contains("held by b"), "{e}");
    assert!(s.renew_run_lease(&a, 100, 5_001).await.unwrap_err().is_fenced());
    s.save_agent_state_held(&state(2), Some(&b)).await.unwrap();
    // a giving up what it no longer holds changes nothing.
    s.release_run_lease(&a).await.unwrap();
    assert_eq!(s.run_lease("leased").await.unwrap().map(|h| h.holder), Some("b".into()));
    s.release_run_lease(&b).await.unwrap();
    assert_eq!(s.run_lease("leased").await.unwrap(), None);
    assert_eq!(s.agent_state("leased", None).await.unwrap().unwrap().step, 2);
}

async fn batch_items_are_answered_once(t_: &TestStore) {
    use noesis_store::Batch;
    use serde_json::json;
    let s = &t_.store;
    let batch = Batch {
        batch_id: "b1".into(),
        project_id: P.into(),
        module: "summarise".into(),
        spec: json!({"provider": "openai"}),
        total: 3,
        created_at: 5,
    };
    let inputs = [json!({"n": 0}), json!({"n": 1}), json!({"n": 2})];
    assert_eq!(s.batch("b1").await.unwrap(), None);
    // A count that does not match the inputs stores nothing.
    let short = Batch { total: 4, ..batch.clone() };
    assert!(matches!(s.create_batch(&short, &inputs).await, Err(StoreError::Conflict(_))));
    assert_eq!(s.batch("b1").await.unwrap(), None);
    s.create_batch(&batch, &inputs).await.unwrap();
    assert_eq!(s.batch("b1").await.unwrap(), Some(batch.clone()));
    let again = s.create_batch(&batch, &inputs).await.unwrap_err();
    assert!(matches!(again, StoreError::Conflict(_)), "{again}");
    let middle = s.batch_items("b1", 1, 3).await.unwrap();
    assert_eq!(
        middle.iter().map(|i| (i.idx, i.input.clone())).collect::<Vec<_>>(),
        [(1, inputs[1].clone()), (2, inputs[2].clone())]
    );
    assert!(middle.iter().all(|i| i.output.is_none()));
    assert_eq!(s.batch_answered("b1").await.unwrap(), 0);
    assert!(s.answer_batch_item("b1", 1, &json!({"ok": true}), "w1", 10).await.unwrap());
    // A second answer (a slice retried elsewhere) is not kept.
    assert!(!s.answer_batch_item("b1", 1, &json!({"ok": false}), "w2", 11).await.unwrap());
    let one = s.batch_items("b1", 1, 2).await.unwrap().remove(0);
    assert_eq!((one.output, one.answered_by.as_deref()), (Some(json!({"ok": true})), Some("w1")));
    assert_eq!(s.batch_answered("b1").await.unwrap(), 1);
    assert!(!s.answer_batch_item("b1", 9, &json!({}), "w1", 12).await.unwrap(), "no such item");
}

async fn streamed_events_are_kept_by_id_and_never_reused(t_: &TestStore) {
    use noesis_store::RunEvent;
    let s = &t_.store;
    let ev = |seq: i64, kind: &str| RunEvent { seq, kind: kind.into(), data: serde_json::json!({"n": seq}), at: seq };
    assert_eq!(s.last_run_event("r").await.unwrap(), 0);
    s.append_run_events("r", &[ev(1, "run_started"), ev(2, "model_call")]).await.unwrap();
    s.append_run_events("r", &[ev(3, "done")]).await.unwrap();
    s.append_run_events("other", &[ev(1, "run_started")]).await.unwrap();
    assert_eq!(s.last_run_event("r").await.unwrap(), 3);
    let after: Vec<(i64, String)> =
        s.run_events("r", 1, 10).await.unwrap().into_iter().map(|e| (e.seq, e.kind)).collect();
    assert_eq!(after, [(2, "model_call".to_owned()), (3, "done".to_owned())]);
    assert_eq!(s.run_events("r", 0, 1).await.unwrap()[0].data, serde_json::json!({"n": 1}));
    // An id is never given to another event; the batch is refused whole.
    let e = s.append_run_events("r", &[ev(4, "x"), ev(3, "again")]).await.unwrap_err();
    assert!(matches!(&e, StoreError::Conflict(m) if m.contains("event 3 is stored already")), "{e}");
    assert_eq!(s.last_run_event("r").await.unwrap(), 3);
}

async fn workflow_versions_never_overwrite_each_other(t_: &TestStore) {
    use noesis_store::WorkflowVersion;
    let s = &t_.store;
    project(s).await;
    let v = |version: i64, node: &str| WorkflowVersion {
        project_id: P.into(),
        version,
        episode_id: "ep1".into(),
        node: node.into(),
        status: "active".into(),
        command: format!("step {version}"),
        state: serde_json::json!({"current_node": node, "n": version}),
        episode: serde_json::json!({"tests": ["t"]}),
        at: version * 10,
    };
    assert_eq!(s.workflow_state(P, None).await.unwrap(), None);
    // The first version is 1; a version not right after the head is refused.
    assert!(matches!(s.append_workflow_state(&v(2, "PLANNER")).await, Err(StoreError::Conflict(_))));
    s.append_workflow_state(&v(1, "PLANNER")).await.unwrap();
    s.append_workflow_state(&v(2, "REASONER")).await.unwrap();
    let e = s.append_workflow_state(&v(2, "CODER")).await.unwrap_err();
    assert!(matches!(e, StoreError::Conflict(_)), "{e}");
    assert_eq!(s.workflow_state(P, None).await.unwrap().unwrap().node, "REASONER");
    assert_eq!(s.workflow_state(P, Some(1)).await.unwrap().unwrap().state["n"], 1);
    assert_eq!(s.workflow_state(P, None).await.unwrap().unwrap().episode, serde_json::json!({"tests": ["t"]}));
    assert_eq!(s.workflow_state(P, Some(7)).await.unwrap(), None);
    assert_eq!(s.workflow_state("other", None).await.unwrap(), None);
    // Writers racing from the same head: exactly one wins each version,
    // and every loser that retries on the new head gets in.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let url = t_.url.clone();
        tasks.push(tokio::spawn(async move {
            let store = noesis_store::open(&url).await.unwrap();
            let mut conflicts = 0;
            loop {
                let head = store.workflow_state(P, None).await.unwrap().unwrap();
                let mut next = head.clone();
                next.version += 1;
                next.command = format!("writer {i}");
                next.state["writers"] = serde_json::json!(
                    [head.state["writers"].as_array().cloned().unwrap_or_default(), vec![serde_json::json!(i)]]
                        .concat()
                );
                match store.append_workflow_state(&next).await {
                    Ok(()) => return conflicts,
                    Err(StoreError::Conflict(_)) => conflicts += 1,
                    Err(e) if e.is_busy() => conflicts += 1,
                    Err(e) => panic!("{e}"),
                }
                tokio::time::sleep(std::time::Duration::from_millis(1 + i)).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let history = s.workflow_history(P).await.unwrap();
    assert_eq!(history.iter().map(|h| h.version).collect::<Vec<_>>(), (1..=10).collect::<Vec<_>>());
    let mut writers: Vec<i64> =
        history.last().unwrap().state["writers"].as_array().unwrap().iter().map(|w| w.as_i64().unwrap()).collect();
    writers.sort_unstable();
    assert_eq!(writers, (0..8).collect::<Vec<_>>(), "no writer's change was lost");
}

async fn memory_is_searched_by_any_word_best_first(t_: &TestStore) {
    use noesis_store::{MemoryQuery, NewMemory};
    let s = &t_.store;
    project(s).await;
    let entry = |episode: &str, kind: &str, text: &str, at: i64| NewMemory {
        project_id: P.into(),
        episode_id: episode.into(),
        kind: kind.into(),
        text: text.into(),
        record: serde_json::json!({"episode": episode}),
        at,
    };
    s.replace_memory(
        "ep1",
        &[
            entry("ep1", "episode", "Fix the parser: tokens split wrongly on unicode quotes", 1),
            entry("ep1", "lesson", "run the whole test suite before finishing", 2),
        ],
    )
    .await
    .unwrap();
    s.replace_memory("ep2", &[entry("ep2", "episode", "Speed up the cache eviction", 3)]).await.unwrap();
    let mut other = entry("ep3", "episode", "Fix the parser of another project", 4);
    other.project_id = "other".into();
    s.replace_memory("ep3", &[other]).await.unwrap();
    let find = |text: &'static str, kind: Option<&'static str>, project: Option<&'static str>| async move {
        let q = MemoryQuery { text, project_id: project, kind, limit: 10 };
        s.search_memory(&q).await.unwrap().into_iter().map(|m| m.entry.episode_id).collect::<Vec<_>>()
    };
    assert_eq!(find("parser", None, Some(P)).await, ["ep1"]);
    assert_eq!(find("parser", None, None).await.len(), 2, "every project when none is named");
    // Any word matches; the entry sharing more of them ranks first; stems
    // match (`tests` finds `test`).
    assert_eq!(find("cache parser tokens quotes", Some("episode"), Some(P)).await, ["ep1", "ep2"]);
    assert_eq!(find("tests", Some("lesson"), Some(P)).await, ["ep1"]);
    // Whatever a person types is taken as words, never as search syntax.
    assert_eq!(find("\"parser\" OR NEAR(x) -- *", None, Some(P)).await, ["ep1"]);
    assert!(find("\":*()", None, Some(P)).await.is_empty());
    // Archiving an episode again replaces what was kept of it.
    s.replace_memory("ep1", &[entry("ep1", "episode", "Fix the lexer", 5)]).await.unwrap();
    assert!(find("parser", None, Some(P)).await.is_empty());
    assert_eq!(find("lexer", None, Some(P)).await, ["ep1"]);
    assert!(find("suite", None, Some(P)).await.is_empty(), "the old lesson is gone");
}

async fn check_finds_partial_frames(t_: &TestStore) {
    let s = &t_.store;
    project(s).await;
    let f = Draft { evidence: vec![file("x", "1"), file("y", "2")], ..draft("two files") }
        .into_frame(P, None, None, t(0))
        .unwrap();
    s.insert_frames(std::slice::from_ref(&f)).await.unwrap();
    assert!(s.check().await.unwrap().is_empty());
    raw(
        &t_.url,
        &format!(
            "DELETE FROM frame_files WHERE path = 'y' AND frame_seq = (SELECT seq FROM frames WHERE frame_id = '{}')",
            f.frame_id
        ),
    )
    .await;
    let problems = s.check().await.unwrap();
    assert_eq!(problems, vec![format!("file conditions missing: {}", f.frame_id)]);
}
