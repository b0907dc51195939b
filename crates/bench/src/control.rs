//! Part 4: the control plane at the spec's capacities.
//!
//! In process, through the dataplane API (`Dataplane::apply` on freshly
//! loaded maps), and end to end through the real rivorad: cold start to the
//! API socket, SIGHUP to the next config generation, and a config change to
//! the first packet that reaches a newly added backend. rivorad's peak RSS
//! is its VmHWM; what the flow-table size costs is rivorad's VmHWM plus the
//! kernel memory of the BPF maps it holds, at the default size and at
//! 1,048,576 flows.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use rivora_abi as abi;
use rivora_dataplane::{BackendSpec, Datapath, Dataplane, LoadOptions, VipKey, VipSpec, proto};
use rivora_lab::memory::{BpfMaps, ProcessMemory};
use rivora_lab::topology::backend_v4;
use rivora_lab::{Netns, Rivorad, Topology};

use crate::report::{Row, Section};
use crate::stats::{fmt_pct, fmt_secs, median};
use crate::util::PinDir;

/// VIP i of the full-capacity config: 10.210.x.y:80/tcp.
fn vip_addr(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 210, (i / 250) as u8, (i % 250 + 1) as u8)
}

/// Backend j (0..8192): 10.221.x.y:8080.
fn backend_addr(j: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 221, (j / 250) as u8, (j % 250 + 1) as u8)
}

/// The full-capacity desired state: 4,096 VIPs with two backends each, all
/// distinct (8,192 backends). `weight_first` is the first backend's weight
/// for VIPs in `changed` (a config change rebuilds exactly those).
fn full_specs(changed: std::ops::Range<usize>, weight_first: u32) -> Vec<VipSpec> {
    (0..abi::MAX_VIPS as usize)
        .map(|i| {
            let mut b0 = BackendSpec::new(IpAddr::V4(backend_addr(2 * i)), 8080);
            if changed.contains(&i) {
                b0.weight = weight_first;
            }
            let b1 = BackendSpec::new(IpAddr::V4(backend_addr(2 * i + 1)), 8080);
            VipSpec::new(
                format!("v{i}"),
                VipKey::exact(IpAddr::V4(vip_addr(i)), 80, proto::TCP),
                vec![b0, b1],
            )
        })
        .collect()
}

/// 5b's shape in process: `n` VIPs x 10 backends, endpoint 0 of each VIP a backend of its own,
/// the other 9 drawn from a pool of backends shared 5 ways (so 2,000 VIPs need 5,600 backends,
/// within the 8,192-entry table); VIP 0's first backend has weight `weight_first`.
fn k8s_shaped_specs(n: usize, weight_first: u32) -> Vec<VipSpec> {
    let shared = n * 9 / 5;
    (0..n)
        .map(|i| {
            let backends = (0..10)
                .map(|j| {
                    let id = if j == 0 { i } else { n + (i * 9 + j) % shared };
                    let mut b = BackendSpec::new(IpAddr::V4(backend_addr(id)), 8080);
                    if i == 0 && j == 0 {
                        b.weight = weight_first;
                    }
                    b
                })
                .collect();
            VipSpec::new(
                format!("ns/svc-{i}:80/TCP"),
                VipKey::exact(IpAddr::V4(vip_addr(i)), 80, proto::TCP),
                backends,
            )
        })
        .collect()
}

/// One backend weight changed among [`k8s_shaped_specs`], `changes` times, with refuse-alone
/// on as the Kubernetes source runs it: the whole-state comparison each change costs, and
/// where it goes ([`rivora_dataplane::ApplyPhases`] of the last).
fn one_change_among(n: usize, changes: usize) -> Result<(Vec<f64>, String)> {
    let (pins, _datapath, mut dp, _) = fresh(&format!("k8s{n}"))?;
    dp.set_refuse_alone(true);
    let cold = dp
        .apply(&k8s_shaped_specs(n, 1))
        .map_err(|e| anyhow!("apply: {e}"))?;
    if !cold.refused.is_empty() {
        bail!("{} of {n} VIPs refused", cold.refused.len());
    }
    let mut times = Vec::with_capacity(changes);
    for c in 0..changes {
        let specs = k8s_shaped_specs(n, 2 + (c % 3) as u32);
        times.push(timed_apply(&mut dp, &specs)?);
    }
    let phases = dp.last_apply_phases().to_string();
    drop(dp);
    drop(pins);
    Ok((times, phases))
}

