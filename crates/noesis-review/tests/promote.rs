//! Promotion of repeats to principles.

use noesis_review::{Finding, PROMOTE_AT, PastFinding, Principle, Severity, principle_text, repeats};

use crate::finding;

const TITLE: &str = "`read_config` unwraps a parse result";

fn unwrap_in(file: &str, line: u32) -> Finding {
    // The identifier and line vary by place; the fingerprint does not.
    let title = TITLE.replace("read_config", &format!("load_{line}"));
    finding(Severity::Warning, "correctness", file, (line, line), &title)
}

fn past(review: &str, file: &str) -> PastFinding {
    PastFinding::new(review, &unwrap_in(file, 1))
}

/// A named case: history, the current review, and the counts promoted.
type Case = (&'static str, Vec<PastFinding>, Vec<Finding>, Vec<usize>);

/// `(history, current) → promoted counts`, one case a line.
#[test]
fn promotion_at_the_third_sighting() {
    let cases: Vec<Case> = vec![
        ("one sighting", vec![], vec![unwrap_in("src/a.rs", 3)], vec![]),
        ("two files", vec![past("r1", "src/a.rs")], vec![unwrap_in("src/b.rs", 9)], vec![]),
        (
            "three files across reviews",
            vec![past("r1", "src/a.rs"), past("r2", "src/b.rs")],
            vec![unwrap_in("src/c.rs", 40)],
            vec![3],
        ),
        (
            "three files in this review",
            vec![],
            vec![unwrap_in("a.rs", 1), unwrap_in("b.rs", 2), unwrap_in("c.rs", 3)],
            vec![3],
        ),
        (
            "three times in one file in one review",
            vec![],
            vec![unwrap_in("a.rs", 1), unwrap_in("a.rs", 20), unwrap_in("a.rs", 30)],
            vec![3],
        ),
        (
            "one finding re-flagged by three reviews",
            vec![past("r1", "src/a.rs"), past("r2", "src/a.rs")],
            vec![unwrap_in("src/a.rs", 7)],
            vec![],
        ),
        (
            "twice in a.rs once, elsewhere once",
            vec![past("r1", "a.rs"), past("r1", "a.rs"), past("r2", "a.rs")],
            vec![unwrap_in("b.rs", 5)],
            vec![3],
        ),
        (
            "four sightings",
            vec![past("r1", "a.rs"), past("r2", "b.rs"), past("r3", "c.rs")],
            vec![unwrap_in("d.rs", 5)],
            vec![4],
        ),
        (
            "history alone does not promote",
            vec![past("r1", "a.rs"), past("r2", "b.rs"), past("r3", "c.rs")],
            vec![finding(Severity::Note, "style", "d.rs", (1, 1), "Long line")],
            vec![],
        ),
    ];
    for (name, history, current, expected) in cases {
        let got: Vec<usize> = repeats(&history, &current, &[]).iter().map(|p| p.count).collect();
        assert_eq!(got, expected, "{name}");
    }
    assert_eq!(PROMOTE_AT, 3);
}

#[test]
fn same_title_in_another_category_is_another_issue() {
    let history = vec![past("r1", "a.rs"), past("r2", "b.rs")];
    let current = vec![finding(Severity::Warning, "style", "c.rs", (1, 1), TITLE)];
    assert!(repeats(&history, &current, &[]).is_empty());
    // A history entry with a matching fingerprint but another category does not count either.
    let mut odd = past("r1", "a.rs");
    odd.category = noesis_review::Category::new("style").expect("valid");
    let history = vec![odd, past("r2", "b.rs")];
    assert!(repeats(&history, &[unwrap_in("c.rs", 1)], &[]).is_empty());
}

#[test]
fn an_existing_principle_is_not_promoted_again() {
    let history = vec![past("r1", "src/a.rs"), past("r2", "src/b.rs")];
    let current = vec![unwrap_in("src/c.rs", 40)];
    let promotions = repeats(&history, &current, &[]);
    assert_eq!(promotions.len(), 1);
    let principle = promotions[0].principle();
    assert!(repeats(&history, &current, std::slice::from_ref(&principle)).is_empty());
    // A principle of another category with the same fingerprint is another principle.
    let other = Principle { category: noesis_review::Category::new("style").expect("valid"), ..principle };
    assert_eq!(repeats(&history, &current, &[other]).len(), 1);
}

#[test]
fn the_promotion_describes_itself() {
    let history = vec![past("r1", "src/a.rs"), past("r2", "src/b.rs")];
    let current = vec![unwrap_in("src/d.rs", 8), unwrap_in("src/c.rs", 40)];
    let promotions = repeats(&history, &current, &[]);
    assert_eq!(promotions.len(), 1);
    let p = &promotions[0];
    assert_eq!(p.count, 4);
    assert_eq!(p.category.as_str(), "correctness");
    assert_eq!(p.fingerprint, current[0].fingerprint());
    // The example is the first in report order.
    assert_eq!(p.example, current[1]);
    assert_eq!(
        principle_text(p),
        "Seen 4 times (correctness): `load_40` unwraps a parse result. Resolved when: the code no longer does this."
    );
    let principle = p.principle();
    assert_eq!(principle.text, principle_text(p));
    assert_eq!(principle.fingerprint, p.fingerprint);
}

#[test]
fn promotions_are_ordered_by_count_then_report_order() {
    let style = |file: &str| finding(Severity::Note, "style", file, (1, 1), "Long line");
    let history = vec![past("r1", "a.rs"), past("r2", "b.rs"), past("r3", "c.rs")];
    let current = vec![style("x.rs"), style("y.rs"), style("z.rs"), unwrap_in("d.rs", 1)];
    let got: Vec<(String, usize)> =
        repeats(&history, &current, &[]).into_iter().map(|p| (p.category.to_string(), p.count)).collect();
    assert_eq!(got, [("correctness".to_owned(), 4), ("style".to_owned(), 3)]);
    let history = vec![past("r1", "a.rs")];
    let current = vec![style("x.rs"), style("y.rs"), style("z.rs"), unwrap_in("d.rs", 1), unwrap_in("e.rs", 1)];
    let got: Vec<String> = repeats(&history, &current, &[]).into_iter().map(|p| p.category.to_string()).collect();
    // Both count 3: the warning comes first in report order.
    assert_eq!(got, ["correctness", "style"]);
}
