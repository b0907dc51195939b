//! The rig every family of part 1 runs on: loads the real programs and the
//! bench harness over one set of pinned maps, programs the base VIPs,
//! stores frames and fills the harness's program slot, reads the counters
//! that prove paths, and runs the interleaved sink / floor / program timing
//! loop. Separate because every family measures through it and none loads
//! or times a program any other way.

use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail, ensure};
use aya::maps::{Array, MapData, PerCpuArray, ProgramArray};
use aya::programs::{ProgramFd, SchedClassifier, TestRun, TestRunOptions, TestRunResult, Xdp};
use aya::{Ebpf, EbpfLoader};
use rivora_abi as abi;
use rivora_dataplane::{
    BackendSpec, Datapath, Dataplane, LoadOptions, Mode, VipKey, VipSpec, objects, proto,
};
#[cfg(doc)]
use rivora_lab::fib::{BACKEND_HOP_MAC, CLIENT_HOP_MAC, NODE4, NODE6};

use crate::frames::{self, Frame};
use crate::stats::{median, quantile};

static BENCH_XDP: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/bench_xdp.o"));
static BENCH_TC: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/bench_tc.o"));

pub(super) const XDP_DROP: u32 = 1;
pub(super) const XDP_PASS: u32 = 2;
pub(super) const XDP_TX: u32 = 3;
pub(super) const XDP_REDIRECT: u32 = 4;
pub(super) const TCX_NEXT: u32 = u32::MAX; // -1 as the kernel reports it

const FRAME_MAX: usize = 256;
const PATCH_SPAN: usize = 128;
const F_VARY: u32 = 1;
const F_UDP: u32 = 2;
const BC_ITERATIONS: u32 = 0;
const BC_TAILCALL_MISS: u32 = 1;
const BC_RESTORE_FAIL: u32 = 2;

/// Probe programs of bench_xdp.c, in the order `probe_rows` uses them.
pub(super) const PROBES: [&str; 6] = [
    "bench_probe_parse",
    "bench_probe_hash_lookup",
    "bench_probe_lru_lookup",
    "bench_probe_hash_insert",
    "bench_probe_lru_insert",
    "bench_probe_lru_pcpu_insert",
];

pub(super) const VIP4: &str = "10.200.100.1";
pub(super) const VIP6: &str = "fd00:200:100::1";
pub(super) const CLIENT4: &str = "10.200.0.2";
pub(super) const CLIENT6: &str = "fd00:200::2";
pub(super) const BACKENDS4: [&str; 3] = ["10.200.1.11", "10.200.1.12", "10.200.1.13"];
pub(super) const BACKENDS6: [&str; 3] = ["fd00:200:1::11", "fd00:200:1::12", "fd00:200:1::13"];

/// `struct bench_frame` of bpf/bench/bench_common.h.
#[repr(C)]
#[derive(Clone, Copy)]
struct BenchFrame {
    len: u32,
    flags: u32,
    vary_off: u32,
    ip_csum_off: u32,
    l4_csum_off: u32,
    vary_mod: u32,
    seq: u64,
    data: [u8; FRAME_MAX],
}
// SAFETY: plain old data, no padding (6 u32, a u64 at offset 24, bytes),
// the layout of C's struct bench_frame.
unsafe impl aya::Pod for BenchFrame {}

/// `struct bench_floor_key`.
#[repr(C)]
#[derive(Clone, Copy)]
struct FloorKey {
    src: [u8; 16],
    dst: [u8; 16],
    sport: u16,
    dport: u16,
    proto: u8,
    pad: [u8; 3],
}
// SAFETY: plain old data without implicit padding.
unsafe impl aya::Pod for FloorKey {}

