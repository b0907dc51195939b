//! rivora-decap: the backends' side of L3 DSR (`dsr-ipip`, `dsr-gre`).
//!
//! An XDP program (`bpf/decap.c`, compiled by rivora-dataplane's build and
//! embedded here) removes the outer header of IP-in-IP, IPv6-in-IPv6 and
//! GRE packets addressed to one of the host's tunnel endpoint addresses and
//! passes the inner packet to the local stack, for hosts whose kernel has no
//! `ipip`, `gre` or `ip6_tunnel` modules. Packets to other addresses, and
//! everything that is not a tunnel, pass untouched.
//!
//! Each interface gets its own program instance whose link and maps are
//! pinned under `<pin root>/<interface>` (default root
//! [`DEFAULT_PIN_ROOT`]), so the attachment outlives the command that made
//! it; [`detach`] removes the pins and with them the attachment.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use aya::maps::{Array, HashMap, Map, MapData, PerCpuArray};
use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::{TestRun, TestRunOptions, Xdp, XdpMode};
use aya::{Ebpf, EbpfLoader};
use rivora_abi as abi;
use rivora_dataplane::holder::{self, HookMode};

/// Where the per-interface pin directories go unless told otherwise.
pub const DEFAULT_PIN_ROOT: &str = "/sys/fs/bpf/rivora-decap";
/// Where bpffs is mounted (and mounted if missing).
pub const BPFFS_MOUNT: &str = "/sys/fs/bpf";
/// The program's name in `bpf/decap.c`.
pub const PROGRAM: &str = "rv_decap";
/// Pin name of the XDP link inside an interface's pin directory.
pub const LINK_PIN: &str = "link";
/// Pin names of the maps inside an interface's pin directory.
pub const MAP_NAMES: &[&str] = &["decap_addr4", "decap_addr6", "decap_stats", "decap_meta"];

/// XDP verdict the program returns for everything (`XDP_PASS`).
pub const XDP_PASS: u32 = 2;

/// How to attach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// Driver (native) mode, falling back to skb mode if the driver refuses.
    Auto,
    /// Generic (skb) mode: works on every device.
    Skb,
    /// Driver (native) mode only.
    Driver,
}

/// The mode the program runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunningMode {
    /// In the driver.
    Driver,
    /// In the generic skb path.
    Skb,
    /// Not recorded (attached by another build).
    Unknown,
}

impl RunningMode {
    /// Name for output.
    pub fn as_str(self) -> &'static str {
        match self {
            RunningMode::Driver => "driver",
            RunningMode::Skb => "skb",
            RunningMode::Unknown => "unknown",
        }
    }

    fn abi(self) -> u32 {
        match self {
            RunningMode::Driver => abi::xdp_mode::NATIVE,
            RunningMode::Skb => abi::xdp_mode::GENERIC,
            RunningMode::Unknown => abi::xdp_mode::UNKNOWN,
        }
    }

    fn from_abi(v: u32) -> Self {
        match v {
            abi::xdp_mode::NATIVE => RunningMode::Driver,
            abi::xdp_mode::GENERIC => RunningMode::Skb,
            _ => RunningMode::Unknown,
        }
    }
}

/// Counters of one tunnel kind, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KindCounters {
    /// Kind name: `ipip`, `ip6tnl`, `gre`, `ip6gre`.
    pub kind: &'static str,
    /// Outer header removed, inner packet passed up.
    pub decapsulated: u64,
    /// Not addressed to a listed endpoint (or GRE carrying something other
    /// than IPv4/IPv6): passed untouched.
    pub passed: u64,
    /// Addressed to us but not decapsulable (truncated, bad checksum or
    /// length, unknown GRE flags, wrong inner version): passed untouched.
    pub malformed: u64,
    /// Outer fragments (XDP cannot reassemble): passed untouched.
    pub fragments: u64,
}

/// The directory an interface's pins live in.
pub fn pin_dir(pin_root: &Path, interface: &str) -> PathBuf {
    pin_root.join(interface)
}

/// The maps of one program instance, opened from its pins.
pub struct PinnedMaps {
    addr4: HashMap<MapData, abi::DecapAddr4, u32>,
    addr6: HashMap<MapData, abi::DecapAddr6, u32>,
    stats: PerCpuArray<MapData, abi::DecapStats>,
    meta: Array<MapData, abi::DecapMeta>,
}