/// One VIP with all 8,192 backends; `weight_first` for the first one.
fn big_spec(weight_first: u32, count: usize) -> Vec<VipSpec> {
    let backends = (0..count)
        .map(|j| {
            let mut b = BackendSpec::new(IpAddr::V4(backend_addr(j)), 8080);
            if j == 0 {
                b.weight = weight_first;
            }
            b
        })
        .collect();
    vec![VipSpec::new(
        "big",
        VipKey::exact(IpAddr::V4(Ipv4Addr::new(10, 211, 0, 1)), 80, proto::TCP),
        backends,
    )]
}

fn yaml_of(specs: &[VipSpec]) -> String {
    let mut s = String::from("vips:\n");
    for v in specs {
        s.push_str(&format!(
            "  - name: {}\n    address: \"{}\"\n    port: {}\n    protocol: {}\n    mode: nat\n    backends:\n",
            v.name,
            v.key.addr,
            v.key.port,
            if v.key.proto == proto::UDP { "udp" } else { "tcp" }
        ));
        for b in &v.backends {
            s.push_str(&format!(
                "      - {{ address: \"{}\", port: {}, weight: {} }}\n",
                b.key.addr, b.key.port, b.weight
            ));
        }
    }
    s
}

/// Loads a fresh datapath in its own pin directory.
pub(crate) fn fresh(tag: &str) -> Result<(PinDir, Datapath, Dataplane, f64)> {
    let dir = PathBuf::from(format!(
        "/sys/fs/bpf/rivora-bench-{tag}-{}",
        std::process::id()
    ));
    crate::util::remove_pin_dir(&dir);
    let pins = PinDir(dir.clone());
    let t = Instant::now();
    let (datapath, maps, _) = Datapath::load(&LoadOptions {
        pin_dir: dir,
        maglev_table_size: abi::MAGLEV_TABLE_DEFAULT,
        flow_table_size: rivora_abi::MAX_FLOWS,
        reset_incompatible: false,
        object_dir: None,
    })
    .map_err(|e| anyhow!("loading the datapath: {e}"))?;
    let load = t.elapsed().as_secs_f64();
    Ok((pins, datapath, Dataplane::new(maps), load))
}

fn timed_apply(dp: &mut Dataplane, specs: &[VipSpec]) -> Result<f64> {
    let t = Instant::now();
    dp.apply(specs).map_err(|e| anyhow!("apply: {e}"))?;
    Ok(t.elapsed().as_secs_f64())
}

/// A rivorad under test and the way to talk to it.
struct Daemon {
    d: Rivorad,
    socket: PathBuf,
    config: PathBuf,
    pin: PathBuf,
    rt: tokio::runtime::Runtime,
}

impl Daemon {
    /// Starts rivorad on `yaml` with `extra` flags appended, waits for its
    /// API socket and returns the time that took.
    #[allow(clippy::too_many_arguments)] // each is a distinct place or flag
    fn start(
        ns: &Netns,
        ifname: &str,
        bin: &Path,
        work: &Path,
        tag: &str,
        yaml: &str,
        extra: &[&str],
    ) -> Result<(Daemon, f64)> {
        let config = work.join(format!("{tag}.yaml"));
        std::fs::write(&config, yaml)?;
        let socket = work.join(format!("{tag}.sock"));
        let pin = PathBuf::from(format!(
            "/sys/fs/bpf/rivora-bench-{tag}-{}",
            std::process::id()
        ));
        let mut args = vec![
            "--backend-retire-secs",
            "0",
            // Only SIGHUP applies a change, so every change is timed
            // from one known moment.
            "--config-poll-ms",
            "3600000",
        ];
        args.extend_from_slice(extra);
        let t = Instant::now();
        let mut d = Rivorad::start(ns, ifname, bin, &config, &pin, &socket, work, &args)?;
        d.wait_ready(&socket, Duration::from_secs(120))?;
        let ready = t.elapsed().as_secs_f64();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok((
            Daemon {
                d,
                socket,
                config,
                pin,
                rt,
            },
            ready,
        ))
    }

    fn client(&self) -> rivora_api::Client {
        rivora_api::Client::new(&self.socket).with_timeout(Duration::from_secs(30))
    }