/// How many runs and iterations.
#[derive(Clone, Copy, Debug)]
pub struct Opts {
    /// Runs per case (the median is reported).
    pub runs: usize,
    /// Iterations per run for stateless paths.
    pub repeat: u32,
    /// Iterations per run for the new-flow cases (each one inserts a flow).
    pub repeat_new: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Hook {
    Xdp,
    Tc,
}

impl Hook {
    fn names(self) -> HookNames {
        match self {
            Hook::Xdp => HookNames {
                harness: "bench_harness",
                progs: "bench_progs",
                frame: "bench_frame",
                counters: "bench_counters",
                floor_map: "bench_floor_map",
            },
            Hook::Tc => HookNames {
                harness: "bench_tc_harness",
                progs: "bench_tc_progs",
                frame: "bench_tc_frame",
                counters: "bench_tc_counters",
                floor_map: "bench_tc_floor_map",
            },
        }
    }
}

struct HookNames {
    harness: &'static str,
    progs: &'static str,
    frame: &'static str,
    counters: &'static str,
    floor_map: &'static str,
}

/// Counters that prove paths.
#[derive(Clone, Debug, Default)]
pub(super) struct Snapshot {
    pub(super) vips: Vec<(String, abi::VipStats)>,
    pub(super) drops: Vec<u64>,
    /// `snat_stats_map`, by `abi::snat_counter` index.
    pub(super) snat: Vec<u64>,
    pub(super) iterations: u64,
    pub(super) tailcall_miss: u64,
    pub(super) restore_fail: u64,
    /// The classifier's counters (summed over CPUs): per programmed VIP,
    /// rule (by name) and group (by name), and `cls_event_map`.
    pub(super) cls_vips: Vec<(IpAddr, abi::ClsStats)>,
    pub(super) cls_rules: Vec<(String, abi::ClsStats)>,
    pub(super) cls_groups: Vec<(String, abi::ClsStats)>,
    pub(super) cls_events: Vec<u64>,
}

/// One timed comparison: program under test vs the harness alone.
pub(super) struct Timed {
    /// Median over runs of (harness + program) - (harness + sink), ns.
    pub(super) net_ns: f64,
    /// Median of the harness + sink runs alone, ns.
    pub(super) harness_ns: f64,
    /// Interquartile range of the per-run differences, ns.
    pub(super) iqr: (f64, f64),
    /// Last verdict of the program under test.
    pub(super) retval: u32,
    /// The frame the last iteration left.
    pub(super) out: Vec<u8>,
    /// Counter deltas over the measured runs.
    pub(super) before: Snapshot,
    pub(super) after: Snapshot,
    /// Iterations of the program under test.
    pub(super) iterations: u64,
    /// Iterations the harness ran in all (the program under test, the sink
    /// and, when measured together, the floor), for the proof.
    pub(super) harness_iterations: u64,
    /// Median over runs of this program's cost divided by the floor's,
    /// when the floor was measured in the same runs (interleaved).
    pub(super) ratio_to_floor: Option<f64>,
}

/// Everything loaded for part 1. Drop removes the pins.
pub(super) struct Rig {
    _pins: crate::util::PinDir,
    pub(super) datapath: Datapath,
    pub(super) dp: Dataplane,
    pub(super) desired: Vec<VipSpec>,
    pub(super) bench_xdp: Ebpf,
    bench_tc: Ebpf,
    pub(super) _real_xdp: Ebpf,
    _real_tc: Ebpf,
    fd_real_xdp: ProgramFd,
    fd_real_tc: ProgramFd,
    fd_sink_xdp: ProgramFd,
    fd_floor_xdp: ProgramFd,
    fd_sink_tc: ProgramFd,
    fd_floor_tc: ProgramFd,
    pub(super) sizes: Vec<(String, Option<u32>, Option<u32>, u32)>,
    probes: Vec<(&'static str, ProgramFd)>,
    pub(super) opts: Opts,
    /// Ingress interface handed to test_run (`xdp_md.ingress_ifindex`), so
    /// that bpf_fib_lookup has an interface and a namespace to route from;
    /// the calling thread must then be in that interface's namespace.
    pub(super) ingress_ifindex: Option<u32>,
}

pub(super) fn backends(addrs: &[&str], port: u16) -> Vec<BackendSpec> {
    addrs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mut b = BackendSpec::new(a.parse().unwrap(), port);
            b.mac = [0x02, 0, 0, 0, 0x0b, i as u8 + 1];
            b
        })
        .collect()
}