fn open_map(dir: &Path, name: &str) -> Result<Map> {
    let path = dir.join(name);
    let data =
        MapData::from_pin(&path).with_context(|| format!("open pinned map {}", path.display()))?;
    Map::from_map_data(data).with_context(|| format!("map {}", path.display()))
}

impl PinnedMaps {
    /// Opens the maps pinned in `dir`.
    pub fn open(dir: &Path) -> Result<PinnedMaps> {
        let typed = |name: &str| open_map(dir, name);
        Ok(PinnedMaps {
            addr4: typed("decap_addr4")?.try_into().context("decap_addr4")?,
            addr6: typed("decap_addr6")?.try_into().context("decap_addr6")?,
            stats: typed("decap_stats")?.try_into().context("decap_stats")?,
            meta: typed("decap_meta")?.try_into().context("decap_meta")?,
        })
    }

    /// Makes the endpoint set exactly `addrs` (new ones added before stale
    /// ones are removed, so an address kept in both sets never misses).
    pub fn set_addresses(&mut self, addrs: &[IpAddr]) -> Result<()> {
        let want4: Vec<abi::DecapAddr4> = addrs
            .iter()
            .filter_map(|a| match a {
                IpAddr::V4(a) => Some(abi::DecapAddr4 {
                    addr: abi::be_addr4(*a),
                }),
                IpAddr::V6(_) => None,
            })
            .collect();
        let want6: Vec<abi::DecapAddr6> = addrs
            .iter()
            .filter_map(|a| match a {
                IpAddr::V6(a) => Some(abi::DecapAddr6 { addr: a.octets() }),
                IpAddr::V4(_) => None,
            })
            .collect();
        if want4.len() > abi::decap::MAX_ADDRS as usize
            || want6.len() > abi::decap::MAX_ADDRS as usize
        {
            bail!("at most {} addresses per family", abi::decap::MAX_ADDRS);
        }
        for k in &want4 {
            self.addr4.insert(k, 1, 0).context("decap_addr4 insert")?;
        }
        for k in &want6 {
            self.addr6.insert(k, 1, 0).context("decap_addr6 insert")?;
        }
        let stale4: Vec<_> = self
            .addr4
            .keys()
            .filter_map(|k| k.ok())
            .filter(|k| !want4.contains(k))
            .collect();
        for k in stale4 {
            self.addr4.remove(&k).context("decap_addr4 remove")?;
        }
        let stale6: Vec<_> = self
            .addr6
            .keys()
            .filter_map(|k| k.ok())
            .filter(|k| !want6.contains(k))
            .collect();
        for k in stale6 {
            self.addr6.remove(&k).context("decap_addr6 remove")?;
        }
        Ok(())
    }

    /// The endpoint addresses, IPv4 first, each family sorted.
    pub fn addresses(&self) -> Result<Vec<IpAddr>> {
        let mut v4: Vec<Ipv4Addr> = self
            .addr4
            .keys()
            .map(|k| k.map(|k| abi::addr4_from_be(k.addr)))
            .collect::<Result<_, _>>()
            .context("decap_addr4")?;
        let mut v6: Vec<Ipv6Addr> = self
            .addr6
            .keys()
            .map(|k| k.map(|k| Ipv6Addr::from(k.addr)))
            .collect::<Result<_, _>>()
            .context("decap_addr6")?;
        v4.sort();
        v6.sort();
        Ok(v4
            .into_iter()
            .map(IpAddr::V4)
            .chain(v6.into_iter().map(IpAddr::V6))
            .collect())
    }

    /// Per-kind counters, summed over CPUs, in kind order.
    pub fn counters(&self) -> Result<Vec<KindCounters>> {
        (0..abi::decap::KIND_COUNT)
            .map(|kind| {
                let per_cpu = self.stats.get(&kind, 0).context("decap_stats")?;
                let mut c = KindCounters {
                    kind: abi::decap::KIND_NAMES[kind as usize],
                    ..Default::default()
                };
                for s in per_cpu.iter() {
                    c.decapsulated += s.decapsulated;
                    c.passed += s.passed;
                    c.malformed += s.malformed;
                    c.fragments += s.fragments;
                }
                Ok(c)
            })
            .collect()
    }

