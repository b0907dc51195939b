//! The verifier's budget: xdp_ingress must verify within the kernel's limit
//! of 1,000,000 processed instructions with room to spare, since every
//! feature added to the hot path spends some of it. The test prints the
//! figure (run with --nocapture) so a change can report what it cost.
//! `RIVORA_VERIFIER_OBJECT=PATH` measures another build of xdp_ingress.o
//! instead of the embedded one (e.g. the parent commit's, for a comparison).

mod common;

use aya::EbpfLoader;
use aya::programs::Xdp;

/// The kernel's BPF_COMPLEXITY_LIMIT_INSNS.
const KERNEL_LIMIT: u32 = 1_000_000;

/// Removes the test's pins even when the load panics.
struct Pins(std::path::PathBuf);

impl Drop for Pins {
    fn drop(&mut self) {
        let _ = rivora_dataplane::remove_pins(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Loads xdp_ingress from `bytes` with its maps pinned under `pins`:
/// (verifier-processed instructions, translated bytes, JITed bytes).
fn load(pins: &Pins, bytes: &[u8]) -> (Option<u32>, Option<u32>, u32) {
    std::fs::create_dir_all(&pins.0).unwrap();
    let mut ebpf = EbpfLoader::new()
        .default_map_pin_directory(&pins.0)
        .load(bytes)
        .expect("parse xdp_ingress.o");
    let prog: &mut Xdp = ebpf
        .program_mut("xdp_ingress")
        .expect("program xdp_ingress")
        .try_into()
        .unwrap();
    prog.load().expect("the verifier accepts xdp_ingress");
    let info = prog.info().unwrap();
    (
        info.verified_instruction_count(),
        info.size_translated(),
        info.size_jitted(),
    )
}

#[test]
fn xdp_ingress_verifies_within_the_budget() {
    let pins = Pins(common::pin_dir("verifier"));
    let bytes = match std::env::var_os("RIVORA_VERIFIER_OBJECT") {
        Some(path) => std::fs::read(&path).expect("read RIVORA_VERIFIER_OBJECT"),
        None => rivora_dataplane::objects::XDP_INGRESS.to_vec(),
    };
    let (verified, xlated, jited) = load(&pins, &bytes);
    let verified = verified.expect("the kernel reports verified_insns");
    eprintln!(
        "xdp_ingress: {verified} verifier-processed instructions ({:.1}% of {KERNEL_LIMIT}), {} BPF insns, {jited} bytes JITed",
        f64::from(verified) * 100.0 / f64::from(KERNEL_LIMIT),
        xlated.map(|x| x / 8).unwrap_or(0),
    );
    assert!(
        verified < KERNEL_LIMIT * 9 / 10,
        "xdp_ingress needs {verified} of the verifier's {KERNEL_LIMIT} instructions: less than 10% headroom"
    );
}