pub(super) fn vip(
    name: &str,
    addr: &str,
    port: u16,
    proto: u8,
    mode: Mode,
    b: Vec<BackendSpec>,
) -> VipSpec {
    let mut v = VipSpec::new(name, VipKey::exact(addr.parse().unwrap(), port, proto), b);
    v.mode = mode;
    v
}

fn load_prog<T>(ebpf: &mut Ebpf, name: &str) -> Result<ProgramFd>
where
    for<'a> &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
    T: LoadFd,
{
    let p: &mut T = ebpf
        .program_mut(name)
        .with_context(|| format!("no program {name}"))?
        .try_into()?;
    p.load_it().with_context(|| format!("loading {name}"))?;
    p.fd_clone()
}

/// Loading and fd access for the two program types used here.
trait LoadFd {
    fn load_it(&mut self) -> Result<(), aya::programs::ProgramError>;
    fn fd_clone(&self) -> Result<ProgramFd>;
    fn sizes(&self) -> Option<(Option<u32>, Option<u32>, u32)>;
}

impl LoadFd for Xdp {
    fn load_it(&mut self) -> Result<(), aya::programs::ProgramError> {
        self.load()
    }
    fn fd_clone(&self) -> Result<ProgramFd> {
        Ok(self.fd()?.try_clone()?)
    }
    fn sizes(&self) -> Option<(Option<u32>, Option<u32>, u32)> {
        self.info().ok().map(|i| {
            (
                i.verified_instruction_count(),
                i.size_translated(),
                i.size_jitted(),
            )
        })
    }
}

impl LoadFd for SchedClassifier {
    fn load_it(&mut self) -> Result<(), aya::programs::ProgramError> {
        self.load()
    }
    fn fd_clone(&self) -> Result<ProgramFd> {
        Ok(self.fd()?.try_clone()?)
    }
    fn sizes(&self) -> Option<(Option<u32>, Option<u32>, u32)> {
        self.info().ok().map(|i| {
            (
                i.verified_instruction_count(),
                i.size_translated(),
                i.size_jitted(),
            )
        })
    }
}

fn prog_sizes<T>(ebpf: &mut Ebpf, name: &str) -> Option<(String, Option<u32>, Option<u32>, u32)>
where
    for<'a> &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
    T: LoadFd,
{
    let p: &mut T = ebpf.program_mut(name)?.try_into().ok()?;
    p.sizes().map(|(v, x, j)| (name.to_string(), v, x, j))
}

pub(super) fn run_prog<P>(
    p: &P,
    frame: &[u8],
    repeat: u32,
    ingress_ifindex: Option<u32>,
) -> Result<(u32, f64, Vec<u8>)>
where
    P: for<'o> TestRun<Opts<'o> = TestRunOptions<'o>, Result = TestRunResult>,
{
    let mut out = vec![0u8; FRAME_MAX + 512];
    // struct xdp_md: data, data_end, data_meta, ingress_ifindex, ... (the
    // kernel wants data_end = the frame's length).
    let mut ctx = [0u8; 24];
    ctx[4..8].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
    if let Some(i) = ingress_ifindex {
        ctx[12..16].copy_from_slice(&i.to_ne_bytes());
    }
    let res = {
        let opts = TestRunOptions {
            data_in: Some(frame),
            data_out: Some(&mut out),
            ctx_in: ingress_ifindex.map(|_| &ctx[..]),
            repeat,
            ..TestRunOptions::new()
        };
        p.test_run(opts).context("BPF_PROG_TEST_RUN")?
    };
    out.truncate(res.data_size_out as usize);
    // The kernel reports the mean time per iteration in ns.
    Ok((res.return_value, res.duration.as_nanos() as f64, out))
}

