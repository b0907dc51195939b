//! What to probe and how often.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

/// The kind of probe, because some services accept TCP connections long
/// after (or while) the application behind them has stopped working, and an
/// HTTP status catches that.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    /// A TCP connection that completes within the timeout and is then
    /// closed; the cheapest check, valid for any TCP service.
    Tcp,
    /// An HTTP/1.1 `GET` whose response status must fall in `expect`, for
    /// services that report their own readiness.
    Http {
        /// Request path sent verbatim in the request line; must start with
        /// `/` (an empty path means `/`).
        path: String,
        /// Accepted status codes, inclusive on both ends (e.g. `(200, 399)`).
        expect: (u16, u16),
        /// `Host` header; `None` sends the probed address, which is what a
        /// backend addressed by IP usually expects.
        host: Option<String>,
    },
}

/// Everything needed to probe one backend, so that a target can be compared
/// with its previous configuration (`==`) to decide whether it must restart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProbeSpec {
    /// What each probe does.
    pub kind: ProbeKind,
    /// Where to connect: the backend's own address with the probe port. Not
    /// the VIP, which in NAT mode is not reachable from the control plane.
    pub target: SocketAddr,
    /// Time between the starts of two probes. The first probe runs as soon
    /// as the target is added.
    pub interval: Duration,
    /// Longest a whole probe (connect, and for HTTP the request and the
    /// status line) may take before it counts as a failure.
    pub timeout: Duration,
    /// Consecutive successes that bring a down target up.
    pub rise: u32,
    /// Consecutive failures that take an up target down.
    pub fall: u32,
}

/// Why a [`ProbeSpec`] cannot be used as given, so configuration errors are
/// reported before anything is probed rather than as failing probes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A zero `rise` would make a target up without any success.
    #[error("rise must be at least 1")]
    ZeroRise,
    /// A zero `fall` would take a target down without any failure.
    #[error("fall must be at least 1")]
    ZeroFall,
    /// A zero interval would probe in a busy loop.
    #[error("interval must be greater than zero")]
    ZeroInterval,
    /// A zero timeout makes every probe fail.
    #[error("timeout must be greater than zero")]
    ZeroTimeout,
    /// The HTTP path would produce a malformed request line.
    #[error("http path {0:?} must start with '/' and contain no spaces or control characters")]
    InvalidPath(String),
    /// The Host header value would produce a malformed request.
    #[error("http host {0:?} must be non-empty and contain no spaces or control characters")]
    InvalidHost(String),
    /// The accepted status range is empty or outside 100-599.
    #[error("http expected status range {0}-{1} must satisfy 100 <= low <= high <= 599")]
    InvalidRange(u16, u16),
}

impl ProbeSpec {
    /// The probed endpoint as a short string for logs and status output:
    /// `10.0.0.1:8080` for TCP, `http://10.0.0.1:8080/healthz` for HTTP.
    pub fn target_display(&self) -> String {
        match &self.kind {
            ProbeKind::Tcp => self.target.to_string(),
            ProbeKind::Http { path, .. } => {
                let mut s = String::new();
                let _ = write!(s, "http://{}{}", self.target, request_path(path));
                s
            }
        }
    }

    /// Checks the spec for values that cannot work, so a configuration
    /// loader can reject them with a clear message. The [`crate::Prober`]
    /// still accepts an invalid spec (rise/fall of 0 act as 1, a zero
    /// interval is raised to a small minimum, a bad path or host makes every
    /// probe fail with the reason as its detail).
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.rise == 0 {
            return Err(SpecError::ZeroRise);
        }
        if self.fall == 0 {
            return Err(SpecError::ZeroFall);
        }
        if self.interval.is_zero() {
            return Err(SpecError::ZeroInterval);
        }
        if self.timeout.is_zero() {
            return Err(SpecError::ZeroTimeout);
        }
        if let ProbeKind::Http { path, expect, host } = &self.kind {
            check_http(path, *expect, host.as_deref())?;
        }
        Ok(())
    }
}

