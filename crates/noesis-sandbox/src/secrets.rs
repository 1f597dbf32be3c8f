//! Secrets of the environment: which variables a confined process gets,
//! which values are secrets, and their redaction from anything a process
//! printed before it reaches a model, a store, a stream or a trace.

use std::borrow::Cow;
use std::path::Path;

use aho_corasick::{AhoCorasick, MatchKind};

/// Variables passed to a confined process as they are.
const PASSED: &[&str] = &["LANG", "LANGUAGE", "TERM", "TZ", "COLORTERM", "NO_COLOR"];

/// Where toolchains live: paths, not secrets, and without them `cargo`,
/// `rustup`, `pyenv` or a virtualenv look for themselves under the
/// sandbox's own `HOME`.
const TOOLCHAIN: &[&str] = &[
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "PYENV_ROOT",
    "PYENV_VERSION",
    "VIRTUAL_ENV",
    "NVM_DIR",
    "NVM_BIN",
    "JAVA_HOME",
    "GOROOT",
    "GOPATH",
    "CONDA_PREFIX",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Shortest value taken as a secret when only its variable's name says
/// so: shorter ones (`1`, `true`) would blank ordinary text.
pub const MIN_SECRET_LEN: usize = 8;

/// Shortest value the operator may name as a secret (`[redact] values`).
pub const MIN_NAMED_LEN: usize = 4;

/// Whether a variable's name says it holds a secret: `*_KEY`, `*_TOKEN`,
/// `*_SECRET`, `*PASSWORD*` (any case), and a few spellings of the same.
pub fn is_secret_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    n.ends_with("_KEY")
        || n.ends_with("_TOKEN")
        || n.ends_with("_SECRET")
        || n.contains("PASSWORD")
        || n.contains("PASSWD")
        || n.ends_with("_CREDENTIALS")
        || n.ends_with("_API_KEY_ID")
        || n == "TOKEN"
        || n == "SECRET"
}

/// The password of a URL with credentials (`postgres://u:pw@host/db`), a
/// secret whatever its variable is called.
fn url_password(value: &str) -> Option<&str> {
    let (_, rest) = value.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    (!password.is_empty()).then_some(password)
}

/// Where the toolchains that find themselves through the home folder
/// live (`CARGO_HOME`, `RUSTUP_HOME`, `PYENV_ROOT`): from their variables,
/// else from `PATH` (`…/.cargo/bin`, `…/.pyenv/shims`), else under
/// `home`; only those `exists` confirms. A confined process gets a home
/// folder of its own, so these are named to it by their variables, and
/// are readable.
pub fn toolchain_homes(
    host: &[(String, String)],
    home: Option<&Path>,
    exists: &dyn Fn(&Path) -> bool,
) -> Vec<(String, std::path::PathBuf)> {
    use std::path::PathBuf;
    let get = |k: &str| host.iter().find(|(n, _)| n == k).map(|(_, v)| PathBuf::from(v)).filter(|p| p.is_absolute());
    let path = host.iter().find(|(n, _)| n == "PATH").map(|(_, v)| v.as_str()).unwrap_or_default();
    let on_path = |tail: &str| {
        path.split(':').find_map(|e| e.strip_suffix(tail).filter(|p| p.starts_with('/')).map(PathBuf::from))
    };
    let under_home = |dir: &str| home.map(|h| h.join(dir));
    let cargo = get("CARGO_HOME")
        .or_else(|| on_path("/bin").filter(|p| p.ends_with(".cargo")))
        .or_else(|| under_home(".cargo"));
    let rustup = get("RUSTUP_HOME")
        .or_else(|| under_home(".rustup").filter(|p| exists(p)))
        .or_else(|| cargo.as_ref().and_then(|c| c.parent()).map(|p| p.join(".rustup")));
    let pyenv = get("PYENV_ROOT")
        .or_else(|| on_path("/shims").filter(|p| p.ends_with(".pyenv")))
        .or_else(|| under_home(".pyenv"));
    [("CARGO_HOME", cargo), ("RUSTUP_HOME", rustup), ("PYENV_ROOT", pyenv)]
        .into_iter()
        .filter_map(|(n, p)| p.filter(|p| exists(p)).map(|p| (n.to_owned(), p)))
        .collect()
}

