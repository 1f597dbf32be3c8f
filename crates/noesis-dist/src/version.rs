//! Versions from a repository's tags.

/// The semver version a tag names (`v1.2.0` or `1.2.0`), if it does.
pub fn of_tag(tag: &str) -> Option<semver::Version> {
    semver::Version::parse(tag.strip_prefix('v').unwrap_or(tag)).ok()
}

/// The newest tag whose version `req` allows (all versions when `None`);
/// pre-releases only when the range names one, as cargo does.
pub fn pick<'t>(tags: &'t [String], req: Option<&semver::VersionReq>) -> Option<&'t String> {
    tags.iter()
        .filter_map(|t| of_tag(t).map(|v| (v, t)))
        .filter(|(v, _)| match req {
            Some(r) => r.matches(v),
            None => v.pre.is_empty(),
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, t)| t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_tag_in_range_wins() {
        let tags: Vec<String> =
            ["v1.0.0", "v1.1.0", "v2.0.0", "v2.1.0-rc.1", "notes", "1.0.5"].map(String::from).to_vec();
        let req = |r: &str| semver::VersionReq::parse(r).unwrap();
        assert_eq!(pick(&tags, Some(&req("^1"))).map(String::as_str), Some("v1.1.0"));
        assert_eq!(pick(&tags, Some(&req("~1.0"))).map(String::as_str), Some("1.0.5"));
        assert_eq!(pick(&tags, None).map(String::as_str), Some("v2.0.0"), "no pre-release unless asked");
        assert_eq!(pick(&tags, Some(&req(">=2.1.0-rc.1"))).map(String::as_str), Some("v2.1.0-rc.1"));
        assert_eq!(pick(&tags, Some(&req("^3"))), None);
        assert_eq!(of_tag("notes"), None);
    }
}
