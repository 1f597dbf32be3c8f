//! Promotion: a mistake seen often enough becomes a project principle.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::finding::{Category, Finding};
use crate::render::report_order;

/// How many sightings promote a fingerprint to a principle.
pub const PROMOTE_AT: usize = 3;

/// A finding from an earlier review, as the caller stored it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PastFinding {
    /// The review it came from (any id the caller uses; only compared).
    pub review: String,
    /// The finding's category.
    pub category: Category,
    /// The finding's [fingerprint](crate::fingerprint()).
    pub fingerprint: String,
    /// The finding's file.
    pub file: String,
}

impl PastFinding {
    /// What to keep of `finding`, seen in review `review`.
    #[must_use]
    pub fn new(review: impl Into<String>, finding: &Finding) -> PastFinding {
        PastFinding {
            review: review.into(),
            category: finding.category().clone(),
            fingerprint: finding.fingerprint().to_owned(),
            file: finding.file().to_owned(),
        }
    }
}

/// A project principle: a promoted fingerprint and its rule text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Principle {
    /// The category of the findings it came from.
    pub category: Category,
    /// Their fingerprint.
    pub fingerprint: String,
    /// The rule, as [`principle_text`] wrote it or as a person edited it.
    pub text: String,
}

/// A fingerprint that has just reached [`PROMOTE_AT`] sightings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Promotion {
    /// The category.
    pub category: Category,
    /// The fingerprint.
    pub fingerprint: String,
    /// Sightings, counted as [`repeats`] says.
    pub count: usize,
    /// A finding of the current review with this fingerprint (the first in report order).
    pub example: Finding,
}

impl Promotion {
    /// The principle to record, with [`principle_text`] as its text.
    #[must_use]
    pub fn principle(&self) -> Principle {
        Principle { category: self.category.clone(), fingerprint: self.fingerprint.clone(), text: principle_text(self) }
    }
}

/// The fingerprints of `current` that now count [`PROMOTE_AT`] or more
/// sightings and are not yet among `principles`.
///
/// Findings are the same issue when category and fingerprint agree, whatever
/// the file. Sightings are counted per place so that re-running a review on
/// unchanged code does not promote anything: for each file, the count is the
/// most findings with that fingerprint in that file in any one review
/// (`history` grouped by [`PastFinding::review`]; `current` is one more
/// review), and a fingerprint's count is the sum over its files. So one
/// finding re-flagged in three reviews counts 1; the same mistake in three
/// files, or three times in one file in one review, counts 3.
///
/// Only fingerprints present in `current` are considered: the review in hand
/// is what promotes. `history` must not already contain `current`. The result
/// is sorted by count (highest first), then in report order of the examples.
#[must_use]
pub fn repeats(history: &[PastFinding], current: &[Finding], principles: &[Principle]) -> Vec<Promotion> {
    type Key<'a> = (&'a str, &'a str);
    // (category, fingerprint) → file → review (None: current) → findings.
    let mut seen: BTreeMap<Key<'_>, BTreeMap<&str, BTreeMap<Option<&str>, usize>>> = BTreeMap::new();
    for f in current {
        let key = (f.category().as_str(), f.fingerprint());
        *seen.entry(key).or_default().entry(f.file()).or_default().entry(None).or_default() += 1;
    }
    for p in history {
        let key = (p.category.as_str(), p.fingerprint.as_str());
        if let Some(files) = seen.get_mut(&key) {
            *files.entry(p.file.as_str()).or_default().entry(Some(p.review.as_str())).or_default() += 1;
        }
    }
    let promoted = |key: &Key<'_>| principles.iter().any(|p| (p.category.as_str(), p.fingerprint.as_str()) == *key);
    let mut out: Vec<(usize, Promotion)> = Vec::new();
    for (rank, example) in report_order(current).into_iter().enumerate() {
        let key = (example.category().as_str(), example.fingerprint());
        let Some(files) = seen.remove(&key) else { continue };
        let count: usize = files.values().map(|reviews| reviews.values().copied().max().unwrap_or(0)).sum();
        if count >= PROMOTE_AT && !promoted(&key) {
            let promotion = Promotion {
                category: example.category().clone(),
                fingerprint: example.fingerprint().to_owned(),
                count,
                example: example.clone(),
            };
            out.push((rank, promotion));
        }
    }
    out.sort_by(|(ra, a), (rb, b)| b.count.cmp(&a.count).then(ra.cmp(rb)));
    out.into_iter().map(|(_, p)| p).collect()
}

/// A short rule for a promoted fingerprint, from its example:
/// `Seen 3 times (correctness): Unwrap on user input. Resolved when: errors are returned.`
#[must_use]
pub fn principle_text(promotion: &Promotion) -> String {
    let title = promotion.example.title().trim_end_matches('.');
    let resolves = promotion.example.resolves_when().trim_end_matches('.');
    format!("Seen {} times ({}): {title}. Resolved when: {resolves}.", promotion.count, promotion.category)
}
