//! The verifier's budget: every program of the datapath's objects
//! (xdp_ingress, each of its tail-call stages, tc_nat, decap) must verify
//! well below the kernel's limit of 1,000,000 processed instructions, since
//! every feature added to a program spends some of it and the figures are
//! fragile (one change of clang's code layout moved xdp_ingress by 60k:
//! docs/design/verifier-headroom.md). The budget is per program, 250,000:
//! four times the kernel's limit in headroom. The test prints every figure
//! (run with --nocapture) so a change can report what it cost.
//! `RIVORA_VERIFIER_OBJECT=PATH` measures another build of xdp_ingress.o
//! instead of the embedded one (e.g. the parent commit's, for a comparison).

mod common;

use aya::EbpfLoader;
use aya::programs::{Program, SchedClassifier, Xdp};

/// The kernel's BPF_COMPLEXITY_LIMIT_INSNS.
const KERNEL_LIMIT: u32 = 1_000_000;
/// What each program may use.
const BUDGET: u32 = 250_000;

/// Removes the test's pins even when the load panics.
struct Pins(std::path::PathBuf);

impl Drop for Pins {
    fn drop(&mut self) {
        let _ = rivora_dataplane::remove_pins(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One program's figures.
struct Verified {
    object: &'static str,
    program: String,
    processed: u32,
    insns: u32,
    jited: u32,
}

/// Loads every XDP and tc program of `bytes` with the object's maps
/// pinned under `pins`.
fn load_all(pins: &Pins, object: &'static str, bytes: &[u8]) -> Vec<Verified> {
    std::fs::create_dir_all(&pins.0).unwrap();
    let mut ebpf = EbpfLoader::new()
        .default_map_pin_directory(&pins.0)
        .load(bytes)
        .unwrap_or_else(|e| panic!("parse {object}: {e}"));
    let names: Vec<String> = ebpf.programs().map(|(n, _)| n.to_string()).collect();
    let mut out = Vec::new();
    for name in names {
        let info = match ebpf.program_mut(&name) {
            Some(Program::Xdp(_)) => {
                let prog: &mut Xdp = ebpf.program_mut(&name).unwrap().try_into().unwrap();
                prog.load()
                    .unwrap_or_else(|e| panic!("the verifier refuses {object}/{name}: {e:?}"));
                prog.info().unwrap()
            }
            Some(Program::SchedClassifier(_)) => {
                let prog: &mut SchedClassifier =
                    ebpf.program_mut(&name).unwrap().try_into().unwrap();
                prog.load()
                    .unwrap_or_else(|e| panic!("the verifier refuses {object}/{name}: {e:?}"));
                prog.info().unwrap()
            }
            other => panic!(
                "{object}/{name}: a program type this test does not load: {:?}",
                other.map(|p| p.prog_type())
            ),
        };
        out.push(Verified {
            object,
            program: name,
            processed: info
                .verified_instruction_count()
                .expect("the kernel reports verified_insns"),
            insns: info.size_translated().unwrap_or(0) / 8,
            jited: info.size_jitted(),
        });
    }
    out
}

#[test]
fn every_program_verifies_within_the_budget() {
    let other = std::env::var_os("RIVORA_VERIFIER_OBJECT");
    let xdp = match &other {
        Some(path) => std::fs::read(path).expect("read RIVORA_VERIFIER_OBJECT"),
        None => rivora_dataplane::objects::XDP_INGRESS.to_vec(),
    };
    let objects: [(&'static str, &[u8]); 3] = [
        ("xdp_ingress.o", &xdp),
        ("tc_nat.o", rivora_dataplane::objects::TC_NAT),
        ("decap.o", rivora_dataplane::objects::DECAP),
    ];
    let mut all = Vec::new();
    for (object, bytes) in objects {
        let pins = Pins(common::pin_dir("verifier"));
        all.extend(load_all(&pins, object, bytes));
    }
    for v in &all {
        eprintln!(
            "{}/{}: {} verifier-processed instructions ({:.1}% of {KERNEL_LIMIT}), {} BPF insns, {} bytes JITed",
            v.object,
            v.program,
            v.processed,
            f64::from(v.processed) * 100.0 / f64::from(KERNEL_LIMIT),
            v.insns,
            v.jited,
        );
    }
    let have = |object: &str, program: &str| {
        all.iter()
            .any(|v| v.object == object && v.program == program)
    };
    assert!(have("xdp_ingress.o", "xdp_ingress"));
    // Another build (an older commit's) may have no stages.
    for (_, stage) in rivora_dataplane::stages::STAGES
        .iter()
        .filter(|_| other.is_none())
    {
        assert!(
            have("xdp_ingress.o", stage),
            "xdp_ingress.o has no stage program {stage}"
        );
    }
    assert!(have("tc_nat.o", "tc_nat"));
    assert!(all.iter().any(|v| v.object == "decap.o"));
    let over: Vec<String> = all
        .iter()
        .filter(|v| v.processed >= BUDGET)
        .map(|v| format!("{}/{}: {}", v.object, v.program, v.processed))
        .collect();
    assert!(
        over.is_empty(),
        "programs at or over the budget of {BUDGET} verifier-processed instructions: {over:?}"
    );
}