/// The environment of a confined process, from noesis's own: `PATH`
/// (absolute entries only), the locale and terminal variables, toolchain
/// locations (`toolchains`, from [`toolchain_homes`]), `HOME` and `TMPDIR`
/// pointing into the run's own folder, and the variables the operator
/// names in `extra` (`[sandbox] env`). Nothing else passes: provider keys
/// and tokens stay in noesis.
pub fn child_env(
    host: &[(String, String)],
    extra: &[String],
    home: &Path,
    tmp: &Path,
    toolchains: &[(String, std::path::PathBuf)],
) -> Vec<(String, String)> {
    let get = |k: &str| host.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let mut out: Vec<(String, String)> = Vec::new();
    let path = get("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".to_owned());
    out.push(("PATH".into(), crate::paths::confined_path(&path)));
    for (name, value) in host {
        let passed = PASSED.contains(&name.as_str())
            || name.starts_with("LC_")
            || TOOLCHAIN.contains(&name.as_str())
            || extra.iter().any(|e| e == name);
        if passed && !out.iter().any(|(n, _)| n == name) {
            out.push((name.clone(), value.clone()));
        }
    }
    for (var, dir) in toolchains {
        if !out.iter().any(|(n, _)| n == var) {
            out.push((var.clone(), dir.to_string_lossy().into_owned()));
        }
    }
    out.push(("HOME".into(), home.to_string_lossy().into_owned()));
    out.push(("TMPDIR".into(), tmp.to_string_lossy().into_owned()));
    out
}

/// Replaces secret values with `[redacted:NAME]`.
#[derive(Clone, Default)]
pub struct Redactor {
    matcher: Option<AhoCorasick>,
    names: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The names only: the values are what must never be printed.
        f.debug_struct("Redactor").field("names", &self.names).finish()
    }
}

