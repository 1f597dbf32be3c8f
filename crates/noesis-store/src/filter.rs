//! Which frames a listing asks for, and the SQL that selects their ids.

use noesis_frames::{FrameId, Status};

/// A frame query: every field narrows it; the default is every frame.
/// Covers the queries of `DESIGN.md`: active, pivots, suspended,
/// invalidated, by file, by text (and by session, subtree).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FrameFilter {
    /// Only this project's frames.
    pub project_id: Option<String>,
    /// Only frames with this status.
    pub status: Option<Status>,
    /// Only frames that branched from another (pivots and backtracks).
    pub pivots: bool,
    /// Only frames whose condition names this file (stored name).
    pub file: Option<String>,
    /// Only frames whose query or conclusion contains this text (ASCII case
    /// ignored).
    pub text: Option<String>,
    /// Only frames made in this session.
    pub session_id: Option<String>,
    /// Only this frame and its descendants.
    pub under: Option<FrameId>,
    /// At most this many, the newest.
    pub limit: Option<u32>,
}

impl FrameFilter {
    /// Every frame of a project.
    #[must_use]
    pub fn project(project_id: &str) -> FrameFilter {
        FrameFilter { project_id: Some(project_id.to_owned()), ..FrameFilter::default() }
    }
}

/// A bind value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arg {
    Text(String),
    Int(i64),
}

fn like_pattern(text: &str) -> String {
    let mut p = String::from("%");
    for c in text.to_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

/// `SELECT f.seq FROM frames f WHERE …` with `$1…$n` placeholders.
pub(crate) fn ids_sql(f: &FrameFilter) -> (String, Vec<Arg>) {
    let mut sql = String::from("SELECT f.seq FROM frames f JOIN frame_state fs ON fs.seq = f.seq WHERE 1 = 1");
    let mut args = Vec::new();
    let push = |args: &mut Vec<Arg>, v: String| {
        args.push(Arg::Text(v));
        format!("${}", args.len())
    };
    if let Some(p) = &f.project_id {
        sql += &format!(" AND f.project_id = {}", push(&mut args, p.clone()));
    }
    if let Some(s) = f.status {
        sql += &format!(" AND fs.status = {}", push(&mut args, s.as_str().to_owned()));
    }
    if f.pivots {
        sql += " AND f.branched_from IS NOT NULL";
    }
    if let Some(s) = &f.session_id {
        sql += &format!(" AND f.session_id = {}", push(&mut args, s.clone()));
    }
    if let Some(path) = &f.file {
        let n = push(&mut args, path.clone());
        sql += &format!(" AND EXISTS (SELECT 1 FROM frame_files ff WHERE ff.frame_seq = f.seq AND ff.path = {n})");
    }
    if let Some(t) = &f.text {
        let n = push(&mut args, like_pattern(t));
        sql += &format!(" AND (lower(f.query) LIKE {n} ESCAPE '\\' OR lower(f.conclusion) LIKE {n} ESCAPE '\\')");
    }
    if let Some(root) = &f.under {
        let n = push(&mut args, root.as_str().to_owned());
        sql += &format!(
            " AND f.seq IN (WITH RECURSIVE sub(id) AS (SELECT seq FROM frames WHERE frame_id = {n} \
             UNION ALL SELECT c.seq FROM frames c JOIN sub ON c.parent_seq = sub.id) SELECT id FROM sub)"
        );
    }
    if let Some(limit) = f.limit {
        sql += &format!(" ORDER BY f.created_at DESC, f.frame_id DESC LIMIT {limit}");
    }
    (sql, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_number_their_placeholders() {
        let f = FrameFilter {
            project_id: Some("p".into()),
            status: Some(Status::Suspended),
            text: Some("50%_x".into()),
            limit: Some(3),
            ..FrameFilter::default()
        };
        let (sql, args) = ids_sql(&f);
        assert!(
            sql.contains("f.project_id = $1") && sql.contains("fs.status = $2") && sql.contains("LIKE $3"),
            "{sql}"
        );
        assert!(sql.ends_with("LIMIT 3"));
        assert_eq!(args[2], Arg::Text("%50\\%\\_x%".into()));
        assert_eq!(ids_sql(&FrameFilter::default()).1.len(), 0);
    }
}