    /// What the attach command recorded.
    pub fn meta(&self) -> Result<abi::DecapMeta> {
        self.meta.get(&0, 0).context("decap_meta")
    }

    fn set_meta(&mut self, m: abi::DecapMeta) -> Result<()> {
        self.meta.set(0, m, 0).context("decap_meta")
    }
}

/// One loaded (not necessarily attached) instance of the program, its maps
/// pinned in its pin directory.
pub struct Decap {
    ebpf: Ebpf,
    dir: PathBuf,
    maps: PinnedMaps,
}

impl Decap {
    /// Loads the program with its maps pinned in `dir` (created if
    /// missing; maps already pinned there are reused).
    pub fn load(dir: &Path) -> Result<Decap> {
        let existed = dir.exists();
        let loaded = Self::load_in(dir);
        if loaded.is_err() && !existed {
            let _ = remove_pins(dir);
        }
        loaded
    }

    fn load_in(dir: &Path) -> Result<Decap> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let mut ebpf = EbpfLoader::new()
            .default_map_pin_directory(dir)
            .load(rivora_dataplane::objects::DECAP)
            .context("load the decap object")?;
        let prog: &mut Xdp = ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| anyhow!("object has no program {PROGRAM}"))?
            .try_into()
            .context("program type")?;
        prog.load().context("verifier refused rv_decap")?;
        let maps = PinnedMaps::open(dir)?;
        Ok(Decap {
            ebpf,
            dir: dir.to_path_buf(),
            maps,
        })
    }

    /// The pin directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The maps.
    pub fn maps(&mut self) -> &mut PinnedMaps {
        &mut self.maps
    }

    /// Runs the program once on `frame` (BPF_PROG_TEST_RUN): the verdict
    /// and the frame as the program left it.
    pub fn run(&mut self, frame: &[u8]) -> Result<(u32, Vec<u8>)> {
        let prog: &mut Xdp = self
            .ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| anyhow!("object has no program {PROGRAM}"))?
            .try_into()?;
        let mut out = vec![0u8; frame.len() + 256];
        let res = prog
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ..TestRunOptions::new()
            })
            .context("BPF_PROG_TEST_RUN")?;
        out.truncate(res.data_size_out as usize);
        Ok((res.return_value, out))
    }

    /// Attaches to `interface` (in the calling thread's network namespace)
    /// and pins the link as `<dir>/link`, so the attachment stays after
    /// this process exits.
    pub fn attach(&mut self, interface: &str, mode: AttachMode) -> Result<RunningMode> {
        let ifindex = rivora_dataplane::loader::interface_index(interface)
            .with_context(|| format!("interface {interface}"))?;
        let prog: &mut Xdp = self
            .ebpf
            .program_mut(PROGRAM)
            .ok_or_else(|| anyhow!("object has no program {PROGRAM}"))?
            .try_into()?;
        let refused = |e: aya::programs::ProgramError, wanted: HookMode| {
            attach_refused(interface, ifindex, &self.dir, &e, wanted)
        };
        let (id, running) = match mode {
            AttachMode::Skb => (
                prog.attach(interface, XdpMode::Skb)
                    .map_err(|e| refused(e, HookMode::Generic))?,
                RunningMode::Skb,
            ),
            AttachMode::Driver => (
                prog.attach(interface, XdpMode::Driver)
                    .map_err(|e| refused(e, HookMode::Native))?,
                RunningMode::Driver,
            ),
            AttachMode::Auto => match prog.attach(interface, XdpMode::Driver) {
                Ok(id) => (id, RunningMode::Driver),
                Err(_) => (
                    prog.attach(interface, XdpMode::Skb)
                        .map_err(|e| refused(e, HookMode::Generic))?,
                    RunningMode::Skb,
                ),
            },
        };
        let link: FdLink = prog
            .take_link(id)?
            .try_into()
            .map_err(|e| anyhow!("XDP link is not a bpf_link ({e}); the kernel is too old"))?;
        let pin = self.dir.join(LINK_PIN);
        link.pin(&pin)
            .map_err(|e| anyhow!("pin link {}: {e}", pin.display()))?;
        self.maps.set_meta(abi::DecapMeta {
            abi_version: abi::decap::ABI_VERSION,
            ifindex,
            xdp_mode: running.abi(),
            pad: 0,
        })?;
        Ok(running)
    }
}

