//! The compiled BPF objects, built from bpf/ by build.rs and embedded so a
//! rivorad binary always carries the programs that match its map layouts.

/// bpf/xdp_ingress.c compiled.
pub static XDP_INGRESS: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/xdp_ingress.o"));
/// bpf/tc_nat.c compiled.
pub static TC_NAT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/tc_nat.o"));
/// bpf/decap.c compiled: the backends' decapsulation program (rivora-decap).
pub static DECAP: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/decap.o"));
