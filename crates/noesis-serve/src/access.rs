//! Who may talk to the server: the `Host` allow-list that stops DNS
//! rebinding, random secrets, and the sign-in sessions a browser holds.
//!
//! A web page on another site can make a browser send requests to a server
//! on loopback; what it cannot do is make the browser name this server in
//! `Host`, except by pointing a name it controls at 127.0.0.1 (DNS
//! rebinding). So every request must name an allowed host before any route
//! runs: the loopback names (`localhost`, `*.localhost`, which browsers
//! never look up in DNS, `127.0.0.1`, `[::1]`), the bound address, and the
//! names the operator adds. An IP literal cannot be rebound: when the server
//! listens on every address (`0.0.0.0`, `::`), any IP literal is admitted.

use std::collections::{HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;

/// Most sign-in sessions kept; beyond it the oldest is forgotten (its
/// browser signs in again).
const MAX_SESSIONS: usize = 4096;
/// Most one-time sign-in links outstanding.
const MAX_LINKS: usize = 64;

/// A fresh 256-bit secret from the operating system's CSPRNG, as 64 hex
/// digits (safe in a URL, a cookie and a header without encoding).
pub fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| std::io::Error::other(format!("no random bytes from the OS: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Checks a name given to `--allow-host` (or `[serve] allow_hosts`): a DNS
/// name or an IP address, without scheme, port or path. The name in the
/// form requests are matched in (lower case, no trailing dot).
pub fn host_name(name: &str) -> Result<String, String> {
    let n = name.trim().trim_end_matches('.').to_ascii_lowercase();
    if n.is_empty() {
        return Err("an allowed host name is empty".into());
    }
    if let Some(inner) = n.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return inner
            .parse::<std::net::Ipv6Addr>()
            .map(|_| n.clone())
            .map_err(|_| format!("`{name}` is not an IPv6 address in brackets"));
    }
    if let Ok(ip) = n.parse::<IpAddr>() {
        return Ok(match ip {
            IpAddr::V6(_) => format!("[{n}]"),
            IpAddr::V4(_) => n,
        });
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if n.len() > 253 || !n.split('.').all(label_ok) {
        return Err(format!(
            "`{name}` is not a host name (letters, digits, `-` and `.`; no scheme, port or path: `example.com`, not `https://example.com:8787/`)"
        ));
    }
    Ok(n)
}

/// The host part of a `Host` header value (or a URI's authority), lower
/// case, without the port and a trailing dot; `None` when it is malformed.
fn host_of(value: &str) -> Option<String> {
    let v = value.trim();
    let host = if let Some(rest) = v.strip_prefix('[') {
        let (inner, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(|p| p.parse::<u16>().is_ok())) {
            return None;
        }
        format!("[{inner}]")
    } else {
        let (h, port) = v.rsplit_once(':').map_or((v, None), |(h, p)| (h, Some(p)));
        if port.is_some_and(|p| p.parse::<u16>().is_err()) || h.contains(':') {
            return None;
        }
        h.to_owned()
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    (!host.is_empty() && !host.contains(['/', '@', ' ', '\\'])).then_some(host)
}

/// The names a request's `Host` may give (ports are not compared: a proxy
/// or a port forward may put the server behind another port).
#[derive(Debug, Clone)]
pub(crate) struct HostRule {
    bound: IpAddr,
    names: HashSet<String>,
}

impl HostRule {
    /// The loopback names, `bound`, and `extra` (already checked names).
    pub(crate) fn new(bound: IpAddr, extra: &[String]) -> HostRule {
        HostRule { bound, names: extra.iter().cloned().collect() }
    }

    /// Whether `host` (a `Host` header value) names this server.
    pub(crate) fn admits(&self, host: &str) -> bool {
        let Some(h) = host_of(host) else { return false };
        if h == "localhost" || h.ends_with(".localhost") || self.names.contains(&h) {
            return true;
        }
        let ip = h.strip_prefix('[').and_then(|r| r.strip_suffix(']')).unwrap_or(&h).parse::<IpAddr>();
        match ip {
            Ok(ip) => ip.is_loopback() || ip == self.bound || self.bound.is_unspecified(),
            Err(_) => false,
        }
    }
}

/// Sign-in sessions (random ids kept here, never derived from the token)
/// and one-time sign-in links.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    live: Mutex<(HashSet<String>, VecDeque<String>)>,
    links: Mutex<VecDeque<String>>,
}

impl Sessions {
    /// A new session; its id.
    pub(crate) fn open(&self) -> std::io::Result<String> {
        let id = random_token()?;
        let mut live = self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (ids, order) = &mut *live;
        ids.insert(id.clone());
        order.push_back(id.clone());
        while order.len() > MAX_SESSIONS {
            if let Some(old) = order.pop_front() {
                ids.remove(&old);
            }
        }
        Ok(id)
    }

    /// Whether `id` is a session this server opened. (A hash lookup, not a
    /// constant-time compare: the ids are 256 random bits, so timing tells
    /// nothing worth having.)
    pub(crate) fn holds(&self, id: &str) -> bool {
        self.live.lock().unwrap_or_else(std::sync::PoisonError::into_inner).0.contains(id)
    }

    /// A new one-time sign-in secret.
    pub(crate) fn link(&self) -> std::io::Result<String> {
        let secret = random_token()?;
        let mut links = self.links.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        links.push_back(secret.clone());
        while links.len() > MAX_LINKS {
            links.pop_front();
        }
        Ok(secret)
    }

    /// Uses up one-time secret `given`: true the first time only.
    pub(crate) fn redeem(&self, given: &str) -> bool {
        let mut links = self.links.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let found = links.iter().position(|s| crate::http::constant_time_eq(s.as_bytes(), given.as_bytes()));
        found.and_then(|i| links.remove(i)).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_admitted() {
        let loopback = HostRule::new("127.0.0.1".parse().unwrap(), &["noesis.example".into()]);
        for ok in [
            "localhost",
            "localhost:8787",
            "LOCALHOST.",
            "app.localhost:1",
            "127.0.0.1",
            "127.0.0.1:8787",
            "[::1]",
            "[::1]:8787",
            "noesis.example",
            "noesis.example:443",
        ] {
            assert!(loopback.admits(ok), "{ok}");
        }
        for refused in [
            "",
            "attacker.example",
            "attacker.example:8787",
            "localhost.attacker.example",
            "evil-localhost",
            "10.0.0.1",
            "[::2]",
            "localhost:notaport",
            "user@localhost",
            "::1",
            "[::1]x",
            "noesis.example.evil",
        ] {
            assert!(!loopback.admits(refused), "{refused}");
        }
        let bound = HostRule::new("192.168.1.5".parse().unwrap(), &[]);
        assert!(bound.admits("192.168.1.5:8787") && bound.admits("localhost"));
        assert!(!bound.admits("192.168.1.6") && !bound.admits("myhost.lan"));
        let any = HostRule::new("0.0.0.0".parse().unwrap(), &[]);
        assert!(any.admits("192.168.1.6:80") && any.admits("[fe80::1]"));
        assert!(!any.admits("myhost.lan"), "a name must still be allowed by the operator");
    }

    #[test]
    fn allowed_names_are_checked() {
        assert_eq!(host_name("Noesis.Example.").unwrap(), "noesis.example");
        assert_eq!(host_name("::1").unwrap(), "[::1]");
        assert_eq!(host_name("[fe80::1]").unwrap(), "[fe80::1]");
        assert_eq!(host_name("10.0.0.2").unwrap(), "10.0.0.2");
        for bad in ["", "https://x.example", "x.example:8787", "x.example/a", "a..b", "-a.b", "a b", "[zz]"] {
            assert!(host_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tokens_are_random_and_links_work_once() {
        let (a, b) = (random_token().unwrap(), random_token().unwrap());
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        let s = Sessions::default();
        let link = s.link().unwrap();
        assert!(!s.redeem("nope"));
        assert!(s.redeem(&link));
        assert!(!s.redeem(&link), "a link works once");
        let id = s.open().unwrap();
        assert!(s.holds(&id) && !s.holds(&link));
    }
}
