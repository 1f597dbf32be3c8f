//! Property tests of tarball unpacking: whatever names and kinds the
//! entries have, nothing lands outside the folder it is unpacked into, and
//! a refused tarball writes nothing at all.

use std::path::{Path, PathBuf};

use noesis_dist::tarball::unpack;
use proptest::prelude::*;

/// A tarball whose entries are written raw (the builder itself refuses
/// `..` and absolute names, which is what is being tried here).
fn tarball(entries: &[(String, u8, Vec<u8>)]) -> Vec<u8> {
    let mut b = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    for (path, kind, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(match kind % 5 {
            0 | 1 => tar::EntryType::Regular,
            2 => tar::EntryType::Directory,
            3 => tar::EntryType::Symlink,
            _ => tar::EntryType::Link,
        });
        if kind % 5 >= 3 {
            let _ = h.set_link_name("../../outside");
        }
        let bytes = path.as_bytes();
        let n = bytes.len().min(99);
        h.as_old_mut().name[..n].copy_from_slice(&bytes[..n]);
        h.set_cksum();
        b.append(&h, data.as_slice()).unwrap();
    }
    b.into_inner().unwrap().finish().unwrap()
}

fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p.clone());
            }
            out.push(p);
        }
    }
    out
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("..".to_owned()),
        Just(".".to_owned()),
        Just(String::new()),
        "[a-z]{1,6}",
        Just("module.yaml".to_owned()),
    ]
}

fn name() -> impl Strategy<Value = String> {
    (any::<bool>(), proptest::collection::vec(segment(), 1..5))
        .prop_map(|(abs, segs)| format!("{}{}", if abs { "/" } else { "" }, segs.join("/")))
}

proptest! {
    #[test]
    fn prop_unpacking_never_writes_outside_its_folder(
        entries in proptest::collection::vec((name(), any::<u8>(), proptest::collection::vec(any::<u8>(), 0..16)), 1..8)
    ) {
        let parent = tempfile::tempdir().unwrap();
        let into = parent.path().join("a/b/in");
        let bytes = tarball(&entries);
        let result = unpack("prop", &bytes, None, &into);
        let all = files_under(parent.path());
        for p in &all {
            prop_assert!(
                p.starts_with(&into) || into.starts_with(p),
                "{} is outside {} (entries {:?})", p.display(), into.display(), entries
            );
            let meta = std::fs::symlink_metadata(p).unwrap();
            prop_assert!(!meta.file_type().is_symlink(), "a link was made: {}", p.display());
        }
        if result.is_err() {
            prop_assert!(!into.exists() || files_under(&into).is_empty(), "a refused tarball wrote {:?}", files_under(&into));
        }
    }
}
