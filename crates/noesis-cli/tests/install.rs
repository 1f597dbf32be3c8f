//! `noesis install | update | remove | versions` against real git
//! repositories made by the test (tags v1.0.0, v1.1.0, v2.0.0; the module in
//! a subfolder), reached over `file://`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use assert_cmd::Command;
use serde_json::{Value, json};

use crate::support::{Work, output};

fn git(dir: &Path, args: &[&str]) {
    let o = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap();
    assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
}

/// A repository with the module `greeter` in `mods/greeter`, tagged three
/// times; each version's prompt names its tag.
fn repo(work: &Work) -> PathBuf {
    let repo = work.path().join("repo");
    std::fs::create_dir_all(repo.join("mods")).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    let o = output(work.noesis_bare().args(["init", "greeter", "--dir", repo.join("mods").to_str().unwrap()]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    for tag in ["v1.0.0", "v1.1.0", "v2.0.0"] {
        std::fs::write(repo.join("mods/greeter/prompt.md"), format!("# greeter {tag}\n\nGreet: $ARGUMENTS\n")).unwrap();
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", tag]);
        git(&repo, &["tag", tag]);
    }
    repo
}

fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type().unwrap().is_dir() {
            for (k, v) in files(&e.path()) {
                out.insert(format!("{name}/{k}"), v);
            }
        } else {
            out.insert(name, std::fs::read(e.path()).unwrap());
        }
    }
    out
}

fn lock(work: &Work) -> Value {
    serde_json::from_str(&std::fs::read_to_string(work.path().join("cognitive/cognitive.lock")).unwrap()).unwrap()
}