/// The error for a refused XDP attach of rv_decap: what the kernel said
/// (once, not repeated by aya's wrappers), and when the hook is taken (EBUSY,
/// EEXIST) which program holds `interface` and what to do about it.
fn attach_refused(
    interface: &str,
    ifindex: u32,
    dir: &Path,
    e: &aya::programs::ProgramError,
    wanted: HookMode,
) -> anyhow::Error {
    let cause = holder::flatten(e);
    match holder::explain_busy(
        interface,
        ifindex,
        holder::errno_of(e),
        wanted,
        holder::Attacher::Decap,
    ) {
        Some(why) => anyhow!(
            "cannot attach rv_decap ({} mode) to {interface}: {cause}: {why}. \
             (This command's pin root is {}; `rivora-decap status` lists its attachments.)",
            wanted.as_str(),
            dir.parent().unwrap_or(dir).display()
        ),
        None => anyhow!(
            "cannot attach rv_decap ({} mode) to {interface}: {cause}",
            wanted.as_str()
        ),
    }
}

/// What [`attach`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachReport {
    /// The interface.
    pub interface: String,
    /// Its pin directory.
    pub pin_dir: PathBuf,
    /// False when it was already attached and only the addresses changed.
    pub newly_attached: bool,
    /// Mode the program runs in.
    pub mode: RunningMode,
    /// The endpoint addresses now in effect.
    pub addresses: Vec<IpAddr>,
}

/// Attaches the program to `interface` (or, when it is already attached
/// under `pin_root`, replaces its endpoint addresses) with the endpoint
/// addresses `addrs`, or the interface's own addresses when `addrs` is
/// empty. Mounts bpffs at /sys/fs/bpf when the pin root is under it.
pub fn attach(
    pin_root: &Path,
    interface: &str,
    addrs: &[IpAddr],
    mode: AttachMode,
) -> Result<AttachReport> {
    if pin_root.starts_with(BPFFS_MOUNT) {
        // The attachment lives only in its pin: one made in a private mount
        // namespace (`ip netns exec`) would vanish when the command exits.
        if let Some(why) = rivora_dataplane::private_bpffs_reason(Path::new(BPFFS_MOUNT)) {
            bail!("refusing to attach: {why}");
        }
        rivora_dataplane::ensure_bpffs(Path::new(BPFFS_MOUNT)).context("mount bpffs")?;
    }
    let ifindex = rivora_dataplane::loader::interface_index(interface)
        .with_context(|| format!("interface {interface}"))?;
    let addrs = if addrs.is_empty() {
        let own = interface_addresses(interface)?;
        if own.is_empty() {
            bail!("{interface} has no addresses to use as tunnel endpoints; give --address");
        }
        own
    } else {
        addrs.to_vec()
    };
    let dir = pin_dir(pin_root, interface);
    if dir.join(LINK_PIN).exists() {
        let mut maps = PinnedMaps::open(&dir)?;
        let meta = maps.meta()?;
        if meta.abi_version != abi::decap::ABI_VERSION {
            bail!(
                "{} was attached by a rivora-decap of map layout {} (this one is {}): detach it first",
                dir.display(),
                meta.abi_version,
                abi::decap::ABI_VERSION
            );
        }
        if meta.ifindex != 0 && meta.ifindex != ifindex {
            bail!(
                "{} holds an attachment to ifindex {}, but {interface} is ifindex {ifindex} here \
                 (another namespace, or a recreated interface): detach it first",
                dir.display(),
                meta.ifindex
            );
        }
        maps.set_addresses(&addrs)?;
        return Ok(AttachReport {
            interface: interface.to_string(),
            pin_dir: dir,
            newly_attached: false,
            mode: RunningMode::from_abi(meta.xdp_mode),
            addresses: maps.addresses()?,
        });
    }
    let existed = dir.exists();
    let result = (|| {
        let mut d = Decap::load(&dir)?;
        // Addresses first: the program must not see an empty set and pass
        // what it is meant to take.
        d.maps().set_addresses(&addrs)?;
        let mode = d.attach(interface, mode)?;
        let addresses = d.maps().addresses()?;
        Ok(AttachReport {
            interface: interface.to_string(),
            pin_dir: dir.clone(),
            newly_attached: true,
            mode,
            addresses,
        })
    })();
    if result.is_err() && !existed {
        let _ = remove_pins(&dir);
    }
    result
}