impl Redactor {
    /// Redacts the values of `vars` whose names are secret-like (see
    /// [`is_secret_name`]) or listed in `names` (the configured provider
    /// keys' variables), passwords in URLs, and each of `values` (the
    /// operator's `[redact] values`, shown as `[redacted:value]`).
    pub fn new(vars: &[(String, String)], names: &[String], values: &[String]) -> Redactor {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (name, value) in vars {
            let named = names.iter().any(|n| n == name);
            if (named || is_secret_name(name)) && value.len() >= MIN_SECRET_LEN {
                pairs.push((value.clone(), name.clone()));
            }
            if let Some(pw) = url_password(value).filter(|p| p.len() >= MIN_NAMED_LEN) {
                pairs.push((pw.to_owned(), name.clone()));
            }
        }
        for v in values.iter().filter(|v| v.len() >= MIN_NAMED_LEN) {
            pairs.push((v.clone(), "value".into()));
        }
        // Longest first, so a secret that contains another is replaced whole.
        pairs.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then_with(|| a.1.cmp(&b.1)));
        pairs.dedup_by(|a, b| a.0 == b.0);
        if pairs.is_empty() {
            return Redactor::default();
        }
        let matcher =
            AhoCorasick::builder().match_kind(MatchKind::LeftmostLongest).build(pairs.iter().map(|(v, _)| v)).ok();
        Redactor { matcher, names: pairs.into_iter().map(|(_, n)| n).collect() }
    }

    /// A redactor over this process's environment (see [`Redactor::new`]).
    pub fn from_env(names: &[String], values: &[String]) -> Redactor {
        let vars: Vec<(String, String)> =
            std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))).collect();
        Redactor::new(&vars, names, values)
    }

    /// Whether there is nothing to redact.
    pub fn is_empty(&self) -> bool {
        self.matcher.is_none()
    }

    /// `text` with every secret value replaced.
    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let Some(m) = &self.matcher else { return Cow::Borrowed(text) };
        if m.find(text).is_none() {
            return Cow::Borrowed(text);
        }
        let mut out = String::with_capacity(text.len());
        let mut last = 0;
        for hit in m.find_iter(text) {
            out.push_str(&text[last..hit.start()]);
            out.push_str("[redacted:");
            out.push_str(&self.names[hit.pattern().as_usize()]);
            out.push(']');
            last = hit.end();
        }
        out.push_str(&text[last..]);
        Cow::Owned(out)
    }

    /// Redacts every string in a JSON value, keys included.
    pub fn redact_json(&self, value: &mut serde_json::Value) {
        use serde_json::Value;
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(s) => {
                if let Cow::Owned(o) = self.redact(s) {
                    *s = o;
                }
            }
            Value::Array(a) => a.iter_mut().for_each(|v| self.redact_json(v)),
            Value::Object(o) => {
                let entries = std::mem::take(o);
                for (k, mut v) in entries {
                    self.redact_json(&mut v);
                    o.insert(self.redact(&k).into_owned(), v);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn secret_names() {
        for n in ["OPENAI_API_KEY", "github_token", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "MYPASSWORDX", "X_SECRET"] {
            assert!(is_secret_name(n), "{n}");
        }
        for n in ["PATH", "HOME", "KEYBOARD", "TOKENIZER_PATH", "LANG", "SECRETARY_NAME"] {
            assert!(!is_secret_name(n), "{n}");
        }
    }

    #[test]
    fn values_of_secret_variables_are_replaced_by_their_names() {
        let r = Redactor::new(
            &vars(&[
                ("OPENAI_API_KEY", "sk-test-0123456789abcdef"),
                ("SHORT_TOKEN", "abc"),
                ("HOME", "/root"),
                ("DATABASE_URL", "postgres://app:hunter2pw@db/x"),
                ("ANTHROPIC_KEY_VAR", "not-a-secret-name-but-configured"),
            ]),
            &["ANTHROPIC_KEY_VAR".into()],
            &["pineapple".into(), "ab".into()],
        );
        let text = "key=sk-test-0123456789abcdef home=/root abc pw=hunter2pw c=not-a-secret-name-but-configured \
                    fruit=pineapple ab";
        assert_eq!(
            r.redact(text),
            "key=[redacted:OPENAI_API_KEY] home=/root abc pw=[redacted:DATABASE_URL] \
             c=[redacted:ANTHROPIC_KEY_VAR] fruit=[redacted:value] ab"
        );
        assert!(matches!(r.redact("nothing here"), Cow::Borrowed(_)));
        assert!(!format!("{r:?}").contains("sk-test"), "Debug never shows a value");
    }

    #[test]
    fn a_secret_inside_a_longer_one_is_replaced_whole() {
        let r = Redactor::new(&vars(&[("A_TOKEN", "abcdefgh"), ("B_TOKEN", "xxabcdefghxx")]), &[], &[]);
        assert_eq!(r.redact("xxabcdefghxx abcdefgh"), "[redacted:B_TOKEN] [redacted:A_TOKEN]");
    }

    #[test]
    fn json_strings_and_keys_are_redacted() {
        let r = Redactor::new(&vars(&[("A_TOKEN", "abcdefgh")]), &[], &[]);
        let mut v = serde_json::json!({"abcdefgh": ["x abcdefgh", 1, {"k": "abcdefgh"}]});
        r.redact_json(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"[redacted:A_TOKEN]": ["x [redacted:A_TOKEN]", 1, {"k": "[redacted:A_TOKEN]"}]})
        );
    }

    #[test]
    fn the_child_environment_passes_only_what_is_allowed() {
        let host = vars(&[
            ("PATH", "/usr/bin:.:/bin"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", "C"),
            ("OPENAI_API_KEY", "sk-1234567890"),
            ("AWS_PROFILE", "prod"),
            ("CARGO_HOME", "/opt/cargo"),
            ("MY_FLAG", "1"),
            ("HOME", "/root"),
        ]);
        let env = child_env(&host, &["MY_FLAG".into()], Path::new("/run/x/home"), Path::new("/run/x/tmp"), &[]);
        let names: Vec<&str> = env.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["PATH", "LANG", "LC_ALL", "CARGO_HOME", "MY_FLAG", "HOME", "TMPDIR"]);
        assert_eq!(env[0].1, "/usr/bin:/bin");
        assert_eq!(env.iter().find(|(n, _)| n == "HOME").map(|(_, v)| PathBuf::from(v)), Some("/run/x/home".into()));
    }

    #[test]
    fn toolchains_are_found_by_variable_then_path_then_home() {
        let all = |_: &Path| true;
        let host = vars(&[("PATH", "/opt/rust/.cargo/bin:/usr/bin:/h/.pyenv/shims")]);
        let t = toolchain_homes(&host, Some(Path::new("/fake-home")), &|p| !p.starts_with("/fake-home"));
        assert_eq!(
            t,
            [
                ("CARGO_HOME".to_owned(), PathBuf::from("/opt/rust/.cargo")),
                ("RUSTUP_HOME".to_owned(), PathBuf::from("/opt/rust/.rustup")),
                ("PYENV_ROOT".to_owned(), PathBuf::from("/h/.pyenv")),
            ]
        );
        let host = vars(&[("CARGO_HOME", "/c"), ("RUSTUP_HOME", "/r"), ("PATH", "/usr/bin")]);
        let t = toolchain_homes(&host, Some(Path::new("/home/u")), &all);
        assert_eq!(t[0].1, PathBuf::from("/c"));
        assert_eq!(t[1].1, PathBuf::from("/r"));
        assert_eq!(t[2].1, PathBuf::from("/home/u/.pyenv"));
        assert!(toolchain_homes(&host, None, &|_| false).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn prop_no_secret_survives_redaction(secret in "[a-zA-Z0-9_-]{8,40}", before in ".{0,40}", after in ".{0,40}") {
            // The marker itself may not spell the secret.
            proptest::prop_assume!(!"[redacted:X_TOKEN]".contains(&secret));
            let r = Redactor::new(&vars(&[("X_TOKEN", &secret)]), &[], &[]);
            let out = r.redact(&format!("{before}{secret}{after}")).into_owned();
            proptest::prop_assert!(!out.contains(&secret), "{out}");
        }
    }
}
