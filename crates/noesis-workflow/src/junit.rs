//! Test results per test case from JUnit XML — what pytest
//! (`--junitxml`), cargo nextest (a JUnit profile), jest (jest-junit) and
//! go test (through a converter) write — so VERIFIER can track and anchor
//! single cases instead of whole commands.

/// How one case ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseStatus {
    /// It passed.
    Passed,
    /// An assertion failed.
    Failed,
    /// It could not run to its end (an error outside the assertions).
    Error,
    /// It was skipped.
    Skipped,
}

impl CaseStatus {
    /// `passed`, `failed`, `error` or `skipped`.
    pub fn as_str(self) -> &'static str {
        match self {
            CaseStatus::Passed => "passed",
            CaseStatus::Failed => "failed",
            CaseStatus::Error => "error",
            CaseStatus::Skipped => "skipped",
        }
    }
}

/// One case.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// `classname::name` (or `name` alone when there is no class name).
    pub id: String,
    /// How it ended.
    pub status: CaseStatus,
    /// The failure's message, when there is one.
    pub message: Option<String>,
}

/// The report is not JUnit XML.
#[derive(Debug, thiserror::Error)]
#[error("not a JUnit XML report: {0}")]
pub struct JunitError(String);

/// Every `<testcase>` of a report, in document order.
pub fn parse(xml: &str) -> Result<Vec<Case>, JunitError> {
    let doc = roxmltree::Document::parse(xml).map_err(|e| JunitError(e.to_string()))?;
    let root = doc.root_element().tag_name().name();
    if root != "testsuites" && root != "testsuite" {
        return Err(JunitError(format!("the root element is <{root}>, not <testsuites> or <testsuite>")));
    }
    let mut cases = Vec::new();
    for tc in doc.descendants().filter(|n| n.has_tag_name("testcase")) {
        let name = tc.attribute("name").unwrap_or_default();
        let class = tc.attribute("classname").unwrap_or_default();
        let id = if class.is_empty() { name.to_owned() } else { format!("{class}::{name}") };
        let mut status = CaseStatus::Passed;
        let mut message = None;
        for child in tc.children().filter(roxmltree::Node::is_element) {
            let found = match child.tag_name().name() {
                "failure" => CaseStatus::Failed,
                "error" => CaseStatus::Error,
                "skipped" => CaseStatus::Skipped,
                _ => continue,
            };
            // A failure outranks a skip; the first failure's message is kept.
            if status == CaseStatus::Passed || (status == CaseStatus::Skipped && found != CaseStatus::Skipped) {
                status = found;
                message =
                    child.attribute("message").map(str::to_owned).or_else(|| child.text().map(|t| t.trim().to_owned()));
            }
        }
        cases.push(Case { id, status, message });
    }
    Ok(cases)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_are_read_with_their_status() {
        // The shape pytest 9 writes.
        let xml = r#"<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest" errors="1" failures="1" skipped="1" tests="4">
<testcase classname="test_calc" name="test_add" time="0.001"><failure message="assert -1 == 5">def test_add(): ...</failure></testcase>
<testcase classname="test_calc" name="test_mul" time="0.000" />
<testcase classname="test_calc" name="test_div" time="0.000"><skipped type="pytest.skip" message="later">skip</skipped></testcase>
<testcase classname="" name="test_io"><error message="fixture failed"/></testcase>
</testsuite></testsuites>"#;
        let cases = parse(xml).unwrap();
        let got: Vec<(&str, CaseStatus)> = cases.iter().map(|c| (c.id.as_str(), c.status)).collect();
        assert_eq!(
            got,
            [
                ("test_calc::test_add", CaseStatus::Failed),
                ("test_calc::test_mul", CaseStatus::Passed),
                ("test_calc::test_div", CaseStatus::Skipped),
                ("test_io", CaseStatus::Error),
            ]
        );
        assert_eq!(cases[0].message.as_deref(), Some("assert -1 == 5"));
        // A lone <testsuite> root (cargo nextest, go-junit-report) is read too.
        let one = parse(r#"<testsuite name="s"><testcase name="t"/></testsuite>"#).unwrap();
        assert_eq!(one[0].id, "t");
    }

    #[test]
    fn what_is_not_junit_is_refused() {
        assert!(parse("not xml").is_err());
        assert!(parse("<html/>").unwrap_err().to_string().contains("<html>"));
    }
}
