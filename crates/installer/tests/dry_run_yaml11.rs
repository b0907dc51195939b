//! What `rivora install --dry-run` prints is read back by a YAML 1.1 reader (PyYAML's
//! `safe_load_all`, as kubectl's go-yaml v2 reads YAML 1.1) as exactly the objects `rivora`
//! renders: strings such as `yes`, `on`, `n`, `12:30`, `~`, `true` or `017` stay strings, so
//! `kubectl apply -f` of the output applies what `rivora install` applies.
//!
//! Needs python3 with PyYAML (scripts/setup.sh installs python3-yaml); without them the test
//! fails, saying so.

use std::io::Write;
use std::process::{Command, Stdio};

use rivora_installer::chart::Chart;
use rivora_installer::lifecycle::{Target, render_for};
use rivora_installer::{ValueInputs, yaml};
use serde_json::Value;

/// The shapes a YAML 1.1 reader types as something other than a string when written plain.
const TRICKY: [&str; 16] = [
    "yes",
    "on",
    "off",
    "y",
    "n",
    "NO",
    "12:30",
    "~",
    "null",
    "true",
    "False",
    "017",
    "1.10",
    "0x1F",
    "2024-01-02",
    "=",
];

/// Parses a YAML stream with PyYAML (YAML 1.1), returning its documents as JSON.
fn pyyaml_load_all(text: &str) -> Vec<Value> {
    let script = "import sys, json, yaml\n\
                  docs = [d for d in yaml.safe_load_all(sys.stdin) if d is not None]\n\
                  json.dump(docs, sys.stdout, default=lambda o: {'__not_json__': repr(o)})\n";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("python3 is needed to read YAML as YAML 1.1 (scripts/setup.sh installs it): {e}")
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named 'yaml'"),
        "PyYAML is needed (scripts/setup.sh installs python3-yaml): {stderr}"
    );
    assert!(out.status.success(), "PyYAML refused the stream: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn set_args() -> Vec<String> {
    let mut sets = Vec::new();
    for (i, s) in TRICKY.iter().enumerate() {
        sets.push(format!(r"rivorad.nodeSelector.rivora\.dev/k{i}={s}"));
        // As a key too (`.` and `=` cannot be in a --set key).
        if !s.contains(['.', '=']) {
            sets.push(format!(r"controller.nodeSelector.{s}=v{i}"));
        }
    }
    sets
}

#[test]
fn dry_run_output_reads_back_under_yaml_1_1_as_rendered() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rivora"));
    cmd.args(["install", "--dry-run"]);
    // The documentation's own example, and every tricky shape as a value and as a key, through
    // --set-string (a string whatever it looks like).
    cmd.args(["--set", r"rivorad.nodeSelector.rivora\.dev/lb=yes"]);
    for s in set_args() {
        cmd.args(["--set-string", &s]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8(out.stdout).unwrap();
    let read = pyyaml_load_all(&printed);

    let inputs = ValueInputs {
        set: vec![r"rivorad.nodeSelector.rivora\.dev/lb=yes".into()],
        set_string: set_args(),
        ..Default::default()
    };
    let manifest = render_for(
        &Chart::embedded(),
        &inputs.user_values().unwrap(),
        &Target {
            release: "rivora".into(),
            namespace: "rivora-system".into(),
        },
        1,
    )
    .unwrap();
    let rendered: Vec<&Value> = manifest
        .crds
        .iter()
        .chain(&manifest.objects)
        .map(|d| &d.object)
        .collect();
    assert_eq!(read.len(), rendered.len(), "the same number of objects");
    for (theirs, ours) in read.iter().zip(rendered) {
        assert_eq!(
            theirs, ours,
            "PyYAML reads {} differently from what rivora renders",
            ours["metadata"]["name"]
        );
    }
    let ds = read
        .iter()
        .find(|d| d["kind"] == "DaemonSet")
        .expect("the DaemonSet");
    let selector = &ds["spec"]["template"]["spec"]["nodeSelector"];
    assert_eq!(selector["rivora.dev/lb"], "yes", "{selector}");
    for (i, s) in TRICKY.iter().enumerate() {
        assert_eq!(selector[format!("rivora.dev/k{i}")], *s, "{selector}");
    }
}

/// The same for the emitter alone, over every shape as a key, a value and a list item.
#[test]
fn the_emitter_round_trips_tricky_strings_through_pyyaml() {
    let mut map = serde_json::Map::new();
    for (i, s) in TRICKY.iter().enumerate() {
        map.insert(s.to_string(), Value::from(*s));
        map.insert(format!("k{i}"), Value::from(vec![*s, "plain"]));
    }
    let data = Value::Object(map);
    let text = yaml::to_string(&data);
    assert_eq!(pyyaml_load_all(&text), vec![data], "{text}");
}
