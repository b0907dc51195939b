//! What a node agent refuses in a [`ServicePolicySpec`], and the probe it builds from one.
//!
//! Why it lives here: every rivorad node applies the settings of the policy attached to a
//! Service port, and rivora-controller reports in the policy's status whether the nodes will
//! (`Accepted`, or `Invalid` naming the field). Both call [`check`], so the status can never say
//! Accepted for a policy the nodes refuse, nor Invalid for one they apply.
//!
//! The API server already refuses most bad values (schema ranges, patterns, CEL). What is left
//! here is what the schema does not say (an HTTP path or Host header with spaces or control
//! characters, which rivora-health refuses) and the same bounds again, because a reader must
//! not trust every writer (an older CRD, a hand-written object in a test).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use rivora_health::{ProbeKind, ProbeSpec, SpecError};

use crate::service_policy::{MAX_SYN_RATE, check_defaults};
use crate::{CheckType, HealthCheck, ServicePolicySpec, SynRateLimit};

/// A per-source SYN token bucket as the datapath takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SynLimit {
    /// SYNs per second per client address, 1 to [`MAX_SYN_RATE`].
    pub rate: u64,
    /// Bucket depth, 1 to [`MAX_SYN_RATE`] (the rate when the policy leaves it out).
    pub burst: u64,
}

/// The parts of a policy a node agent programs, once [`check`] found nothing to refuse.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Checked<'a> {
    /// The active health check; `None` without one and for `type: none` (no probing, so its
    /// other fields are not looked at).
    pub health_check: Option<&'a HealthCheck>,
    /// The SYN rate limit, if any.
    pub syn_rate_limit: Option<SynLimit>,
}

/// The settings of `spec` a node applies, or `Err` naming the first field it refuses and why.
pub fn check(spec: &ServicePolicySpec) -> Result<Checked<'_>, String> {
    let syn_rate_limit = spec.syn_rate_limit.as_ref().map(syn_limit).transpose()?;
    let health_check = spec
        .health_check
        .as_ref()
        .filter(|h| h.kind != CheckType::None);
    if let Some(hc) = health_check {
        // A probe's validity does not depend on the backend it probes (only its port does, when
        // the check sets none): any address stands in for "every backend".
        probe_spec(hc, SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 1))?;
    }
    Ok(Checked {
        health_check,
        syn_rate_limit,
    })
}

fn syn_limit(l: &SynRateLimit) -> Result<SynLimit, String> {
    let bounded = |field: &str, v: i64| {
        u64::try_from(v)
            .ok()
            .filter(|v| (1..=MAX_SYN_RATE as u64).contains(v))
            .ok_or_else(|| format!("synRateLimit.{field} {v} is outside 1-{MAX_SYN_RATE}"))
    };
    let rate = bounded("rate", l.rate)?;
    let burst = match l.burst {
        None => rate,
        Some(b) => bounded("burst", b)?,
    };
    Ok(SynLimit { rate, burst })
}

/// The probe of one backend under `hc`: `backend` is the endpoint's address and port, and the
/// check's `port` replaces that port when set. `Err` names the field (`healthCheck.…`).
pub fn probe_spec(hc: &HealthCheck, backend: SocketAddr) -> Result<ProbeSpec, String> {
    let kind = match hc.kind {
        CheckType::Http => ProbeKind::Http {
            path: hc
                .path
                .clone()
                .unwrap_or_else(|| check_defaults::PATH.into()),
            expect: match hc.expect_status {
                None => check_defaults::EXPECT_STATUS,
                Some(r) => (
                    u16::try_from(r.from).map_err(|_| {
                        format!("healthCheck.expectStatus.from {} is not a status", r.from)
                    })?,
                    u16::try_from(r.to).map_err(|_| {
                        format!("healthCheck.expectStatus.to {} is not a status", r.to)
                    })?,
                ),
            },
            host: hc.host.clone(),
        },
        // `type: none` is never probed (check() drops it); were it asked, a TCP probe.
        CheckType::Tcp | CheckType::None => ProbeKind::Tcp,
    };
    let port = match hc.port {
        None => backend.port(),
        Some(p) => u16::try_from(p)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("healthCheck.port {p} is not a port number"))?,
    };
    let spec = ProbeSpec {
        kind,
        target: SocketAddr::new(backend.ip(), port),
        interval: hc.interval()?,
        timeout: hc.timeout()?,
        rise: hc.rise(),
        fall: hc.fall(),
    };
    spec.validate()
        .map_err(|e| format!("healthCheck.{}: {e}", spec_error_field(&e)))?;
    Ok(spec)
}

