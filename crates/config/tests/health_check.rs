//! The `healthCheck` schema: defaults, inheritance from the VIP, per-backend
//! overrides, and the errors an operator gets.

use std::time::Duration;

use rivora_config::{CheckKind, HealthCheck, parse};

fn errors(text: &str) -> String {
    parse(text, "t.yaml")
        .expect_err("must be rejected")
        .to_string()
}

#[test]
fn vip_check_is_inherited_and_a_backend_can_override_or_disable_it() {
    let cfg = parse(
        r#"
vips:
  - name: web
    address: 10.0.0.1
    port: 80
    healthCheck: { type: http, path: /healthz, interval: 500ms, timeout: 200ms, rise: 1, fall: 2, expectStatus: 200-299 }
    backends:
      - { address: 10.1.0.1, port: 8080 }
      - { address: 10.1.0.2, port: 8080, healthCheck: { type: tcp, port: 9000 } }
      - { address: 10.1.0.3, port: 8080, healthCheck: { type: none } }
  - name: plain
    address: 10.0.0.1
    port: 81
    backends:
      - { address: 10.1.0.9 }
"#,
        "t.yaml",
    )
    .unwrap();
    let web = &cfg.vips[0];
    let http = HealthCheck {
        kind: CheckKind::Http {
            path: "/healthz".into(),
            expect: (200, 299),
            host: None,
        },
        interval: Duration::from_millis(500),
        timeout: Duration::from_millis(200),
        rise: 1,
        fall: 2,
        port: None,
    };
    assert_eq!(web.health_check, Some(http.clone()));
    assert_eq!(web.backends[0].health_check, Some(http));
    assert_eq!(
        web.backends[1].health_check,
        Some(HealthCheck {
            kind: CheckKind::Tcp,
            interval: Duration::from_secs(2),
            timeout: Duration::from_secs(1),
            rise: 2,
            fall: 3,
            port: Some(9000),
        }),
        "defaults: 2s, 1s, rise 2, fall 3"
    );
    assert_eq!(
        web.backends[2].health_check, None,
        "type: none disables checking"
    );
    assert_eq!(
        cfg.vips[1].backends[0].health_check, None,
        "no healthCheck: not probed"
    );
}

#[test]
fn bad_checks_name_the_field_and_the_reason() {
    let e = errors(
        r#"vips:
  - name: web
    address: 10.0.0.1
    port: 80
    healthCheck: { type: tcp, interval: 2, timeout: 5s, path: /x, rise: 0 }
    backends: [ { address: 10.1.0.1, healthCheck: { type: ping } } ]
"#,
    );
    assert!(
        e.contains("t.yaml:5:")
            && e.contains("vips[0].healthCheck.interval: \"2\" is not a duration"),
        "{e}"
    );
    assert!(
        e.contains("vips[0].healthCheck.path: `path` only applies to `type: http`"),
        "{e}"
    );
    assert!(
        e.contains("vips[0].healthCheck.rise: 0 is not a valid rise"),
        "{e}"
    );
    assert!(
        e.contains("t.yaml:6:")
            && e.contains("\"ping\" is not a valid check type; valid values: tcp, http, none"),
        "{e}"
    );

    let e = errors(
        "vips:\n  - name: web\n    address: 10.0.0.1\n    port: 80\n    healthCheck: { type: http, interval: 1s, timeout: 2s, expectStatus: 300-200 }\n",
    );
    assert!(
        e.contains("healthCheck.timeout: timeout 2s is longer than the interval 1s"),
        "{e}"
    );
    assert!(
        e.contains("healthCheck.expectStatus: \"300-200\" is not a status or status range"),
        "{e}"
    );

    let e = errors(
        "vips:\n  - name: web\n    address: 10.0.0.1\n    port: 80\n    healthCheck: { interval: 1s }\n",
    );
    assert!(
        e.contains("vips[0].healthCheck.type: missing required key `type`"),
        "{e}"
    );
}

#[test]
fn a_shared_backend_must_have_one_check() {
    let e = errors(
        r#"vips:
  - name: a
    address: 10.0.0.1
    port: 80
    healthCheck: { type: tcp }
    backends: [ { address: 10.1.0.1, port: 8080 } ]
  - name: b
    address: 10.0.0.1
    port: 81
    backends:
      - { address: 10.1.0.1, port: 8080 }
"#,
    );
    assert!(
        e.contains("t.yaml:11:") && e.contains("vips[1].backends[0].healthCheck: backend 10.1.0.1:8080 has a different health check than vips[0].backends[0]"),
        "{e}"
    );
    // The same check in both places is fine.
    parse(
        "vips:\n  - { name: a, address: 10.0.0.1, port: 80, healthCheck: { type: tcp }, backends: [ { address: 10.1.0.1, port: 8080 } ] }\n  - { name: b, address: 10.0.0.1, port: 81, backends: [ { address: 10.1.0.1, port: 8080, healthCheck: { type: tcp } } ] }\n",
        "t.yaml",
    )
    .unwrap();
}
