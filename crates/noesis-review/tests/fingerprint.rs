//! The fingerprint rule: what counts as the same issue.

use noesis_review::{Category, Severity, fingerprint, location_key, normalise};

use crate::finding;

fn cat(name: &str) -> Category {
    Category::new(name).expect("valid category")
}

/// `normalise(input) == expected`, one line per case.
#[test]
fn normalise_cases() {
    let cases = [
        ("Unwrap on line 12", "unwrap on line"),
        ("`read_config` unwraps a Result<T, E>", "unwraps a result t e"),
        ("Token compared with `==` in auth::check", "token compared with in auth check"),
        ("doesn't check 'len' first", "doesn t check first"),
        ("“smart” quotes and ‘single’ ones", "quotes and ones"),
        ("Doesn’t close the file", "doesn t close the file"),
        ("`only_code()`", "only code"),
        ("'unterminated quote", "unterminated quote"),
        ("ÄRGER über Ünicode", "ärger über ünicode"),
        ("v1.2.3 release of item42x", "v release of itemx"),
        ("  many\t\twhite   spaces\n", "many white spaces"),
        ("snake_case/and-kebab::path", "snake case and kebab path"),
        ("", ""),
        ("12 34", ""),
    ];
    for (input, expected) in cases {
        assert_eq!(normalise(input), expected, "normalise({input:?})");
    }
}

/// Unclosed quotes do not make normalising quadratic (this would take minutes).
#[test]
fn normalise_is_linear_on_unclosed_quotes() {
    for quote in ["\"", "'", "`", "\u{201C}", "\u{2018}"] {
        let text = format!("{quote}a ").repeat(100_000);
        assert_eq!(normalise(&text).len(), "a ".len() * 100_000 - 1);
    }
}

/// Pairs of titles that must fingerprint alike (same category).
#[test]
fn same_issue_same_fingerprint() {
    let same = [
        ("Unwrap on line 12", "Unwrap on line 40"),
        ("item2 is never read", "item37 is never read"),
        ("Missing Error Context", "missing error context"),
        ("Compares the token with \"abc\"", "compares the token with 'xyz'"),
        ("Token   compared\twith ==", "token compared with =="),
        ("`read_config` unwraps a Result", "`load_state` unwraps a Result"),
        ("Unwrap on user input.", "Unwrap on user input"),
        ("doesn't check the length", "Doesn’t check the length"),
        ("`unwrap()`", "`unwrap`"),
        ("HashMap iterated in a hot loop (line 3)", "HashMap iterated in a hot loop (line 97)"),
    ];
    for (a, b) in same {
        assert_eq!(fingerprint(&cat("correctness"), a), fingerprint(&cat("correctness"), b), "{a:?} vs {b:?}");
    }
}

/// Pairs that differ in substance must not match.
#[test]
fn different_substance_different_fingerprint() {
    let different = [
        ("Unwrap on user input", "Expect on user input"),
        ("SQL built by string concatenation", "SQL built with format"),
        ("`a` unwraps", "`a` panics"),
        ("Unwrap on user input", "user input on Unwrap"),
    ];
    for (a, b) in different {
        assert_ne!(fingerprint(&cat("correctness"), a), fingerprint(&cat("correctness"), b), "{a:?} vs {b:?}");
    }
}

#[test]
fn category_is_part_of_the_fingerprint() {
    let t = "Unwrap on user input";
    assert_ne!(fingerprint(&cat("security"), t), fingerprint(&cat("correctness"), t));
    // Spellings of one category are one category.
    assert_eq!(fingerprint(&cat("Security"), t), fingerprint(&cat("security"), t));
    assert_eq!(fingerprint(&cat("documentation"), t), fingerprint(&cat("docs"), t));
    // The parts cannot run into each other.
    assert_ne!(fingerprint(&cat("a"), "b c"), fingerprint(&cat("a-b"), "c"));
}

#[test]
fn file_and_lines_are_not_part_of_the_fingerprint() {
    let a = finding(Severity::Error, "security", "src/a.rs", (3, 3), "Token compared with ==");
    let b = finding(Severity::Warning, "security", "src/b.rs", (90, 95), "Token compared with ==");
    assert_eq!(a.fingerprint(), b.fingerprint());
    assert_ne!(a.location_key(), b.location_key());
    assert_eq!(a.location_key(), format!("src/a.rs#{}", a.fingerprint()));
    assert_eq!(location_key("src/a.rs", "0123"), "src/a.rs#0123");
}

/// Pins rule v1: if this changes, the rule changed and `FINGERPRINT_VERSION` must too.
#[test]
fn fingerprint_v1_is_stable() {
    let fp = fingerprint(&cat("correctness"), "Unwrap on user input");
    assert_eq!(fp.len(), 16);
    assert!(fp.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{fp}");
    assert_eq!(fp, "e78d500e7665cb91");
}

#[test]
fn categories_normalise_to_lowercase_kebab() {
    let cases = [
        ("Security", "security"),
        ("  API design ", "api-design"),
        ("error_handling", "error-handling"),
        ("--Concurrency--", "concurrency"),
        ("tests", "testing"),
        ("Perf", "performance"),
        ("a11y", "a11y"),
    ];
    for (raw, expected) in cases {
        assert_eq!(cat(raw).as_str(), expected, "{raw:?}");
    }
    assert!(cat("style").is_common());
    assert!(!cat("concurrency").is_common());
    assert_eq!(Category::new("!!").unwrap_err().to_string(), "empty");
    assert_eq!(Category::new(&"x".repeat(65)).unwrap_err().to_string(), "longer than 64 characters");
}
