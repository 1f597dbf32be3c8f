//! Rows to frames and frames to rows: bound arguments, column lists,
//! decoding, and the checks a frame passes before it is written.

use super::*;

pub(super) fn bind_args<'q>(
    mut q: sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments>,
    args: &[Arg],
) -> sqlx::query::Query<'q, sqlx::Any, sqlx::any::AnyArguments> {
    for a in args {
        match a {
            Arg::Text(t) => q = q.bind(t.clone()),
            Arg::Int(i) => q = q.bind(*i),
        }
    }
    q
}

pub(super) fn u32_of(v: i64, what: &str) -> Result<u32, StoreError> {
    u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("{what}: {v} is out of range")))
}

pub(super) fn status_of(text: &str, frame: &str) -> Result<Status, StoreError> {
    Status::from_str(text).map_err(|_| StoreError::Corrupt(format!("frame {frame}: status `{text}`")))
}

pub(super) fn id_of(text: String) -> Result<FrameId, StoreError> {
    FrameId::parse(&text).map_err(|_| StoreError::Corrupt(format!("frame id `{text}`")))
}

/// The columns `frame_of_row` reads, from `frames f` joined with its parent
/// `p`; the last is the integer key.
pub(super) const FRAME_SELECT: &str = "f.frame_id, f.project_id, f.session_id, p.frame_id, f.depth, f.query, f.context_slice, \
     f.evidence, f.conclusion, f.confidence, f.expires_at, f.note, st.status, f.branched_from, f.created_at, \
     st.updated_at, f.seq";

/// Columns written by an insert, in bind order.
pub(super) const FRAME_INSERT: &str = "seq, frame_id, project_id, session_id, parent_seq, depth, query, context_slice, evidence, \
     conclusion, confidence, expires_at, note, branched_from, created_at, n_files, n_deps";

pub(super) fn frame_of_row(r: &AnyRow) -> Result<(i64, CausalFrame), StoreError> {
    let get = |e: sqlx::Error| StoreError::Corrupt(format!("frames row: {e}"));
    let id: String = r.try_get(0).map_err(get)?;
    let evidence_text: String = r.try_get(7).map_err(get)?;
    let evidence: Vec<Evidence> = serde_json::from_str(&evidence_text)
        .map_err(|e| StoreError::Corrupt(format!("frame {id}: evidence is not valid JSON: {e}")))?;
    let status: String = r.try_get(12).map_err(get)?;
    let frame = CausalFrame {
        status: status_of(&status, &id)?,
        project_id: r.try_get(1).map_err(get)?,
        session_id: r.try_get(2).map_err(get)?,
        parent_id: r.try_get::<Option<String>, _>(3).map_err(get)?.map(id_of).transpose()?,
        depth: u32_of(r.try_get(4).map_err(get)?, "depth")?,
        children: Vec::new(),
        query: r.try_get(5).map_err(get)?,
        context_slice: r.try_get(6).map_err(get)?,
        evidence,
        conclusion: r.try_get(8).map_err(get)?,
        confidence: r.try_get(9).map_err(get)?,
        invalidation_condition: InvalidationCondition {
            files: Vec::new(),
            frames: Vec::new(),
            expires_at: r.try_get::<Option<i64>, _>(10).map_err(get)?.map(Timestamp::from_millis),
            note: r.try_get(11).map_err(get)?,
        },
        branched_from: r.try_get::<Option<String>, _>(13).map_err(get)?.map(id_of).transpose()?,
        timestamps: Timestamps {
            created_at: Timestamp::from_millis(r.try_get(14).map_err(get)?),
            updated_at: Timestamp::from_millis(r.try_get(15).map_err(get)?),
            history: Vec::new(),
        },
        frame_id: id_of(id)?,
    };
    Ok((r.try_get(16).map_err(get)?, frame))
}

/// What inserting a child needs to know about a frame already stored (or
/// earlier in the same batch).
#[derive(Debug, Clone)]
pub(super) struct Known {
    pub(super) seq: i64,
    pub(super) project_id: String,
    pub(super) depth: u32,
    pub(super) status: Status,
    /// Made up by the test model: never evidence.
    pub(super) fabricated: bool,
}

pub(super) fn check_frame(f: &CausalFrame) -> Result<(), StoreError> {
    let bad = |m: String| Err(StoreError::Invalid(format!("frame {}: {m}", f.frame_id)));
    if !(0.0..=1.0).contains(&f.confidence) {
        return bad(format!("confidence {} is not in 0..=1", f.confidence));
    }
    if f.project_id.is_empty() {
        return bad("no project".into());
    }
    match f.timestamps.history.last() {
        None => return bad("no status history".into()),
        Some(last) if last.status != f.status => {
            return bad(format!("status {} but the history ends with {}", f.status, last.status));
        }
        _ => {}
    }
    if f.timestamps.history.iter().any(|h| h.status == Status::Invalidated) {
        return bad("a frame is stored live; invalidate it afterwards".into());
    }
    if f.parent_id.is_none() && f.depth != 0 {
        return bad(format!("a root with depth {}", f.depth));
    }
    Ok(())
}