impl Rig {
    pub(super) fn new(opts: Opts) -> Result<Rig> {
        rivora_dataplane::ensure_bpffs(std::path::Path::new("/sys/fs/bpf"))
            .map_err(|e| anyhow!("bpffs: {e}"))?;
        let pin_dir = PathBuf::from(format!("/sys/fs/bpf/rivora-bench-{}", std::process::id()));
        crate::util::remove_pin_dir(&pin_dir);
        let pins = crate::util::PinDir(pin_dir.clone());
        let (datapath, maps, _) = Datapath::load(&LoadOptions {
            pin_dir: pin_dir.clone(),
            maglev_table_size: abi::MAGLEV_TABLE_DEFAULT,
            flow_table_size: rivora_abi::MAX_FLOWS,
            reset_incompatible: false,
            object_dir: None,
        })
        .map_err(|e| anyhow!("loading the datapath: {e}"))?;
        let dp = Dataplane::new(maps);

        // The real programs a second time, over the same pinned maps, so
        // their fds can go into the harness's program arrays.
        let load_real = |bytes: &[u8]| {
            EbpfLoader::new()
                .default_map_pin_directory(&pin_dir)
                .map_max_entries("maglev_table", abi::MAGLEV_TABLE_DEFAULT)
                .load(bytes)
        };
        // RIVORA_BENCH_XDP_OBJECT: another build of xdp_ingress.o over
        // the same rig and maps (an interleaved A/B against another
        // commit's program; its map layouts must be this build's).
        let xdp_bytes = match std::env::var_os("RIVORA_BENCH_XDP_OBJECT") {
            Some(p) => std::fs::read(&p)
                .with_context(|| format!("read RIVORA_BENCH_XDP_OBJECT {}", p.display()))?,
            None => objects::XDP_INGRESS.to_vec(),
        };
        let mut real_xdp = load_real(&xdp_bytes).context("xdp_ingress object")?;
        let mut real_tc = load_real(objects::TC_NAT).context("tc_nat object")?;
        let fd_real_xdp = load_prog::<Xdp>(&mut real_xdp, "xdp_ingress")?;
        // Its tail-call stages, in its own stage array, before it runs.
        rivora_dataplane::stages::fill(&mut real_xdp)
            .map_err(|e| anyhow!("xdp_ingress stages: {e}"))?;
        let fd_real_tc = load_prog::<SchedClassifier>(&mut real_tc, "tc_nat")?;

        let mut bench_xdp = EbpfLoader::new()
            .load(BENCH_XDP)
            .context("bench_xdp object")?;
        let mut bench_tc = EbpfLoader::new()
            .load(BENCH_TC)
            .context("bench_tc object")?;
        load_prog::<Xdp>(&mut bench_xdp, "bench_harness")?;
        let fd_sink_xdp = load_prog::<Xdp>(&mut bench_xdp, "bench_sink")?;
        let fd_floor_xdp = load_prog::<Xdp>(&mut bench_xdp, "bench_floor")?;
        load_prog::<SchedClassifier>(&mut bench_tc, "bench_tc_harness")?;
        let fd_sink_tc = load_prog::<SchedClassifier>(&mut bench_tc, "bench_tc_sink")?;
        let fd_floor_tc = load_prog::<SchedClassifier>(&mut bench_tc, "bench_tc_floor")?;
        let mut probes = Vec::new();
        for name in PROBES {
            probes.push((name, load_prog::<Xdp>(&mut bench_xdp, name)?));
        }

        let mut sizes = Vec::new();
        sizes.extend(prog_sizes::<Xdp>(&mut real_xdp, "xdp_ingress"));
        for (_, stage) in rivora_dataplane::stages::STAGES {
            sizes.extend(prog_sizes::<Xdp>(&mut real_xdp, stage));
        }
        sizes.extend(prog_sizes::<SchedClassifier>(&mut real_tc, "tc_nat"));
        sizes.extend(prog_sizes::<Xdp>(&mut bench_xdp, "bench_floor"));
        sizes.extend(prog_sizes::<SchedClassifier>(
            &mut bench_tc,
            "bench_tc_floor",
        ));
        sizes.extend(prog_sizes::<Xdp>(&mut bench_xdp, "bench_harness"));

        let mut rig = Rig {
            _pins: pins,
            datapath,
            dp,
            desired: Vec::new(),
            bench_xdp,
            bench_tc,
            _real_xdp: real_xdp,
            _real_tc: real_tc,
            fd_real_xdp,
            fd_real_tc,
            fd_sink_xdp,
            fd_floor_xdp,
            fd_sink_tc,
            fd_floor_tc,
            sizes,
            probes,
            opts,
            ingress_ifindex: None,
        };
        rig.desired = vec![
            vip(
                "tcp4",
                VIP4,
                80,
                proto::TCP,
                Mode::Nat,
                backends(&BACKENDS4, 8080),
            ),
            vip(
                "udp4",
                VIP4,
                53,
                proto::UDP,
                Mode::Nat,
                backends(&BACKENDS4, 5353),
            ),
            vip(
                "tcp6",
                VIP6,
                80,
                proto::TCP,
                Mode::Nat,
                backends(&BACKENDS6, 8080),
            ),
            // A Kubernetes VIP's shape: its endpoints are never exclusive,
            // so every flow has a per-flow reverse entry (VipSpec
            // stateless_reverse, endpoints.rs). Own backend port: its
            // endpoints are its own, not shared with tcp4's.
            {
                let mut v = vip(
                    "tcp4sf",
                    VIP4,
                    81,
                    proto::TCP,
                    Mode::Nat,
                    backends(&BACKENDS4, 8081),
                );
                v.stateless_reverse = false;
                v
            },
        ];
        rig.dp
            .apply(&rig.desired)
            .map_err(|e| anyhow!("programming the VIPs: {e}"))?;
        Ok(rig)
    }

