//! `rivora install --dry-run` renders the same objects as real `helm template --include-crds` of
//! the same chart, for every values file under tests/values (helm v3 built from its Go module by
//! scripts/build-testdeps.sh), and `helm lint --strict` passes with each of them.
//!
//! Objects are compared as parsed data keyed by apiVersion, kind, namespace and name (the YAML
//! layout of `toYaml` may differ; the objects may not).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rivora_installer::render::split_documents;
use rivora_kube_testbed::assets::Assets;
use serde_json::Value;

fn chart_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/chart")
        .canonicalize()
        .unwrap()
}

fn values_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/values");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "at least 5 values files in {}",
        dir.display()
    );
    files
}

fn helm() -> PathBuf {
    Assets::locate()
        .and_then(|a| a.helm().map(Path::to_path_buf))
        .unwrap_or_else(|e| panic!("{e:#}"))
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The objects of a YAML stream, keyed by `apiVersion kind namespace/name`.
fn objects(text: &str) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for d in split_documents("stream", text).unwrap() {
        let key = format!("{} {}", d.api_version(), d.describe());
        assert!(out.insert(key.clone(), d.object).is_none(), "{key} twice");
    }
    out
}

#[test]
fn dry_run_renders_what_helm_template_renders() {
    let helm = helm();
    let chart = chart_dir();
    for file in values_files() {
        let namespace = "lb-system";
        let ours = run(Command::new(env!("CARGO_BIN_EXE_rivora"))
            .args([
                "install",
                "--dry-run",
                "--release",
                "edge",
                "-n",
                namespace,
                "-f",
            ])
            .arg(&file));
        let theirs = run(Command::new(&helm)
            .args(["template", "edge"])
            .arg(&chart)
            .args(["--include-crds", "-n", namespace, "-f"])
            .arg(&file));
        let (ours, theirs) = (objects(&ours), objects(&theirs));
        assert!(
            theirs.len() >= 16,
            "{}: helm rendered {} objects",
            file.display(),
            theirs.len()
        );
        assert_eq!(
            ours.keys().collect::<Vec<_>>(),
            theirs.keys().collect::<Vec<_>>(),
            "{}: the same objects",
            file.display()
        );
        for (key, theirs) in &theirs {
            assert_eq!(&ours[key], theirs, "{}: {key} differs", file.display());
        }
        eprintln!("{}: {} objects identical", file.display(), theirs.len());
    }
}

/// `--set` is typed and applied as helm applies it.
#[test]
fn set_flags_render_what_helm_renders() {
    let helm = helm();
    let sets = [
        "rivorad.announce=l2,rivorad.l2.retryPeriod=500ms",
        "controller.replicas=3",
        "rivorad.extraArgs={--a=1,--b}",
        r"rivorad.nodeSelector.rivora\.dev/lb=edge",
        // YAML 1.1 shapes: helm's --set types only true/false/null (any case) and integers; the
        // rest stays a string, which the printed YAML must keep a string (objects() reads it as
        // kubectl does, YAML 1.1).
        r"rivorad.nodeSelector.rivora\.dev/yes=yes,rivorad.nodeSelector.on=off",
        "rivorad.nodeSelector.window=12:30,rivorad.nodeSelector.n=NO,rivorad.nodeSelector.v=1.10",
        "defaultClass=TRUE,controller.replicas=+3,controller.metricsPort=+9091",
    ];
    let mut ours = Command::new(env!("CARGO_BIN_EXE_rivora"));
    ours.args(["install", "--dry-run"]);
    let mut theirs = Command::new(&helm);
    theirs.args(["template", "rivora"]).arg(chart_dir()).args([
        "--include-crds",
        "-n",
        "rivora-system",
    ]);
    for s in sets {
        ours.args(["--set", s]);
        theirs.args(["--set", s]);
    }
    for s in [
        "image.tag=1.10",
        "controller.nodeSelector.tilde=~,controller.nodeSelector.t=true",
    ] {
        ours.args(["--set-string", s]);
        theirs.args(["--set-string", s]);
    }
    assert_eq!(objects(&run(&mut ours)), objects(&run(&mut theirs)));
}

#[test]
fn helm_lint_passes_with_every_values_file() {
    let helm = helm();
    for file in values_files() {
        let out = run(Command::new(&helm)
            .args(["lint", "--strict"])
            .arg(chart_dir())
            .arg("-f")
            .arg(&file));
        assert!(
            out.contains("0 chart(s) failed"),
            "{}: {out}",
            file.display()
        );
    }
}

/// `--set defaultClass=yes` is a string to helm (its --set is not YAML): refused by both, ours
/// naming the field and saying how to write a boolean.
#[test]
fn a_yes_given_to_set_is_a_string_to_both() {
    let helm = helm();
    let out = Command::new(env!("CARGO_BIN_EXE_rivora"))
        .args(["install", "--dry-run", "--set", "defaultClass=yes"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let ours = String::from_utf8_lossy(&out.stderr);
    assert!(
        ours.contains(r#"defaultClass: must be boolean (got a string) "yes": write true or false"#),
        "{ours}"
    );
    let out = Command::new(&helm)
        .args(["template", "rivora"])
        .arg(chart_dir())
        .args(["--set", "defaultClass=yes"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "helm refuses it too");
    let theirs = String::from_utf8_lossy(&out.stderr);
    assert!(theirs.contains("defaultClass"), "{theirs}");
}

/// Values the schema refuses are refused by both, naming the field.
#[test]
fn bad_values_are_refused_by_both_naming_the_field() {
    let helm = helm();
    let out = Command::new(env!("CARGO_BIN_EXE_rivora"))
        .args(["install", "--dry-run", "--set", "rivorad.announce=bpg"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let ours = String::from_utf8_lossy(&out.stderr);
    assert!(ours.contains("rivorad.announce: must be one of"), "{ours}");
    let out = Command::new(&helm)
        .args(["template", "rivora"])
        .arg(chart_dir())
        .args(["--set", "rivorad.announce=bpg"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "helm refuses it too");
    let theirs = String::from_utf8_lossy(&out.stderr);
    assert!(theirs.contains("/rivorad/announce"), "{theirs}");
}