    fn status(&self) -> Result<rivora_api::Status> {
        self.rt
            .block_on(self.client().status())
            .map_err(|e| anyhow!("status: {e}"))
    }

    fn stats(&self) -> Result<rivora_api::Stats> {
        self.rt
            .block_on(self.client().stats())
            .map_err(|e| anyhow!("stats: {e}"))
    }

    fn generation(&self) -> Result<u64> {
        Ok(self.status()?.config_generation)
    }

    /// rivorad's peak resident set, MiB.
    fn hwm_mib(&self) -> Result<f64> {
        Ok(ProcessMemory::of(self.d.pid())?.hwm_mib())
    }

    /// Replaces the config file (atomically), sends SIGHUP and returns
    /// the moment of the signal; `wait_applied` then waits for the next
    /// generation.
    fn change(&self, yaml: &str) -> Result<(u64, Instant)> {
        let g = self.generation()?;
        let tmp = self.config.with_extension("tmp");
        std::fs::write(&tmp, yaml)?;
        let t = Instant::now();
        std::fs::rename(&tmp, &self.config)?;
        // SAFETY: kill(2) on our own child's PID.
        unsafe { libc::kill(self.d.pid() as libc::pid_t, libc::SIGHUP) };
        Ok((g, t))
    }

    fn wait_applied(&self, g: u64, since: Instant) -> Result<f64> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if self.generation()? > g {
                return Ok(since.elapsed().as_secs_f64());
            }
            if Instant::now() > deadline {
                bail!("config generation did not move past {g} in 120 s");
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }
}

/// A stream of UDP datagrams to `vip`, every one from a source port not
/// used before: every datagram is a new flow. Raw socket, so the port is
/// ours to choose; checksum 0 (none, valid for UDP over IPv4).
fn udp_new_flow_stream(
    ns: &Netns,
    vip: SocketAddr,
    on: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Result<u64>> {
    ns.enter_thread(move || -> Result<u64> {
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_RAW, libc::IPPROTO_UDP) };
        if fd < 0 {
            bail!("raw socket: {}", std::io::Error::last_os_error());
        }
        let SocketAddr::V4(v4) = vip else {
            bail!("IPv4 VIP expected")
        };
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_addr.s_addr = u32::from_ne_bytes(v4.ip().octets());
        let mut sport: u16 = 1024;
        let mut sent = 0u64;
        while !stop.load(Ordering::Relaxed) {
            if !on.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let mut pkt = [0u8; 16];
            pkt[0..2].copy_from_slice(&sport.to_be_bytes());
            pkt[2..4].copy_from_slice(&v4.port().to_be_bytes());
            pkt[4..6].copy_from_slice(&16u16.to_be_bytes());
            pkt[8..16].copy_from_slice(b"rivora!!");
            // SAFETY: valid buffer and address for the duration of the call.
            unsafe {
                libc::sendto(
                    fd,
                    pkt.as_ptr().cast(),
                    pkt.len(),
                    0,
                    (&sa as *const libc::sockaddr_in).cast(),
                    std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
                );
            }
            sent += 1;
            sport = if sport == u16::MAX { 1024 } else { sport + 1 };
            std::thread::sleep(Duration::from_micros(20));
        }
        // SAFETY: our own fd.
        unsafe { libc::close(fd) };
        Ok(sent)
    })
}

/// A UDP receiver on a backend: records when the first datagram arrived
/// after `armed` was set.
fn udp_receiver(
    ns: &Netns,
    port: u16,
    armed: Arc<AtomicBool>,
    first: Arc<Mutex<Option<Instant>>>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>> {
    let sock = ns.within(|| UdpSocket::bind(("0.0.0.0", port)))??;
    sock.set_read_timeout(Some(Duration::from_millis(20)))?;
    Ok(std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        while !stop.load(Ordering::Relaxed) {
            if sock.recv_from(&mut buf).is_ok() {
                let now = Instant::now();
                if armed.load(Ordering::Relaxed) {
                    let mut f = first.lock().unwrap();
                    if f.is_none() {
                        *f = Some(now);
                    }
                }
            }
        }
    }))
}