/// The `healthCheck` field a prober's refusal is about.
fn spec_error_field(e: &SpecError) -> &'static str {
    match e {
        SpecError::ZeroRise => "rise",
        SpecError::ZeroFall => "fall",
        SpecError::ZeroInterval => "interval",
        SpecError::ZeroTimeout => "timeout",
        SpecError::InvalidPath(_) => "path",
        SpecError::InvalidHost(_) => "host",
        SpecError::InvalidRange(..) => "expectStatus",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use std::time::Duration;

    fn spec(extra: Value) -> ServicePolicySpec {
        let mut v = json!({"targetRefs": [{"group": "", "kind": "Service", "name": "web"}]});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn an_empty_policy_programs_nothing_and_is_fine() {
        let s = spec(json!({}));
        assert_eq!(
            check(&s),
            Ok(Checked {
                health_check: None,
                syn_rate_limit: None
            })
        );
    }

    #[test]
    fn syn_limits_are_bounded_like_the_static_yaml_and_burst_defaults_to_the_rate() {
        let s = spec(json!({"synRateLimit": {"rate": 50}}));
        assert_eq!(
            check(&s).unwrap().syn_rate_limit,
            Some(SynLimit {
                rate: 50,
                burst: 50
            })
        );
        let s = spec(json!({"synRateLimit": {"rate": 1000000, "burst": 1}}));
        assert_eq!(
            check(&s).unwrap().syn_rate_limit,
            Some(SynLimit {
                rate: 1_000_000,
                burst: 1
            })
        );
        for (limit, field) in [
            (json!({"rate": 0}), "synRateLimit.rate 0 "),
            (json!({"rate": -5}), "synRateLimit.rate -5 "),
            (json!({"rate": 1000001}), "synRateLimit.rate 1000001 "),
            (json!({"rate": 10, "burst": 0}), "synRateLimit.burst 0 "),
            (
                json!({"rate": 10, "burst": 2000000}),
                "synRateLimit.burst 2000000 ",
            ),
        ] {
            let err = check(&spec(json!({"synRateLimit": limit}))).unwrap_err();
            assert!(err.starts_with(field), "{err}");
            assert!(err.ends_with("is outside 1-1000000"), "{err}");
        }
    }

    #[test]
    fn a_health_check_is_refused_for_what_the_prober_refuses_naming_the_field() {
        for (hc, want) in [
            (
                json!({"type": "http", "path": "/has space"}),
                "healthCheck.path: http path \"/has space\" must start with '/'",
            ),
            (
                json!({"type": "http", "host": "bad host"}),
                "healthCheck.host: http host \"bad host\"",
            ),
            (json!({"type": "http", "host": ""}), "healthCheck.host: "),
            (
                json!({"type": "http", "expectStatus": {"from": 400, "to": 300}}),
                "healthCheck.expectStatus: ",
            ),
            (
                json!({"type": "http", "expectStatus": {"from": -1, "to": 300}}),
                "healthCheck.expectStatus.from -1 is not a status",
            ),
            (
                json!({"type": "tcp", "port": 70000}),
                "healthCheck.port 70000 is not a port number",
            ),
            (
                json!({"type": "tcp", "port": 0}),
                "healthCheck.port 0 is not a port number",
            ),
            (
                json!({"type": "tcp", "interval": "soon"}),
                "healthCheck.interval: ",
            ),
            (
                json!({"type": "tcp", "timeout": "0s"}),
                "healthCheck.timeout: timeout must be greater than zero",
            ),
            (
                json!({"type": "tcp", "interval": "0ms"}),
                "healthCheck.interval: interval must be greater than zero",
            ),
        ] {
            let err = check(&spec(json!({"healthCheck": hc.clone()}))).unwrap_err();
            assert!(err.starts_with(want), "{hc}: {err}");
        }
    }

    #[test]
    fn type_none_is_not_probed_so_its_fields_are_not_looked_at() {
        let s = spec(json!({"healthCheck": {"type": "none", "port": 0}}));
        assert_eq!(check(&s).unwrap().health_check, None);
    }

    #[test]
    fn the_probe_takes_the_backend_address_and_the_check_port_or_the_backend_port() {
        let hc: HealthCheck = serde_json::from_value(json!({
            "type": "http", "path": "/healthz", "host": "shop.example", "interval": "500ms",
            "timeout": "200ms", "rise": 1, "fall": 4, "expectStatus": {"from": 200, "to": 204}
        }))
        .unwrap();
        let p = probe_spec(&hc, "10.1.0.7:8080".parse().unwrap()).unwrap();
        assert_eq!(p.target, "10.1.0.7:8080".parse().unwrap());
        assert_eq!(
            p.kind,
            ProbeKind::Http {
                path: "/healthz".into(),
                expect: (200, 204),
                host: Some("shop.example".into())
            }
        );
        assert_eq!(
            (p.interval, p.timeout, p.rise, p.fall),
            (Duration::from_millis(500), Duration::from_millis(200), 1, 4)
        );
        let tcp: HealthCheck =
            serde_json::from_value(json!({"type": "tcp", "port": 9000})).unwrap();
        let p = probe_spec(&tcp, "[fd00::7]:8080".parse().unwrap()).unwrap();
        assert_eq!(
            (p.kind, p.target),
            (ProbeKind::Tcp, "[fd00::7]:9000".parse().unwrap())
        );
        assert_eq!((p.interval, p.timeout), check_defaults_pair());
    }

    fn check_defaults_pair() -> (Duration, Duration) {
        (check_defaults::INTERVAL, check_defaults::TIMEOUT)
    }
}
