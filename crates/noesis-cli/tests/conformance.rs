use crate::support::{Work, conformance, output};

#[test]
fn every_vector_gets_its_verdict() {
    let w = Work::new();
    let o = output(w.noesis().arg("conformance").arg(conformance().join("test-vectors")));
    assert_eq!(o.code, 0, "{}{}", o.stdout, o.stderr);
    assert_eq!(o.stdout.lines().last(), Some("16 passed, 0 failed"), "{}", o.stdout);
    assert_eq!(o.stdout.lines().filter(|l| l.starts_with("pass invalid/") && l.contains("E3001")).count(), 10);
}

#[test]
fn a_wrong_verdict_fails_the_run() {
    let w = Work::new();
    w.write("v/bad.json", r#"{"$test": {"name": "x", "expects": "accept"}, "envelope": {"ok": true}}"#);
    w.write("v/alsobad.json", r#"{"$test": {"name": "y", "expects": "reject"}, "envelope": {"ok": false, "meta": {"confidence": 0, "risk": "high", "explain": ""}, "error": {"code": "E1", "message": "m"}}}"#);
    let o = output(w.noesis().args(["conformance", "v"]));
    assert_eq!(o.code, 1);
    assert_eq!(o.stdout.lines().last(), Some("0 passed, 2 failed"));
    let o = output(w.noesis().args(["conformance", "nowhere"]));
    assert_eq!(o.code, 2);
}

#[test]
fn validate_envelope_files() {
    let w = Work::new();
    let dir = conformance().join("test-vectors");
    let o = output(
        w.noesis()
            .args(["validate", "--envelope"])
            .arg(dir.join("valid/minimal.json"))
            .arg(dir.join("invalid/explain-too-long.json")),
    );
    assert_eq!(o.code, 1);
    assert!(o.stdout.contains("minimal.json: valid"));
    assert!(o.stdout.contains("explain-too-long.json: invalid (E3001)"));
    assert!(o.stdout.contains("/meta/explain"), "{}", o.stdout);
}