    fn ebpf(&mut self, hook: Hook) -> &mut Ebpf {
        match hook {
            Hook::Xdp => &mut self.bench_xdp,
            Hook::Tc => &mut self.bench_tc,
        }
    }

    pub(super) fn set_slot(&mut self, hook: Hook, which: Slot) -> Result<()> {
        let fd = match (hook, which) {
            (Hook::Xdp, Slot::Real) => self.fd_real_xdp.try_clone()?,
            (Hook::Xdp, Slot::Floor) => self.fd_floor_xdp.try_clone()?,
            (Hook::Xdp, Slot::Sink) => self.fd_sink_xdp.try_clone()?,
            (Hook::Tc, Slot::Real) => self.fd_real_tc.try_clone()?,
            (Hook::Tc, Slot::Floor) => self.fd_floor_tc.try_clone()?,
            (Hook::Tc, Slot::Sink) => self.fd_sink_tc.try_clone()?,
            (Hook::Xdp, Slot::Probe(i)) => self.probes[i].1.try_clone()?,
            (Hook::Tc, Slot::Probe(_)) => bail!("probes are XDP programs"),
        };
        let names = hook.names();
        let mut pa: ProgramArray<&mut MapData> = self
            .ebpf(hook)
            .map_mut(names.progs)
            .context("program array")?
            .try_into()?;
        pa.set(0, &fd, 0)?;
        Ok(())
    }

    pub(super) fn set_frame(&mut self, hook: Hook, f: &Frame, vary: Vary) -> Result<()> {
        ensure!(f.bytes.len() <= FRAME_MAX, "frame too long");
        ensure!(
            f.vary_off + 4 <= PATCH_SPAN && f.l4_csum_off + 2 <= PATCH_SPAN,
            "patched fields must sit in the first {PATCH_SPAN} bytes"
        );
        let mut data = [0u8; FRAME_MAX];
        data[..f.bytes.len()].copy_from_slice(&f.bytes);
        let mut flags = 0;
        let vary_mod = match vary {
            Vary::No => 0,
            Vary::New => {
                flags |= F_VARY;
                0
            }
            Vary::Cycle(n) => {
                flags |= F_VARY;
                n
            }
        };
        if f.udp {
            flags |= F_UDP;
        }
        let v = BenchFrame {
            len: f.bytes.len() as u32,
            flags,
            vary_off: f.vary_off as u32,
            ip_csum_off: f.ip_csum_off.unwrap_or(0) as u32,
            l4_csum_off: f.l4_csum_off as u32,
            vary_mod,
            seq: 0,
            data,
        };
        self.frame_map(hook)?.set(0, v, 0)?;
        Ok(())
    }

    /// The harness's stored frame (one entry).
    fn frame_map(&mut self, hook: Hook) -> Result<Array<&mut MapData, BenchFrame>> {
        let names = hook.names();
        Ok(self
            .ebpf(hook)
            .map_mut(names.frame)
            .context("frame map")?
            .try_into()?)
    }

