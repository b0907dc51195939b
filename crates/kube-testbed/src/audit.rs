//! The test bed's audit log: every request with who made it, read back by [`AuditCursor`].
//!
//! Why: kube-apiserver's `apiserver_request_total` has no user label, so it cannot tell a
//! controller's requests from a benchmark's own or from the API server's loopback clients.
//! The audit log can, and it is the API server's own record, not the client's idea of what it
//! sent (retries, watches re-established, pagination all show up).

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The policy file's name in the test bed's directory.
pub(crate) const POLICY_FILE: &str = "audit-policy.yaml";
/// The log's name in the test bed's directory.
pub(crate) const LOG_FILE: &str = "audit.log";

/// One event per request (at ResponseComplete, or Panic), metadata only: no bodies.
pub(crate) const POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
  - level: Metadata
";

/// One request as the API server recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// `user.username`, e.g. `system:serviceaccount:NS:NAME`.
    pub user: String,
    /// The verb (`get`, `list`, `watch`, `create`, `patch`, `update`, `delete`, ...).
    pub verb: String,
    /// `objectRef.resource`, with `/subresource` when there is one (`services/status`); the
    /// request URI's path for requests without an object (`/metrics`, discovery).
    pub resource: String,
    /// The HTTP status code of the response (0 when the event has none).
    pub code: u16,
}

/// Parses one line of the log; None for a line that is not a request event.
pub fn parse_line(line: &str) -> Option<Request> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v["kind"] != "Event" {
        return None;
    }
    let s = |p: &serde_json::Value| p.as_str().unwrap_or("").to_string();
    let resource = match v["objectRef"]["resource"].as_str() {
        Some(r) => match v["objectRef"]["subresource"].as_str() {
            Some(sub) if !sub.is_empty() => format!("{r}/{sub}"),
            _ => r.to_string(),
        },
        None => s(&v["requestURI"])
            .split('?')
            .next()
            .unwrap_or("")
            .to_string(),
    };
    Some(Request {
        user: s(&v["user"]["username"]),
        verb: s(&v["verb"]),
        resource,
        code: v["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
    })
}

/// Reads the log from where it last stopped, so a benchmark counts one phase's requests.
pub struct AuditCursor {
    path: PathBuf,
    offset: u64,
}

impl AuditCursor {
    /// A cursor at the current end of the log at `path` (nothing before now is counted).
    pub fn at_end(path: &Path) -> Result<AuditCursor> {
        let offset = std::fs::metadata(path)
            .map(|m| m.len())
            .or_else(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    Ok(0)
                } else {
                    Err(e)
                }
            })
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(AuditCursor {
            path: path.to_path_buf(),
            offset,
        })
    }

    /// The requests logged since the last call (or since the cursor was made). A line still
    /// being written (no newline yet) is left for the next call.
    pub fn take(&mut self) -> Result<Vec<Request>> {
        let mut f = std::fs::File::open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        f.seek(SeekFrom::Start(self.offset))?;
        let mut text = String::new();
        f.read_to_string(&mut text)
            .with_context(|| format!("reading {}", self.path.display()))?;
        let complete = text.rfind('\n').map(|i| i + 1).unwrap_or(0);
        self.offset += complete as u64;
        Ok(text[..complete].lines().filter_map(parse_line).collect())
    }
}

/// Requests of `user` by `verb resource`, e.g. `patch services/status` -> 10000.
pub fn count_of(requests: &[Request], user: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for r in requests.iter().filter(|r| r.user == user) {
        *out.entry(format!("{} {}", r.verb, r.resource)).or_default() += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_event_with_and_without_an_object() {
        let with = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"a","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/x/services/s/status?fieldManager=rivora-controller","verb":"patch","user":{"username":"system:serviceaccount:rs:rivora-controller","groups":["system:serviceaccounts"]},"objectRef":{"resource":"services","namespace":"x","name":"s","apiVersion":"v1","subresource":"status"},"responseStatus":{"metadata":{},"code":200}}"#;
        assert_eq!(
            parse_line(with),
            Some(Request {
                user: "system:serviceaccount:rs:rivora-controller".into(),
                verb: "patch".into(),
                resource: "services/status".into(),
                code: 200,
            })
        );
        let without = r#"{"kind":"Event","stage":"ResponseComplete","requestURI":"/metrics?x=1","verb":"get","user":{"username":"admin"},"responseStatus":{"code":200}}"#;
        assert_eq!(parse_line(without).unwrap().resource, "/metrics");
        assert_eq!(parse_line("not json"), None);
        assert_eq!(parse_line(r#"{"kind":"EventList"}"#), None);
        let reqs = vec![
            parse_line(with).unwrap(),
            parse_line(with).unwrap(),
            parse_line(without).unwrap(),
        ];
        let c = count_of(&reqs, "system:serviceaccount:rs:rivora-controller");
        assert_eq!(c.get("patch services/status"), Some(&2));
        assert_eq!(c.len(), 1);
    }
}