/// Detaches from `interface`: removes the link pin (the last reference, so
/// the program leaves the interface) and the map pins. Returns whether an
/// attachment was found.
pub fn detach(pin_root: &Path, interface: &str) -> Result<bool> {
    let dir = pin_dir(pin_root, interface);
    if !dir.exists() {
        return Ok(false);
    }
    let had_link = dir.join(LINK_PIN).exists();
    remove_pins(&dir)?;
    Ok(had_link)
}

/// Removes the link and map pins in `dir`, then `dir` if empty.
pub fn remove_pins(dir: &Path) -> Result<()> {
    for name in std::iter::once(&LINK_PIN).chain(MAP_NAMES) {
        match std::fs::remove_file(dir.join(name)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("remove {}/{name}", dir.display())),
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => Ok(()),
        Err(e) => Err(e).with_context(|| format!("remove {}", dir.display())),
    }
}

/// One interface's state as its pins show it.
#[derive(Clone, Debug)]
pub struct InterfaceStatus {
    /// Interface name (the pin directory's name).
    pub interface: String,
    /// Whether a pinned link exists.
    pub attached: bool,
    /// Kernel IDs of the link and its program, when attached.
    pub link_id: Option<u32>,
    /// Program ID.
    pub program_id: Option<u32>,
    /// Recorded interface index.
    pub ifindex: u32,
    /// Recorded mode.
    pub mode: RunningMode,
    /// Endpoint addresses.
    pub addresses: Vec<IpAddr>,
    /// Counters per kind.
    pub counters: Vec<KindCounters>,
}

/// The state of `interface`, or of every interface under `pin_root`.
pub fn status(pin_root: &Path, interface: Option<&str>) -> Result<Vec<InterfaceStatus>> {
    let names: Vec<String> = match interface {
        Some(i) => vec![i.to_string()],
        None => {
            let mut v: Vec<String> = match std::fs::read_dir(pin_root) {
                Ok(rd) => rd
                    .flatten()
                    .filter(|e| e.path().is_dir())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(e).with_context(|| format!("read {}", pin_root.display())),
            };
            v.sort();
            v
        }
    };
    let mut out = Vec::new();
    for name in names {
        let dir = pin_dir(pin_root, &name);
        if !dir.exists() {
            bail!("{name}: not attached (no {})", dir.display());
        }
        let maps = PinnedMaps::open(&dir)?;
        let meta = maps.meta()?;
        let link = PinnedLink::from_pin(dir.join(LINK_PIN))
            .ok()
            .map(FdLink::from)
            .and_then(|l| l.info().ok());
        out.push(InterfaceStatus {
            interface: name,
            attached: link.is_some(),
            link_id: link.as_ref().map(|l| l.id()),
            program_id: link.as_ref().map(|l| l.program_id()),
            ifindex: meta.ifindex,
            mode: RunningMode::from_abi(meta.xdp_mode),
            addresses: maps.addresses()?,
            counters: maps.counters()?,
        });
    }
    Ok(out)
}

/// The addresses of `interface` in the calling thread's network namespace
/// (IPv6 link-local ones left out: no tunnel is addressed to them).
pub fn interface_addresses(interface: &str) -> Result<Vec<IpAddr>> {
    let mut out = Vec::new();
    // SAFETY: getifaddrs fills a list we walk read-only and free once.
    unsafe {
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut head) != 0 {
            return Err(std::io::Error::last_os_error()).context("getifaddrs");
        }
        let mut cur = head;
        while !cur.is_null() {
            let ifa = &*cur;
            cur = ifa.ifa_next;
            if ifa.ifa_addr.is_null() {
                continue;
            }
            let name = std::ffi::CStr::from_ptr(ifa.ifa_name).to_string_lossy();
            if name != interface {
                continue;
            }
            match (*ifa.ifa_addr).sa_family as i32 {
                libc::AF_INET => {
                    let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                    out.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr))));
                }
                libc::AF_INET6 => {
                    let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                    let a = Ipv6Addr::from(sa.sin6_addr.s6_addr);
                    if a.segments()[0] & 0xffc0 != 0xfe80 {
                        out.push(IpAddr::V6(a));
                    }
                }
                _ => {}
            }
        }
        libc::freeifaddrs(head);
    }
    out.sort();
    out.dedup();
    Ok(out)
}
