//! Issue 31: `read_file` read the whole file into memory before cutting it
//! to what it shows, so a multi-GB file could exhaust memory. This test
//! runs itself again as a child process whose address space is capped
//! (`ulimit -v`) well below the size of a sparse file (no disk used), and
//! the child reads that file with the tool: holding the whole file would
//! fail its allocation and kill the child.

use std::process::Command;

use noesis_agent::Workspace;
use noesis_agent::builtin::{MAX_READ_BYTES, run_file_tool};
use serde_json::json;

const SIZE: u64 = 1 << 30;
/// The child's address-space cap in KiB (512 MiB): room for the test
/// harness's threads and allocator arenas, far less than the file.
const CAP_KIB: u64 = 512 * 1024;
const CHILD: &str = "NOESIS_READ_MEMORY_CHILD";

#[test]
fn reading_a_huge_file_holds_a_bounded_amount_of_it() {
    if let Some(dir) = std::env::var_os(CHILD) {
        let ws = Workspace::new(std::path::Path::new(&dir)).unwrap();
        let out = run_file_tool(&ws, "read_file", &json!({"path": "huge.txt"})).unwrap();
        assert!(!out.is_error, "{}", &out.content[..200.min(out.content.len())]);
        let tail = format!("[… {} more bytes; read a line range]", SIZE - MAX_READ_BYTES as u64);
        assert!(out.content.ends_with(&tail), "{}", &out.content[out.content.len().saturating_sub(200)..]);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::File::create(dir.path().join("huge.txt")).unwrap().set_len(SIZE).unwrap();
    let me = std::env::current_exe().unwrap();
    let out = Command::new("sh")
        .args(["-c", &format!("ulimit -v {CAP_KIB} && exec \"$0\" \"$@\"")])
        .arg(&me)
        .args(["--exact", "reading_a_huge_file_holds_a_bounded_amount_of_it", "--nocapture", "--test-threads=1"])
        .env(CHILD, dir.path())
        .output()
        .unwrap();
    let says = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the capped child failed ({:?}):\n{says}", out.status);
    assert!(says.contains("1 passed"), "the child did not run the test:\n{says}");
}
