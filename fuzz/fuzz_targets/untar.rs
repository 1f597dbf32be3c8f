//! A module tarball from anywhere: whatever the bytes, unpacking writes
//! nothing outside the folder it unpacks into, and makes no link.
#![no_main]

libfuzzer_sys::fuzz_target!(|bytes: &[u8]| {
    let parent = tempfile::tempdir().unwrap();
    let into = parent.path().join("in");
    let _ = noesis_dist::tarball::unpack("fuzz", bytes, None, &into);
    let mut stack = vec![parent.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            assert!(p.starts_with(&into), "{} is outside", p.display());
            let t = e.file_type().unwrap();
            assert!(!t.is_symlink(), "a link: {}", p.display());
            if t.is_dir() {
                stack.push(p);
            }
        }
    }
});
