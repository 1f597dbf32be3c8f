//! Version ranges from `requires:`: a requirement and a version, each
//! parsed, then matched.
#![no_main]

use noesis_modules::version::{Version, VersionReq};

libfuzzer_sys::fuzz_target!(|text: &str| {
    let (req, version) = text.split_once('\n').unwrap_or((text, "1.2.3"));
    let req = VersionReq::parse(req);
    let version = Version::parse(version);
    if let (Ok(req), Ok(version)) = (req, version) {
        let _ = req.matches(&version);
    }
});
