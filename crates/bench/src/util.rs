//! Locating binaries and describing how the bench was started.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// The command line as run, prefixed with how cargo started it.
pub fn command_line() -> String {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let exe = std::env::current_exe().unwrap_or_default();
    let via_cargo = std::env::var_os("CARGO").is_some();
    let profile = if exe.components().any(|c| c.as_os_str() == "release") {
        "--release "
    } else {
        ""
    };
    if via_cargo {
        let tail = if args.is_empty() {
            String::new()
        } else {
            format!(" -- {}", args.join(" "))
        };
        format!("cargo run {profile}-p rivora-bench{tail}")
    } else {
        std::iter::once("rivora-bench".to_string())
            .chain(args)
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The workspace root this binary was built from, if it is still there.
pub fn workspace_root() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    p.join("Cargo.toml")
        .exists()
        .then(|| p.canonicalize().unwrap_or(p))
}

/// The rivorad to benchmark: `explicit`, or the one next to this binary, rebuilt first.
pub fn rivorad_binary(explicit: Option<&Path>) -> Result<PathBuf> {
    workspace_binary("rivorad", "rivorad", explicit, "--rivorad")
}

/// The rivora-controller to benchmark: `explicit`, or the one next to this binary, rebuilt
/// first.
pub fn controller_binary(explicit: Option<&Path>) -> Result<PathBuf> {
    workspace_binary(
        "rivora-controller",
        "rivora-controller",
        explicit,
        "--controller",
    )
}

/// Binary `bin` of package `package`: `explicit` (given as `flag`), or the one next to this
/// binary, rebuilt first (`cargo build -p PACKAGE --bin BIN` with this binary's profile) when
/// the workspace is at hand, so the numbers are of the current tree.
fn workspace_binary(
    package: &str,
    bin: &str,
    explicit: Option<&Path>,
    flag: &str,
) -> Result<PathBuf> {
    if let Some(p) = explicit {
        if !p.exists() {
            bail!("{flag} {}: no such file", p.display());
        }
        return Ok(p.to_path_buf());
    }
    let exe = std::env::current_exe().context("current_exe")?;
    let dir = exe.parent().context("binary directory")?;
    let candidate = dir.join(bin);
    let release = dir.file_name().is_some_and(|n| n == "release");
    if let Some(root) = workspace_root() {
        eprintln!(
            "building {bin} ({}) so the benchmark runs the current tree...",
            if release { "release" } else { "debug" }
        );
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.current_dir(&root)
            .args(["build", "-p", package, "--bin", bin]);
        if release {
            cmd.arg("--release");
        }
        if let Ok(target) = std::env::var("CARGO_TARGET_DIR") {
            cmd.env("CARGO_TARGET_DIR", target);
        }
        match cmd.status() {
            Ok(s) if s.success() => {}
            Ok(s) if candidate.exists() => {
                eprintln!(
                    "warning: building {bin} failed ({s}); using the existing {}",
                    candidate.display()
                );
            }
            Ok(s) => bail!("building {bin} failed ({s})"),
            Err(e) if candidate.exists() => {
                eprintln!(
                    "warning: cannot run cargo ({e}); using the existing {}",
                    candidate.display()
                );
            }
            Err(e) => bail!("cannot run cargo to build {bin}: {e}"),
        }
    }
    if !candidate.exists() {
        bail!(
            "no {bin} next to {} (build it with `cargo build --release -p {package}`, or pass {flag})",
            exe.display()
        );
    }
    Ok(candidate)
}

/// Whether `prog` is on PATH.
pub fn have(prog: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {prog}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Installs Debian packages when `prog` is missing (apt-get).
pub fn ensure_tool(prog: &str, packages: &[&str]) -> Result<()> {
    if have(prog) {
        return Ok(());
    }
    eprintln!("{prog} missing: apt-get install -y {}", packages.join(" "));
    let st = Command::new("apt-get")
        .args(["install", "-y", "-q"])
        .args(packages)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status();
    if !matches!(st, Ok(s) if s.success()) {
        let _ = Command::new("apt-get")
            .args(["update", "-q"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status();
        let st = Command::new("apt-get")
            .args(["install", "-y", "-q"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()?;
        if !st.success() {
            bail!("apt-get install {} failed", packages.join(" "));
        }
    }
    if !have(prog) {
        bail!(
            "{prog} still missing after installing {}",
            packages.join(" ")
        );
    }
    Ok(())
}

/// A bpffs pin directory this process created: everything in it and the
/// directory itself are removed on drop (also when setup fails half-way).
pub struct PinDir(pub PathBuf);

impl Drop for PinDir {
    fn drop(&mut self) {
        remove_pin_dir(&self.0);
    }
}

/// Removes every pin in `dir` (our own directory) and the directory.
pub fn remove_pin_dir(dir: &Path) {
    let _ = rivora_dataplane::remove_pins(dir);
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// An error chain short enough for a table cell: verifier logs are
/// thousands of lines, their first and last lines say what happened.
pub fn short_error(e: &anyhow::Error) -> String {
    let full = format!("{e:#}");
    let lines: Vec<&str> = full
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let cut = |s: &str| -> String {
        if s.chars().count() > 300 {
            format!("{}...", s.chars().take(300).collect::<String>())
        } else {
            s.to_string()
        }
    };
    if lines.len() <= 4 {
        return lines.iter().map(|l| cut(l)).collect::<Vec<_>>().join(" / ");
    }
    let mut out = vec![cut(lines[0]), "[...]".to_string()];
    out.extend(lines[lines.len() - 3..].iter().map(|l| cut(l)));
    out.join(" / ")
}