    /// Puts the flow of `f` into the floor's hash map, so its lookup hits;
    /// with `count` > 1 also the flows the harness makes of it by adding
    /// 1..count to the (low 32 bits of the) source address.
    pub(super) fn floor_key(&mut self, hook: Hook, f: &Frame, count: u32) -> Result<()> {
        let p = frames::parse_checked(&f.bytes)?;
        let mut k = FloorKey {
            src: [0; 16],
            dst: [0; 16],
            sport: p.sport.to_be(),
            dport: p.dport.to_be(),
            proto: if f.udp { 17 } else { 6 },
            pad: [0; 3],
        };
        let low = match (p.src, p.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                k.src[..4].copy_from_slice(&s.octets());
                k.dst[..4].copy_from_slice(&d.octets());
                0..4
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                k.src = s.octets();
                k.dst = d.octets();
                12..16
            }
            _ => bail!("mixed families"),
        };
        let base = u32::from_be_bytes(k.src[low.clone()].try_into().unwrap());
        let names = hook.names();
        let mut m: aya::maps::HashMap<&mut MapData, FloorKey, u32> = self
            .ebpf(hook)
            .map_mut(names.floor_map)
            .context("floor map")?
            .try_into()?;
        for i in 0..count.max(1) {
            k.src[low.clone()].copy_from_slice(&base.wrapping_add(i).to_be_bytes());
            m.insert(k, 1, 0)?;
        }
        Ok(())
    }

    pub(super) fn snapshot(&mut self, hook: Hook) -> Result<Snapshot> {
        let vips = self
            .dp
            .vip_counters()
            .map_err(|e| anyhow!("{e}"))?
            .into_iter()
            .map(|c| (c.name, c.stats))
            .collect();
        let drops = self.dp.drop_counters().map_err(|e| anyhow!("{e}"))?;
        let snat = self
            .dp
            .snat_counters()
            .map_err(|e| anyhow!("{e}"))?
            .to_vec();
        let names = hook.names();
        let arr: PerCpuArray<&MapData, u64> = self
            .ebpf(hook)
            .map(names.counters)
            .context("counters")?
            .try_into()?;
        let get = |i: u32| -> Result<u64> { Ok(arr.get(&i, 0)?.iter().sum()) };
        let (iterations, tailcall_miss, restore_fail) = (
            get(BC_ITERATIONS)?,
            get(BC_TAILCALL_MISS)?,
            get(BC_RESTORE_FAIL)?,
        );
        let cls = self.dp.classifier();
        let m = &self.dp.maps().cls;
        let mut cls_vips = Vec::new();
        for (addr, id, _) in cls.vips() {
            cls_vips.push((addr, cls_stats(&m.vip_stats, id)?));
        }
        let mut cls_rules = Vec::new();
        for (name, id, _) in cls.rules() {
            cls_rules.push((name.to_string(), cls_stats(&m.rule_stats, id)?));
        }
        let mut cls_groups = Vec::new();
        for (name, id, _, _) in cls.groups() {
            cls_groups.push((name.to_string(), cls_stats(&m.group_stats, id)?));
        }
        let mut cls_events = Vec::new();
        for i in 0..abi::cls_event::COUNT {
            cls_events.push(m.events.get(&i, 0)?.iter().sum());
        }
        Ok(Snapshot {
            vips,
            drops,
            snat,
            iterations,
            tailcall_miss,
            restore_fail,
            cls_vips,
            cls_rules,
            cls_groups,
            cls_events,
        })
    }

    pub(super) fn harness_run(
        &mut self,
        hook: Hook,
        frame: &[u8],
        repeat: u32,
    ) -> Result<(u32, f64, Vec<u8>)> {
        let name = hook.names().harness;
        let ifindex = self.ingress_ifindex;
        let ebpf = self.ebpf(hook);
        let prog = ebpf.program(name).context("harness")?;
        match hook {
            Hook::Xdp => {
                let p: &Xdp = prog.try_into()?;
                run_prog(p, frame, repeat, ifindex)
            }
            Hook::Tc => {
                let p: &SchedClassifier = prog.try_into()?;
                run_prog(p, frame, repeat, None)
            }
        }
    }

    /// Runs `slot` through the harness `runs` times, interleaved with runs
    /// of the sink, and returns the pairwise-subtracted median.
    pub(super) fn timed(
        &mut self,
        hook: Hook,
        f: &Frame,
        vary: Vary,
        slot: Slot,
        repeat: u32,
    ) -> Result<Timed> {
        self.set_frame(hook, f, vary)?;
        let before = self.snapshot(hook)?;
        let mut diffs = Vec::new();
        let mut sinks = Vec::new();
        let mut last = (0u32, Vec::new());
        for r in 0..self.opts.runs {
            let mut order = [Slot::Sink, slot];
            if r % 2 == 1 {
                order.reverse();
            }
            let mut t_sink = 0.0;
            let mut t_prog = 0.0;
            for s in order {
                self.set_slot(hook, s)?;
                let (ret, ns, out) = self.harness_run(hook, &f.bytes, repeat)?;
                if s == Slot::Sink {
                    t_sink = ns;
                } else {
                    t_prog = ns;
                    last = (ret, out);
                }
            }
            diffs.push(t_prog - t_sink);
            sinks.push(t_sink);
        }
        let after = self.snapshot(hook)?;
        Ok(Timed {
            net_ns: median(&diffs),
            harness_ns: median(&sinks),
            iqr: (quantile(&diffs, 0.25), quantile(&diffs, 0.75)),
            retval: last.0,
            out: last.1,
            before,
            after,
            iterations: self.opts.runs as u64 * repeat as u64,
            harness_iterations: 2 * self.opts.runs as u64 * repeat as u64,
            ratio_to_floor: None,
        })
    }

    /// Like [`Rig::timed`] for `slot`, with the floor measured in the same
    /// runs: every run times the sink, the floor and the program in an
    /// order that rotates from run to run, so a burst of other load on the
    /// shared machine hits both sides of the ratio instead of one. Returns
    /// (floor, program); the program's `ratio_to_floor` is the median of the
    /// per-run ratios. Only for cases whose frame the floor can share (not
    /// the new-flow ones, whose frame changes on every iteration).
    pub(super) fn timed_with_floor(
        &mut self,
        hook: Hook,
        f: &Frame,
        vary: Vary,
        slot: Slot,
        repeat: u32,
    ) -> Result<(Timed, Timed)> {
        self.timed_with_floor_on(hook, f, vary, slot, repeat, false)
    }

    /// Turns the harness's new-flow variation of the stored frame on or
    /// off, keeping its sequence: the floor of a new-flow case runs on the
    /// fixed frame between runs of the case, whose flows stay new.
    fn set_varying(&mut self, hook: Hook, on: bool) -> Result<()> {
        let mut arr = self.frame_map(hook)?;
        let mut v = arr.get(&0, 0)?;
        if on {
            v.flags |= F_VARY;
        } else {
            v.flags &= !F_VARY;
        }
        arr.set(0, v, 0)?;
        Ok(())
    }

    /// [`Rig::timed_with_floor`]; with `floor_fixed` (new-flow cases) the
    /// floor's runs see the frame as it is while the sink's and the case's
    /// see a new flow on every iteration (see [`Rig::set_varying`]), so the
    /// floor is measured in the same runs as for every other case.
    pub(super) fn timed_with_floor_on(
        &mut self,
        hook: Hook,
        f: &Frame,
        vary: Vary,
        slot: Slot,
        repeat: u32,
        floor_fixed: bool,
    ) -> Result<(Timed, Timed)> {
        self.set_frame(hook, f, vary)?;
        let before = self.snapshot(hook)?;
        let (mut diffs, mut floors, mut sinks, mut ratios) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut last, mut floor_last) = ((0u32, Vec::new()), (0u32, Vec::new()));
        for r in 0..self.opts.runs {
            let mut order = [Slot::Sink, Slot::Floor, slot];
            order.rotate_left(r % 3);
            let (mut t_sink, mut t_floor, mut t_prog) = (0.0, 0.0, 0.0);
            for s in order {
                self.set_slot(hook, s)?;
                if floor_fixed {
                    self.set_varying(hook, s != Slot::Floor)?;
                }
                let (ret, ns, out) = self.harness_run(hook, &f.bytes, repeat)?;
                match s {
                    Slot::Sink => t_sink = ns,
                    Slot::Floor => {
                        t_floor = ns;
                        floor_last = (ret, out);
                    }
                    _ => {
                        t_prog = ns;
                        last = (ret, out);
                    }
                }
            }
            diffs.push(t_prog - t_sink);
            floors.push(t_floor - t_sink);
            sinks.push(t_sink);
            if t_floor - t_sink > 0.0 {
                ratios.push((t_prog - t_sink) / (t_floor - t_sink));
            }
        }
        let after = self.snapshot(hook)?;
        let n = self.opts.runs as u64 * repeat as u64;
        let timed = |d: &Vec<f64>, ret: (u32, Vec<u8>), ratio| Timed {
            net_ns: median(d),
            harness_ns: median(&sinks),
            iqr: (quantile(d, 0.25), quantile(d, 0.75)),
            retval: ret.0,
            out: ret.1,
            before: before.clone(),
            after: after.clone(),
            iterations: n,
            harness_iterations: 3 * n,
            ratio_to_floor: ratio,
        };
        let ratio = (!ratios.is_empty()).then(|| median(&ratios));
        Ok((timed(&floors, floor_last, None), timed(&diffs, last, ratio)))
    }

    pub(super) fn clear_flow_tables(&mut self) -> Result<()> {
        let m = self.dp.maps_mut();
        let keys: Vec<_> = m.affinity.keys().filter_map(|k| k.ok()).collect();
        for k in keys {
            let _ = m.affinity.remove(&k);
        }
        let keys: Vec<_> = m.affinity6.keys().filter_map(|k| k.ok()).collect();
        for k in keys {
            let _ = m.affinity6.remove(&k);
        }
        let keys: Vec<_> = m.nat_reverse.keys().filter_map(|k| k.ok()).collect();
        for k in keys {
            let _ = m.nat_reverse.remove(&k);
        }
        let keys: Vec<_> = m.nat_reverse6.keys().filter_map(|k| k.ok()).collect();
        for k in keys {
            let _ = m.nat_reverse6.remove(&k);
        }
        Ok(())
    }

    pub(super) fn affinity_entries(&self) -> (usize, usize) {
        let m = self.dp.maps();
        (m.affinity.keys().count(), m.affinity6.keys().count())
    }
}