/// Runs part 4.
pub fn run(rivorad_bin: &Path, quick: bool) -> Result<Section> {
    let mut sec = Section {
        title: "4. Control plane at the spec's capacities".into(),
        ratio_label: "vs target".into(),
        ..Default::default()
    };
    sec.method = "Full capacity: 4,096 VIPs with two backends each, all distinct (8,192 backends: both \
        limits at once), and separately one VIP with 8,192 backends. \"API\" rows call \
        `Dataplane::apply` in this process on maps just loaded (`Datapath::load`, timed separately: it \
        is mostly the verifier); \"rivorad\" rows run the real daemon (release build) in the lab's \
        balancer namespace: cold start is spawn to the API socket (rivorad creates it last: config \
        parsed, programs loaded and verified, maps programmed, XDP and TCX attached); a config change is \
        an atomic rename of the file plus SIGHUP, until `GET /v1/status` shows the next config \
        generation (polled every 0.5 ms). A changed VIP gets a new Maglev slice. Change to forwarding: a \
        UDP VIP with backends b1, b2 gets b3 added while the client sends a datagram from a new source \
        port about every 80 us (each one a new flow); the figure is SIGHUP to the first datagram \
        received on b3 (the stream adds up to ~0.25 ms: b3 takes a third of the new flows). Peak \
        memory: rivorad's VmHWM from /proc after its changes. Memory per flow-table size: rivorad \
        started on one VIP with the default 65,536-entry flow tables, then with \
        `--flow-table-size 1048576`; once `/v1/status` shows the VIP applied and `/v1/stats` the \
        four tables at that capacity, the figure is rivorad's VmHWM plus the kernel memory of the \
        BPF maps it holds (the `memlock` of each distinct map among its fds in /proc/PID/fdinfo; \
        the kernel allocates the flow tables whole when it creates them, so they never show in \
        the RSS)."
        .into();
    let target_row = |label: &str, secs: f64, limit: f64, limit_label: &str, ev: String| {
        Row::info(label, fmt_secs(secs))
            .ratio(crate::stats::fmt_ratio(secs / limit))
            .target(limit_label, secs < limit)
            .evidence(ev)
    };

    // --- In process: the dataplane API.
    let (pins, _datapath, mut dp, load) = fresh("ctl")?;
    sec.rows.push(
        Row::info(
            "API: load and verify xdp_ingress and its stages (Datapath::load)",
            fmt_secs(load),
        )
        .evidence(format!(
            "xdp_ingress and its {} tail-call stages verified, their stage array filled; tc_nat \
             parsed (verified when attached); maps created and pinned",
            rivora_dataplane::stages::STAGES.len()
        )),
    );
    let cold = timed_apply(&mut dp, &full_specs(0..0, 1))?;
    let imb: Vec<f64> = dp.vips().map(|v| v.worst_imbalance).collect();
    let sizes: Vec<u32> = dp.vips().map(|v| v.slice.size).collect();
    sec.rows.push(target_row(
        "API: program 4,096 VIPs / 8,192 backends, cold",
        cold,
        2.0,
        "< 2 s",
        format!(
            "{} VIPs, {} backends programmed; slices of {} slots, worst imbalance {}",
            dp.vips().count(),
            dp.backends().count(),
            sizes.iter().min().copied().unwrap_or(0),
            fmt_pct(imb.iter().cloned().fold(0.0, f64::max))
        ),
    ));
    let one = timed_apply(&mut dp, &full_specs(0..1, 2))?;
    sec.rows.push(target_row(
        "API: config change, 1 of 4,096 VIPs changed",
        one,
        2.0,
        "< 2 s",
        "a backend weight changed: one slice rebuilt, the other 4,095 VIPs compared and kept"
            .into(),
    ));
    let all = timed_apply(&mut dp, &full_specs(0..4096, 3))?;
    sec.rows.push(target_row(
        "API: config change, all 4,096 VIPs changed",
        all,
        2.0,
        "< 2 s",
        "every VIP's first backend weight changed: 4,096 slices rebuilt".into(),
    ));
    drop(dp);
    drop(_datapath);
    drop(pins);

    // 5b's shape: the comparison a single endpoint change costs rivorad today.
    for n in [100, 2_000] {
        let changes = if quick { 20 } else { 200 };
        let (times, phases) = one_change_among(n, changes)?;
        let p50 = crate::stats::quantile(&times, 0.50);
        let p99 = crate::stats::quantile(&times, 0.99);
        sec.rows.push(
            Row::info(
                format!("API: one backend weight changed among {n} VIPs x 10 backends, p50 / p99"),
                format!("{} / {}", fmt_secs(p50), fmt_secs(p99)),
            )
            .evidence(format!(
                "{changes} changes, refuse-alone on (the Kubernetes source's mode); the last: \
                 {phases}"
            )),
        );
    }

    let (pins, _datapath, mut dp, _) = fresh("ctl8k")?;
    let big_cold = timed_apply(&mut dp, &big_spec(1, abi::MAX_BACKENDS as usize))?;
    let (bsize, bimb) = dp
        .vips()
        .next()
        .map(|v| (v.slice.size, v.worst_imbalance))
        .unwrap_or((0, f64::NAN));
    sec.rows.push(target_row(
        "API: program one VIP with 8,192 backends, cold",
        big_cold,
        2.0,
        "< 2 s",
        format!(
            "slice of {bsize} slots ({:.1} per backend: capped at half the 65,537-slot table), worst \
             imbalance {}",
            bsize as f64 / 8192.0,
            fmt_pct(bimb)
        ),
    ));
    let big_change = timed_apply(&mut dp, &big_spec(2, abi::MAX_BACKENDS as usize))?;
    sec.rows.push(target_row(
        "API: config change of that VIP (one weight)",
        big_change,
        2.0,
        "< 2 s",
        "the 8,192-backend slice rebuilt".into(),
    ));
    drop(dp);
    drop(_datapath);
    drop(pins);

    // --- rivorad, in the lab.
    let topo = Topology::build("ct").context("building the lab")?;
    let work = std::env::temp_dir().join(format!("rivora-bench-ctl-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    let res = rivorad_rows(&mut sec, &topo, rivorad_bin, &work, quick);
    let _ = std::fs::remove_dir_all(&work);
    res?;
    Ok(sec)
}

fn rivorad_rows(
    sec: &mut Section,
    topo: &Topology,
    bin: &Path,
    work: &Path,
    quick: bool,
) -> Result<()> {
    let target_row = |label: &str, secs: f64, limit: f64, limit_label: &str, ev: String| {
        Row::info(label, fmt_secs(secs))
            .ratio(crate::stats::fmt_ratio(secs / limit))
            .target(limit_label, secs < limit)
            .evidence(ev)
    };
    let mut peak: Vec<(String, f64)> = Vec::new();

    // Full capacity.
    let (d, ready) = Daemon::start(
        &topo.lb,
        &topo.lb_if,
        bin,
        work,
        "full",
        &yaml_of(&full_specs(0..0, 1)),
        &[],
    )?;
    sec.rows.push(target_row(
        "rivorad: cold start with 4,096 VIPs / 8,192 backends",
        ready,
        2.0,
        "< 2 s",
        format!(
            "spawn to API socket; config file {} KiB",
            std::fs::metadata(&d.config)?.len() / 1024
        ),
    ));
    let (g, t) = d.change(&yaml_of(&full_specs(0..1, 2)))?;
    let one = d.wait_applied(g, t)?;
    sec.rows.push(target_row(
        "rivorad: config change, 1 of 4,096 VIPs changed",
        one,
        2.0,
        "< 2 s",
        "SIGHUP to the next config generation (file read and validated whole)".into(),
    ));
    let (g, t) = d.change(&yaml_of(&full_specs(0..4096, 3)))?;
    let all = d.wait_applied(g, t)?;
    sec.rows.push(target_row(
        "rivorad: config change, all 4,096 VIPs changed",
        all,
        2.0,
        "< 2 s",
        "4,096 slices rebuilt".into(),
    ));
    peak.push(("4,096 VIPs / 8,192 backends".into(), d.hwm_mib()?));
    drop(d);

    let (d, ready) = Daemon::start(
        &topo.lb,
        &topo.lb_if,
        bin,
        work,
        "big",
        &yaml_of(&big_spec(1, abi::MAX_BACKENDS as usize)),
        &[],
    )?;
    sec.rows.push(target_row(
        "rivorad: cold start with one VIP of 8,192 backends",
        ready,
        2.0,
        "< 2 s",
        "spawn to API socket".into(),
    ));
    let (g, t) = d.change(&yaml_of(&big_spec(2, abi::MAX_BACKENDS as usize)))?;
    let ch = d.wait_applied(g, t)?;
    sec.rows.push(target_row(
        "rivorad: config change of that VIP (one weight)",
        ch,
        2.0,
        "< 2 s",
        "SIGHUP to the next config generation".into(),
    ));
    peak.push(("one VIP of 8,192 backends".into(), d.hwm_mib()?));
    drop(d);

    // Config change to the first packet on a new backend.
    let vip = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 200, 100, 9)), 6000);
    let lat_spec = |n: usize| {
        let backends = (1..=n)
            .map(|i| BackendSpec::new(IpAddr::V4(backend_v4(i)), 6000))
            .collect();
        let mut v = VipSpec::new(
            "latency",
            VipKey::exact(vip.ip(), vip.port(), proto::UDP),
            backends,
        );
        v.mode = rivora_dataplane::Mode::Nat;
        vec![v]
    };
    let (d, _) = Daemon::start(
        &topo.lb,
        &topo.lb_if,
        bin,
        work,
        "lat",
        &yaml_of(&lat_spec(2)),
        &[],
    )?;
    let stop = Arc::new(AtomicBool::new(false));
    let armed = Arc::new(AtomicBool::new(false));
    let never = Arc::new(AtomicBool::new(false));
    let first = Arc::new(Mutex::new(None));
    let mut rx = Vec::new();
    for (i, ns) in topo.backends.iter().enumerate() {
        let arm = if i == 2 { armed.clone() } else { never.clone() };
        rx.push(udp_receiver(ns, 6000, arm, first.clone(), stop.clone())?);
    }
    let on = Arc::new(AtomicBool::new(false));
    let tx = udp_new_flow_stream(&topo.client, vip, on.clone(), stop.clone());
    let trials = if quick { 3 } else { 7 };
    let mut lat = Vec::new();
    let mut apply = Vec::new();
    let mut err = None;
    for _ in 0..trials {
        *first.lock().unwrap() = None;
        armed.store(true, Ordering::SeqCst);
        on.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(30));
        let r = (|| -> Result<()> {
            let (g, t) = d.change(&yaml_of(&lat_spec(3)))?;
            let deadline = t + Duration::from_secs(5);
            let got = loop {
                if let Some(f) = *first.lock().unwrap() {
                    break f;
                }
                if Instant::now() > deadline {
                    bail!("no datagram reached the new backend within 5 s");
                }
                std::thread::sleep(Duration::from_micros(100));
            };
            lat.push(got.duration_since(t).as_secs_f64());
            apply.push(d.wait_applied(g, t)?);
            Ok(())
        })();
        on.store(false, Ordering::SeqCst);
        armed.store(false, Ordering::SeqCst);
        if let Err(e) = r {
            err = Some(e);
            break;
        }
        // Back to two backends for the next trial (b3 released at once).
        let (g, t) = d.change(&yaml_of(&lat_spec(2)))?;
        d.wait_applied(g, t)?;
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::SeqCst);
    let sent = tx.join().map_err(|_| anyhow!("sender panicked"))??;
    for h in rx {
        let _ = h.join();
    }
    peak.push(("the latency test's single VIP".into(), d.hwm_mib()?));
    drop(d);
    if let Some(e) = err {
        sec.rows.push(
            Row::info(
                "rivorad: config change to first packet on a new backend",
                "-",
            )
            .not_run()
            .evidence(crate::util::short_error(&e)),
        );
    } else {
        let m = median(&lat);
        let worst = lat.iter().cloned().fold(0.0, f64::max);
        sec.rows.push(target_row(
            "rivorad: config change to first packet on a new backend",
            m,
            0.05,
            "< 50 ms",
            format!(
                "median of {} trials, worst {}; the API showed the new generation after {} (median, \
                 polled once the datagram had arrived); {} datagrams sent",
                lat.len(),
                fmt_secs(worst),
                fmt_secs(median(&apply)),
                crate::stats::fmt_count(sent as f64)
            ),
        ));
    }
    let (label, worst) =
        peak.iter().cloned().fold(
            (String::new(), 0.0f64),
            |a, b| if b.1 > a.1 { b } else { a },
        );
    sec.rows.push(
        Row::info(
            "rivorad: peak resident memory (VmHWM) at full capacity",
            format!("{worst:.1} MiB"),
        )
        .ratio(crate::stats::fmt_ratio(worst / 64.0))
        .target("< 64 MiB", worst < 64.0)
        .evidence(format!(
            "highest with {label}; all: {}",
            peak.iter()
                .map(|(l, v)| format!("{l} {v:.1} MiB"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    );

    // What the flow-table size costs: the default, then the largest size
    // an operator is expected to ask for.
    for size in [abi::MAX_FLOWS, 1 << 20] {
        sec.rows.push(
            flow_table_memory_row(topo, bin, work, size).unwrap_or_else(|e| {
                Row::info(flow_table_memory_case(size), "-")
                    .not_run()
                    .evidence(crate::util::short_error(&e))
            }),
        );
    }
    Ok(())
}

fn flow_table_memory_case(size: u32) -> String {
    format!(
        "rivorad: memory with {}-flow tables{} (peak RSS + BPF maps)",
        crate::stats::fmt_count(size as f64),
        if size == abi::MAX_FLOWS {
            " (default)"
        } else {
            ""
        }
    )
}

/// Starts rivorad with flow tables of `size` entries (no flag for the
/// default, `--flow-table-size` otherwise) on a one-VIP config, checks that
/// the config is applied and the tables have that capacity, then reads its
/// VmHWM and the memlock of every BPF map among its fds.
fn flow_table_memory_row(topo: &Topology, bin: &Path, work: &Path, size: u32) -> Result<Row> {
    let flag = size.to_string();
    let extra: Vec<&str> = if size == abi::MAX_FLOWS {
        Vec::new()
    } else {
        vec!["--flow-table-size", &flag]
    };
    let spec = vec![VipSpec::new(
        "mem",
        VipKey::exact(IpAddr::V4(Ipv4Addr::new(10, 200, 100, 9)), 80, proto::TCP),
        (1..=2)
            .map(|i| BackendSpec::new(IpAddr::V4(backend_v4(i)), 8080))
            .collect(),
    )];
    let (d, _) = Daemon::start(
        &topo.lb,
        &topo.lb_if,
        bin,
        work,
        &format!("mem{size}"),
        &yaml_of(&spec),
        &extra,
    )?;
    let status = d.status()?;
    if status.vip_count != 1 || status.config_generation == 0 {
        bail!(
            "the one-VIP config is not in force: {} VIPs, generation {}",
            status.vip_count,
            status.config_generation
        );
    }
    let tables = d.stats()?.tables;
    if tables.len() != 4 || tables.iter().any(|t| t.capacity != size as u64) {
        bail!("flow tables are not 4 x {size}: {tables:?}");
    }
    let own = ProcessMemory::of(d.d.pid())?;
    let maps = BpfMaps::of_process(d.d.pid(), Some(&d.pin))?;
    drop(d);
    let flow: Vec<_> = maps
        .pinned_as(&rivora_dataplane::compat::FLOW_TABLES)
        .collect();
    if flow.len() != 4 || flow.iter().any(|m| m.max_entries != size) {
        bail!("rivorad's fds do not show the 4 flow tables at {size} entries: {flow:?}");
    }
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let flow_bytes: u64 = flow.iter().map(|m| m.memlock).sum();
    let pinned = maps.maps.iter().filter(|m| m.pin_name.is_some()).count();
    let total = own.hwm_mib() + mib(maps.memlock());
    let per_table = flow
        .iter()
        .map(|m| {
            format!(
                "{} {:.1} via {} fds",
                m.pin_name.as_deref().unwrap_or("?"),
                mib(m.memlock),
                m.fds
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let evidence = format!(
        "VmHWM {:.1} MiB (/proc/PID/status, one VIP applied, generation {}); BPF maps {:.1} MiB \
         memlock over {} maps ({pinned} pinned) reached by {} of rivorad's fds (/proc/PID/fdinfo, \
         counted once per map ID); of that the flow tables, 4 x {} entries (fdinfo max_entries \
         and /v1/stats): {:.1} MiB ({per_table})",
        own.hwm_mib(),
        status.config_generation,
        mib(maps.memlock()),
        maps.maps.len(),
        maps.fds(),
        crate::stats::fmt_count(size as f64),
        mib(flow_bytes),
    );
    Ok(Row::info(flow_table_memory_case(size), format!("{total:.1} MiB")).evidence(evidence))
}