/// The path as sent: an empty path means `/`.
pub(crate) fn request_path(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

/// True for bytes that would break the request line or a header.
fn is_unsafe_byte(b: u8) -> bool {
    b <= b' ' || b == 0x7f
}

/// Validates the HTTP parts of a spec; shared by [`ProbeSpec::validate`] and
/// the probe itself (which must never send a malformed request).
pub(crate) fn check_http(
    path: &str,
    expect: (u16, u16),
    host: Option<&str>,
) -> Result<(), SpecError> {
    let p = request_path(path);
    if !p.starts_with('/') || p.bytes().any(is_unsafe_byte) {
        return Err(SpecError::InvalidPath(path.to_owned()));
    }
    if let Some(h) = host
        && (h.is_empty() || h.bytes().any(is_unsafe_byte))
    {
        return Err(SpecError::InvalidHost(h.to_owned()));
    }
    let (lo, hi) = expect;
    if !(100..=599).contains(&lo) || !(100..=599).contains(&hi) || lo > hi {
        return Err(SpecError::InvalidRange(lo, hi));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: ProbeKind) -> ProbeSpec {
        ProbeSpec {
            kind,
            target: "10.0.0.1:8080".parse().unwrap(),
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
            rise: 2,
            fall: 3,
        }
    }

    fn http(path: &str, expect: (u16, u16), host: Option<&str>) -> ProbeKind {
        ProbeKind::Http {
            path: path.into(),
            expect,
            host: host.map(Into::into),
        }
    }

    #[test]
    fn display() {
        assert_eq!(spec(ProbeKind::Tcp).target_display(), "10.0.0.1:8080");
        assert_eq!(
            spec(http("/healthz", (200, 399), None)).target_display(),
            "http://10.0.0.1:8080/healthz"
        );
        assert_eq!(
            spec(http("", (200, 399), None)).target_display(),
            "http://10.0.0.1:8080/"
        );
        let mut v6 = spec(http("/h", (200, 399), None));
        v6.target = "[fd00::1]:80".parse().unwrap();
        assert_eq!(v6.target_display(), "http://[fd00::1]:80/h");
    }

    #[test]
    fn validate() {
        assert_eq!(spec(ProbeKind::Tcp).validate(), Ok(()));
        assert_eq!(
            spec(http("/a?b=c", (200, 200), Some("example.org"))).validate(),
            Ok(())
        );
        assert_eq!(spec(http("", (100, 599), None)).validate(), Ok(()));
        let mut s = spec(ProbeKind::Tcp);
        s.rise = 0;
        assert_eq!(s.validate(), Err(SpecError::ZeroRise));
        let mut s = spec(ProbeKind::Tcp);
        s.fall = 0;
        assert_eq!(s.validate(), Err(SpecError::ZeroFall));
        let mut s = spec(ProbeKind::Tcp);
        s.interval = Duration::ZERO;
        assert_eq!(s.validate(), Err(SpecError::ZeroInterval));
        let mut s = spec(ProbeKind::Tcp);
        s.timeout = Duration::ZERO;
        assert_eq!(s.validate(), Err(SpecError::ZeroTimeout));
        for bad in ["healthz", "/a b", "/a\r\nX: y", "/\u{7f}"] {
            assert_eq!(
                spec(http(bad, (200, 399), None)).validate(),
                Err(SpecError::InvalidPath(bad.into())),
                "{bad:?}"
            );
        }
        for bad in ["", "a b", "a\nb"] {
            assert_eq!(
                spec(http("/", (200, 399), Some(bad))).validate(),
                Err(SpecError::InvalidHost(bad.into()))
            );
        }
        for (lo, hi) in [(300, 200), (99, 200), (200, 600), (0, 0)] {
            assert_eq!(
                spec(http("/", (lo, hi), None)).validate(),
                Err(SpecError::InvalidRange(lo, hi))
            );
        }
    }
}