/// How the harness varies the flow between iterations.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Vary {
    /// The same frame every time.
    No,
    /// A flow never seen before every time.
    New,
    /// One of this many flows in turn.
    Cycle(u32),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Slot {
    Real,
    Floor,
    Sink,
    /// `Rig::probes[i]` (XDP only).
    Probe(usize),
}

/// A classifier counter slot summed over the CPUs.
fn cls_stats(map: &PerCpuArray<MapData, abi::ClsStats>, id: u32) -> Result<abi::ClsStats> {
    Ok(map
        .get(&id, 0)?
        .iter()
        .fold(abi::ClsStats::default(), |a, s| abi::ClsStats {
            packets: a.packets + s.packets,
            bytes: a.bytes + s.bytes,
            no_target: a.no_target + s.no_target,
            other: a.other + s.other,
        }))
}

/// A namespace whose FIB routes the backends' addresses (10.200.1.0/24,
/// fd00:200:1::/64) out of `up0` to a next hop with a known MAC
/// ([`BACKEND_HOP_MAC`]), and the clients' (10.200.0.0/24, fd00:200::/64)
/// to another ([`CLIENT_HOP_MAC`], for the source-translated replies),
/// with forwarding on (the FIB answers only for forwarding interfaces).
/// `up0`'s addresses, [`NODE4`] and [`NODE6`], are the node's (the
/// translated flows' source). Returns it and the ifindex of `up1`, the
/// ingress interface test_run pretends the frames arrive on.
pub(super) fn fib_lab() -> Result<(rivora_lab::Netns, u32)> {
    let lab = rivora_lab::fib::FibLab::new("bnfib")?;
    Ok((lab.ns, lab.ingress_ifindex))
}

pub(super) fn addrs(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|a| a.parse().unwrap()).collect()
}