#[test]
fn a_range_an_update_the_lockfile_and_a_removal() {
    let work = Work::new();
    let repo = repo(&work);
    let url = format!("file://{}", repo.display());
    let installed = work.path().join("cognitive/modules/greeter");

    let o = output(work.noesis_bare().args(["versions", &url]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "v2.0.0\nv1.1.0\nv1.0.0\n"), "{}", o.stderr);

    // A range picks the newest tag it allows.
    let o = output(work.noesis_bare().args(["install", &format!("{url}@^1"), "--path", "mods/greeter"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.starts_with("installed greeter v1.1.0 ("), "{}", o.stdout);
    assert!(std::fs::read_to_string(installed.join("prompt.md")).unwrap().contains("v1.1.0"));
    let l = lock(&work);
    let entry = &l["modules"]["greeter"];
    assert_eq!((&entry["version"], &entry["path"]), (&json!("v1.1.0"), &json!("mods/greeter")));
    assert_eq!(entry["commit"].as_str().unwrap().len(), 40);
    assert!(entry["sha256"].as_str().unwrap().starts_with("sha256:"));
    // It is on the search path and loads; the listing says where from.
    let listed = output(work.noesis_bare().args(["list", "--json"])).json();
    let row = listed.as_array().unwrap().iter().find(|m| m["name"] == "greeter").unwrap().clone();
    assert_eq!(
        (&row["valid"], &row["source"], &row["installed"]),
        (&json!(true), &json!(format!("{url}@^1")), &json!("v1.1.0"))
    );
    assert_eq!(row["update"], Value::Null, "none within ^1, and no network without --updates");
    let text = output(work.noesis_bare().args(["list"])).stdout;
    assert!(text.contains(&format!("(from {url}@^1)")), "{text}");
    // Pinned to a tag: --updates asks the repository and finds a newer one.
    let pinned = format!("{url}@v1.0.0");
    assert_eq!(
        output(work.noesis_bare().args(["install", &pinned, "--path", "mods/greeter", "--name", "old-greeter"])).code,
        0
    );
    let listed = output(work.noesis_bare().args(["list", "--updates", "--json"])).json();
    // (Both hold the module named greeter: told apart by their folders.)
    let update = |folder: &str| {
        let rows = listed.as_array().unwrap();
        rows.iter().find(|m| m["location"].as_str().unwrap().ends_with(folder)).unwrap()["update"].clone()
    };
    assert_eq!((update("/old-greeter"), update("/greeter")), (json!("v2.0.0"), Value::Null));
    assert_eq!(output(work.noesis_bare().args(["remove", "old-greeter"])).code, 0);

    // Update stays in the range; --latest leaves it.
    let o = output(work.noesis_bare().args(["update", "greeter"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.stdout, format!("updated greeter v1.1.0 ({url}@^1)\n"));
    let o = output(work.noesis_bare().args(["update", "greeter", "--latest", "--json"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(o.json()[0]["version"], "v2.0.0");
    assert!(std::fs::read_to_string(installed.join("prompt.md")).unwrap().contains("v2.0.0"));

    // `install` with no source reproduces the lockfile byte for byte.
    let before = files(&installed);
    let locked = std::fs::read_to_string(work.path().join("cognitive/cognitive.lock")).unwrap();
    std::fs::remove_dir_all(work.path().join("cognitive/modules")).unwrap();
    let o = output(work.noesis_bare().args(["install", "--locked"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(files(&installed), before);
    assert_eq!(std::fs::read_to_string(work.path().join("cognitive/cognitive.lock")).unwrap(), locked);

    // --locked refuses what would change the lockfile, and changes nothing.
    let o =
        output(work.noesis_bare().args(["install", &format!("{url}@v1.0.0"), "--path", "mods/greeter", "--locked"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("--locked: installing `greeter` changes cognitive.lock"), "{}", o.stderr);
    assert_eq!(files(&installed), before);
    assert!(!work.path().join("cognitive/modules/.staging-greeter").exists());

    // Files that differ from the recorded digest are refused.
    let now = lock(&work)["modules"]["greeter"]["sha256"].as_str().unwrap().to_owned();
    let tampered = locked.replace(&now, "sha256:0000");
    assert_ne!(tampered, locked);
    std::fs::write(work.path().join("cognitive/cognitive.lock"), &tampered).unwrap();
    let o = output(work.noesis_bare().args(["install"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("the lockfile says sha256:0000; refused"), "{}", o.stderr);
    assert_eq!(files(&installed), before, "nothing replaced");
    std::fs::write(work.path().join("cognitive/cognitive.lock"), &locked).unwrap();

    // --all updates every module in the lockfile; --global installs for the user.
    let o = output(work.noesis_bare().args(["update", "--all", "--json"]));
    assert_eq!((o.code, o.json().as_array().unwrap().len()), (0, 1), "{}", o.stderr);
    let o = output(work.noesis_bare().args(["install", &url, "--path", "mods/greeter", "--global"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(work.path().join(".cognitive/modules/greeter/module.yaml").is_file());
    assert!(work.path().join(".cognitive/cognitive.lock").is_file());
    // `add` takes GitHub sources only.
    let o = output(work.noesis_bare().args(["add", &url]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("`noesis add` takes github:"), "{}", o.stderr);
    let o = output(work.noesis_bare().args(["remove", "greeter"]));
    assert_eq!((o.code, o.stdout.as_str()), (0, "removed greeter\n"));
    assert!(!installed.exists());
    assert_eq!(lock(&work)["modules"], json!({}));
    let o = output(work.noesis_bare().args(["uninstall", "greeter"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("no module `greeter` is installed here"), "{}", o.stderr);
}

#[test]
fn bad_sources_and_modules_are_refused_with_nothing_left_behind() {
    let work = Work::new();
    let repo = repo(&work);
    let url = format!("file://{}", repo.display());
    let o = output(work.noesis_bare().args(["install", &format!("{url}@^3"), "--path", "mods/greeter"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("no tag of") && o.stderr.contains("`^3`"), "{}", o.stderr);
    let o = output(work.noesis_bare().args(["install", &url, "--path", "mods/nothing"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("no module at `mods/nothing`"), "{}", o.stderr);
    let o = output(work.noesis_bare().args(["install", &url, "--path", "../outside"]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("must stay inside the repository"), "{}", o.stderr);
    // A module that does not load: the loader's message, nothing installed.
    work.write("broken/module.yaml", "name: broken\nversion: [\n");
    let o = output(work.noesis_bare().args(["install", work.path().join("broken").to_str().unwrap()]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("module `broken` is refused"), "{}", o.stderr);
    let left: Vec<_> = std::fs::read_dir(work.path().join("cognitive/modules"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != ".noesis-swap")
        .collect();
    assert!(left.is_empty() && tidy(&work).is_empty(), "{left:?}");
    assert!(!work.path().join("cognitive/cognitive.lock").exists());
}

/// A crash between moving the old copy aside and moving the new one in
/// leaves `.old-NAME`: the next command puts it back.
#[test]
fn an_install_cut_short_in_the_swap_is_recovered() {
    let work = Work::new();
    let repo = repo(&work);
    let url = format!("file://{}", repo.display());
    assert_eq!(output(work.noesis_bare().args(["install", &url, "--path", "mods/greeter"])).code, 0);
    let modules = work.path().join("cognitive/modules");
    let before = files(&modules.join("greeter"));
    std::fs::rename(modules.join("greeter"), modules.join(".old-greeter")).unwrap();
    std::fs::create_dir_all(modules.join(".staging-greeter")).unwrap();
    let o = output(work.noesis_bare().args(["install"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stderr.contains("put `greeter` back"), "{}", o.stderr);
    assert_eq!(files(&modules.join("greeter")), before);
    assert!(!modules.join(".old-greeter").exists() && !modules.join(".staging-greeter").exists());
}

/// Serves the files of `dir` over HTTP on 127.0.0.1 (GET only).
fn serve(dir: PathBuf) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
                    break;
                }
            }
            let path = line.split_whitespace().nth(1).unwrap_or("/").trim_start_matches('/').to_owned();
            let reply = match std::fs::read(dir.join(&path)) {
                Ok(body) => {
                    let mut r =
                        format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len())
                            .into_bytes();
                    r.extend(body);
                    r
                }
                Err(_) => b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".to_vec(),
            };
            let _ = conn.write_all(&reply);
        }
    });
    base
}

fn sha256_of(path: &Path) -> String {
    let o = std::process::Command::new("sha256sum").arg(path).output().unwrap();
    format!("sha256:{}", String::from_utf8_lossy(&o.stdout).split_whitespace().next().unwrap())
}

#[test]
fn tarballs_and_registry_indexes_checked_before_anything_is_written() {
    let work = Work::new();
    let pkg = work.path().join("pkg");
    std::fs::create_dir_all(&pkg).unwrap();
    assert_eq!(output(work.noesis_bare().args(["init", "summarizer", "--dir", pkg.to_str().unwrap()])).code, 0);
    let files_dir = work.path().join("served");
    std::fs::create_dir_all(&files_dir).unwrap();
    let tarball = files_dir.join("summarizer-2.0.0.tar.gz");
    let tar = std::process::Command::new("tar")
        .args(["-czf", tarball.to_str().unwrap(), "-C", pkg.to_str().unwrap(), "summarizer"])
        .status()
        .unwrap();
    assert!(tar.success());
    // A tarball with an entry that climbs out of the module folder.
    let evil = files_dir.join("evil.tar.gz");
    let py = format!(
        "import io, tarfile\nt = tarfile.open({:?}, 'w:gz')\nfor name, data in [('evil/module.yaml', b'name: evil'), ('../escaped.txt', b'x')]:\n    i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))\nt.close()\n",
        evil.to_str().unwrap()
    );
    assert!(std::process::Command::new("python3").args(["-c", &py]).status().unwrap().success());
    let base = serve(files_dir.clone());
    let good = sha256_of(&tarball);
    // A module folder beside the index, named relative to it.
    assert_eq!(
        output(work.noesis_bare().args([
            "init",
            "greeter",
            "--dir",
            work.path().join("registry/mods").to_str().unwrap()
        ]))
        .code,
        0
    );
    let index = json!({"modules": {
        "summarizer": {"version": "2.0.0", "description": "Summarizes text", "tags": ["text"],
                       "distribution": {"tarball": format!("{base}/summarizer-2.0.0.tar.gz"), "checksum": good}},
        "summarizer-bad": {"version": "2.0.0", "description": "A wrong checksum", "tags": ["text"],
                           "distribution": {"tarball": format!("{base}/summarizer-2.0.0.tar.gz"),
                                            "checksum": format!("sha256:{}", "0".repeat(64))}},
        "evil": {"description": "climbs out", "distribution": {"tarball": format!("{base}/evil.tar.gz"),
                                                                "checksum": sha256_of(&evil)}},
        "unchecked": {"description": "plain http, no checksum",
                      "distribution": {"tarball": format!("{base}/summarizer-2.0.0.tar.gz")}},
        "greeter": {"source": "mods/greeter", "version": "1.0.0", "description": "Greets people"}
    }});
    let reg = work.write("registry/cognitive-registry.json", &index.to_string());
    let reg = reg.to_str().unwrap();

    let o = output(work.noesis_bare().args(["search", "text", "--registry", reg]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.starts_with("summarizer ") && o.stdout.contains("summarizer-bad"), "{}", o.stdout);
    let o = output(work.noesis_bare().args(["registry", "--registry", reg, "--json"]));
    assert_eq!(o.json()["modules"], 5);

    let o = output(work.noesis_bare().args(["install", "summarizer", "--registry", reg]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(o.stdout.starts_with("installed summarizer 2.0.0 (summarizer)"), "{}", o.stdout);
    assert_eq!(lock(&work)["modules"]["summarizer"]["resolved"], format!("{base}/summarizer-2.0.0.tar.gz"));
    let installed = work.path().join("cognitive/modules/summarizer");
    assert_eq!(files(&installed), files(&pkg.join("summarizer")));

    // A newer version in the index shows in the listing, without fetching.
    work.write("noesis.toml", &format!("[registry]\nurl = {:?}\n", reg));
    let bumped = index.to_string().replacen("\"2.0.0\"", "\"2.1.0\"", 1);
    std::fs::write(reg, bumped).unwrap();
    let listed = output(work.noesis_bare().args(["list", "--json"])).json();
    let row = listed.as_array().unwrap().iter().find(|m| m["name"] == "summarizer").unwrap().clone();
    assert_eq!((&row["installed"], &row["update"]), (&json!("2.0.0"), &json!("2.1.0")), "{row}");
    std::fs::write(reg, index.to_string()).unwrap();
    // A wrong checksum: refused, nothing written.
    let o = output(work.noesis_bare().args(["install", "summarizer-bad", "--registry", reg]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("checksum mismatch") && o.stderr.contains("nothing was unpacked"), "{}", o.stderr);
    assert!(!work.path().join("cognitive/modules/summarizer-bad").exists());
    // `../` in a tarball: refused before anything is written anywhere.
    let o = output(work.noesis_bare().args(["install", "evil", "--registry", reg]));
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("entry `../escaped.txt` refused"), "{}", o.stderr);
    assert!(!work.path().join("escaped.txt").exists() && !work.path().join("cognitive/modules/evil").exists());
    let left: Vec<String> = std::fs::read_dir(work.path().join("cognitive/modules"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".noesis-swap")
        .collect();
    assert_eq!(left, ["summarizer"]);
    assert_eq!(tidy(&work), Vec::<String>::new());

    // A folder the index names beside itself, and a tarball by URL.
    assert_eq!(output(work.noesis_bare().args(["install", "greeter", "--registry", reg])).code, 0);
    // Issue 31: over plain http a tarball needs a checksum to be believed,
    // from the index or after the URL.
    let url = format!("{base}/summarizer-2.0.0.tar.gz");
    for typed in ["unchecked", url.as_str()] {
        let o = output(work.noesis_bare().args(["install", typed, "--name", "sum2", "--registry", reg]));
        assert_eq!(o.code, 2, "{typed}: {}", o.stderr);
        assert!(o.stderr.contains("is plain http with no checksum"), "{}", o.stderr);
        assert!(!work.path().join("cognitive/modules/sum2").exists());
    }
    let hex = good.strip_prefix("sha256:").unwrap();
    let wrong = format!("{url}#sha256:{}", "0".repeat(64));
    let o = output(work.noesis_bare().args(["install", &wrong, "--name", "sum2"]));
    assert!(o.code == 2 && o.stderr.contains("checksum mismatch"), "{}", o.stderr);
    let o = output(work.noesis_bare().args(["install", &format!("{url}#sha256:{hex}"), "--name", "sum2"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    // The lockfile alone reinstalls all three, byte for byte, no index needed.
    let before = files(&work.path().join("cognitive/modules"));
    std::fs::remove_dir_all(work.path().join("cognitive/modules")).unwrap();
    let o = output(work.noesis_bare().args(["install", "--locked"]));
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert_eq!(files(&work.path().join("cognitive/modules")), before);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// The reference implementation's modules (the conformance material's
/// copies of them), in a local repository shaped like the reference one:
/// each installs by `--path`, takes the built-in's place on the search
/// path, and runs.
#[test]
fn the_reference_modules_install_from_a_local_clone_and_run() {
    let work = Work::new();
    let repo = work.path().join("cognitive-modules");
    let names = ["code-reviewer", "code-simplifier", "task-prioritizer"];
    for name in names {
        copy_dir(&crate::support::example_module(name), &repo.join("cognitive/modules").join(name));
    }
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "modules"]);
    git(&repo, &["tag", "v2.2.0"]);
    let url = format!("file://{}", repo.display());
    for name in names {
        let o = output(work.noesis_bare().args([
            "install",
            &format!("{url}@^2.2"),
            "--path",
            &format!("cognitive/modules/{name}"),
        ]));
        assert_eq!(o.code, 0, "{name}: {}", o.stderr);
        assert!(o.stdout.starts_with(&format!("installed {name} v2.2.0")), "{}", o.stdout);
    }
    let listed = output(work.noesis_bare().args(["list", "--json"])).json();
    for name in names {
        let row = listed.as_array().unwrap().iter().find(|m| m["name"] == name).unwrap();
        assert!(row["location"].as_str().unwrap().contains("cognitive/modules"), "{row}");
        // Each with an input its schema takes.
        let input = match name {
            "task-prioritizer" => json!({"tasks": [{"id": "1", "title": "ship"}]}),
            _ => json!({"code": "x = 1 + 0", "language": "python"}),
        };
        let o = output(work.noesis().args(["run", name, "--provider", "test", "--input", &input.to_string()]));
        assert_eq!(o.code, 0, "{name}: {}\n{}", o.stdout, o.stderr);
        crate::support::assert_valid_envelope(&o.json());
    }
}

/// The module folder's contents, and which tag its prompt names (`None`
/// when the folder is absent).
fn version_of(dir: &Path) -> Option<(String, BTreeMap<String, Vec<u8>>)> {
    if !dir.exists() {
        return None;
    }
    let all = files(dir);
    let prompt = String::from_utf8_lossy(&all["prompt.md"]).into_owned();
    let tag = ["v1.0.0", "v1.1.0", "v2.0.0"].into_iter().find(|t| prompt.contains(t)).unwrap().to_owned();
    Some((tag, all))
}

/// What the lockfile says of `name`: its version and files' digest.
fn locked(work: &Work, name: &str) -> Option<(String, String)> {
    let path = work.path().join("cognitive/cognitive.lock");
    let l: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).unwrap();
    let e = l["modules"].get(name)?;
    Some((e["version"].as_str()?.to_owned(), e["sha256"].as_str()?.to_owned()))
}

/// Nothing but the lock left in the work area, nothing else hidden.
fn tidy(work: &Work) -> Vec<String> {
    let modules = work.path().join("cognitive/modules");
    let mut left: Vec<String> = std::fs::read_dir(&modules)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n != ".noesis-swap")
        .collect();
    left.extend(
        std::fs::read_dir(modules.join(".noesis-swap"))
            .into_iter()
            .flatten()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "lock"),
    );
    left
}

/// Issue 31: kill -9 at each named point of a replacement and of a removal
/// (not after a timer). Before anything tidies up, a reader finds the whole
/// old module or the whole new one, never nothing; the next command finishes
/// or drops the change, and the lockfile then says exactly what is
/// installed: version and digest.
#[test]
fn kill_9_at_each_point_leaves_the_module_and_the_lockfile_agreeing() {
    let work = Work::new();
    let repo = repo(&work);
    let url = format!("file://{}", repo.display());
    let target = work.path().join("cognitive/modules/greeter");
    let install = |tag: &str| {
        let mut c = work.noesis_std();
        c.args(["install", &format!("{url}@{tag}"), "--path", "mods/greeter"]);
        c
    };
    let agree = |round: &str| {
        let now = version_of(&target);
        let lock = locked(&work, "greeter");
        match (&now, &lock) {
            (Some((tag, _)), Some((v, sha))) => {
                assert_eq!(tag, v, "{round}: the folder is {tag}, the lockfile says {v}");
                assert_eq!(&noesis_dist::lock::digest(&target).unwrap(), sha, "{round}: digest");
            }
            (None, None) => {}
            _ => panic!("{round}: folder {:?}, lockfile {lock:?}", now.as_ref().map(|n| &n.0)),
        }
        assert_eq!(tidy(&work), Vec::<String>::new(), "{round}");
        now.map(|n| n.0)
    };
    assert_eq!(output(&mut Command::from_std(install("v1.0.0"))).code, 0);
    let v1 = version_of(&target).unwrap().1;
    for (point, want) in [("staged", "v1.0.0"), ("committed", "v2.0.0"), ("swapped", "v2.0.0"), ("written", "v2.0.0")] {
        crate::support::kill_at(install("v2.0.0"), point);
        // What `noesis run` finds now, before anything tidies up.
        let seen = version_of(&target).unwrap_or_else(|| panic!("{point}: the folder is missing"));
        assert!(seen.0 == "v1.0.0" || seen.0 == "v2.0.0", "{point}: {}", seen.0);
        assert_eq!(seen.1.keys().collect::<Vec<_>>(), v1.keys().collect::<Vec<_>>(), "{point}: a mix");
        // Any command finishes or drops the change first.
        assert_eq!(output(work.noesis_bare().args(["remove", "no-such-module"])).code, 2);
        assert_eq!(agree(&format!("replace, {point}")).as_deref(), Some(want), "{point}");
        if want != "v1.0.0" {
            assert_eq!(output(&mut Command::from_std(install("v1.0.0"))).code, 0);
        }
    }
    for (point, gone) in [("staged", false), ("committed", true), ("swapped", true), ("written", true)] {
        let mut remove = work.noesis_std();
        remove.args(["remove", "greeter"]);
        crate::support::kill_at(remove, point);
        assert_eq!(output(work.noesis_bare().args(["remove", "no-such-module"])).code, 2);
        let now = agree(&format!("remove, {point}"));
        assert_eq!(now.is_none(), gone, "remove, {point}");
        if gone {
            assert_eq!(output(&mut Command::from_std(install("v1.0.0"))).code, 0);
        }
    }
}

/// Issue 31: a second process's recovery deleted a live install's staging
/// folder or undid its swap, and lockfile updates raced. Now the second
/// waits for the first (held at its commit point), and once the first is
/// killed, finishes the first's committed change and then makes its own:
/// both modules installed, both in the lockfile.
#[test]
fn a_second_process_waits_then_finishes_what_the_first_committed() {
    use std::io::BufRead;
    let work = Work::new();
    let repo = repo(&work);
    let url = format!("file://{}", repo.display());
    assert_eq!(
        output(work.noesis_bare().args(["install", &format!("{url}@v1.0.0"), "--path", "mods/greeter"])).code,
        0
    );
    let mut first = work
        .noesis_std()
        .args(["install", &format!("{url}@v2.0.0"), "--path", "mods/greeter"])
        .env("NOESIS_TEST_STOP_AT", "committed")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(first.stderr.take().unwrap()).lines();
    assert!(lines.any(|l| l.is_ok_and(|l| l == "stopped at committed")), "the first never committed");
    let mut second = work
        .noesis_std()
        .args(["install", &format!("{url}@v1.1.0"), "--path", "mods/greeter", "--name", "other"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = std::io::BufReader::new(second.stderr.take().unwrap()).lines();
    let waiting = said.by_ref().map_while(Result::ok).find(|l| l.contains("waiting for another noesis process"));
    assert!(waiting.is_some(), "the second did not wait");
    // While it waits, the first's work is untouched.
    let txns = std::fs::read_dir(work.path().join("cognitive/modules/.noesis-swap")).unwrap().count();
    assert_eq!(txns, 2, "the lock and the first's change");
    assert_eq!(version_of(&work.path().join("cognitive/modules/greeter")).unwrap().0, "v1.0.0");
    first.kill().unwrap();
    first.wait().unwrap();
    let rest: Vec<String> = said.map_while(Result::ok).collect();
    assert!(second.wait().unwrap().success(), "{rest:?}");
    assert!(rest.iter().any(|l| l.contains("finished putting `greeter` in place")), "{rest:?}");
    for (name, tag) in [("greeter", "v2.0.0"), ("other", "v1.1.0")] {
        let dir = work.path().join("cognitive/modules").join(name);
        assert_eq!(version_of(&dir).unwrap().0, tag);
        assert_eq!(locked(&work, name).unwrap(), (tag.to_owned(), noesis_dist::lock::digest(&dir).unwrap()));
    }
    assert_eq!(tidy(&work), Vec::<String>::new());
}

/// Issue 31: cognitive.lock was made with the temporary file's mode (0600),
/// though it is meant to be committed and read by others.
#[test]
fn the_lockfile_gets_the_mode_any_new_file_gets() {
    use std::os::unix::fs::PermissionsExt;
    let work = Work::new();
    let repo = repo(&work);
    let url = format!("file://{}", repo.display());
    assert_eq!(output(work.noesis_bare().args(["install", &url, "--path", "mods/greeter"])).code, 0);
    let plain = work.write("plain.txt", "x");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&work.path().join("cognitive/cognitive.lock")), mode(&plain));
}
