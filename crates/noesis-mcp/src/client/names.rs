//! The names a server's tools are offered under: `SERVER__TOOL`, within
//! what every provider accepts for a tool name (`[A-Za-z0-9_-]{1,64}`).

/// Longest server name: leaves most of the 64 characters to the tool.
const MAX_SERVER: usize = 24;
const MAX_NAME: usize = 64;
const SEPARATOR: &str = "__";

/// Whether `name` can name a server: letters, digits, `-` and single `_`,
/// starting with a letter or digit, at most 24 characters.
pub fn check_server_name(name: &str) -> Result<(), String> {
    let ok_chars = name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    let starts = name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric());
    if name.is_empty()
        || name.len() > MAX_SERVER
        || !ok_chars
        || !starts
        || name.contains(SEPARATOR)
        || name.ends_with('_')
    {
        return Err(format!(
            "`{name}` cannot name a server: use 1 to {MAX_SERVER} letters, digits, `-` or `_` (not `__`), starting with a letter or digit and not ending in `_`"
        ));
    }
    Ok(())
}

/// The name the run offers `tool` of `server` under.
pub fn prefixed(server: &str, tool: &str) -> String {
    let tool: String =
        tool.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    let mut name = format!("{server}{SEPARATOR}{tool}");
    // ASCII only by now, so any byte index is a char boundary.
    name.truncate(MAX_NAME);
    name
}

/// The server part and the tool part of an offered name.
pub fn split_prefixed(name: &str) -> Option<(&str, &str)> {
    name.split_once(SEPARATOR).filter(|(s, t)| !s.is_empty() && !t.is_empty())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn names_are_prefixed_and_kept_within_what_providers_accept() {
        assert_eq!(prefixed("fs", "read_file"), "fs__read_file");
        assert_eq!(prefixed("git", "git.status v2"), "git__git_status_v2");
        assert_eq!(prefixed("s", &"x".repeat(100)).len(), 64);
        assert_eq!(split_prefixed("fs__read_text_file"), Some(("fs", "read_text_file")));
        assert_eq!(split_prefixed("read_file"), None);
        assert_eq!(split_prefixed("__x"), None);
    }

    #[test]
    fn server_names_are_checked() {
        assert!(check_server_name("filesystem").is_ok());
        assert!(check_server_name("my-git_2").is_ok());
        for bad in ["", "a__b", "a_", "-x", "has space", "ü", &"x".repeat(25)] {
            let e = check_server_name(bad).unwrap_err();
            assert!(e.contains("cannot name a server"), "{bad}: {e}");
        }
    }

    proptest! {
        #[test]
        fn prop_prefixed_names_are_valid_and_split_back_to_the_server(
            server in "[a-z0-9][a-z0-9-]{0,20}",
            tool in "\\PC{1,80}",
        ) {
            let name = prefixed(&server, &tool);
            prop_assert!(name.len() <= 64);
            prop_assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
            prop_assert_eq!(split_prefixed(&name).map(|(s, _)| s), Some(server.as_str()));
        }
    }
}
