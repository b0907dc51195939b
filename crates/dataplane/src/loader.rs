//! Loading the BPF objects (maps pinned by name in one directory, so both
//! programs share them and they outlive rivorad), attaching them to an
//! interface, and running them under BPF_PROG_TEST_RUN for packet tests.

use std::path::{Path, PathBuf};

use aya::programs::tc::TcAttachOptions;
use aya::programs::{
    LinkOrder, SchedClassifier, TcAttachType, TestRun, TestRunOptions, Xdp, XdpMode,
};
use aya::{Ebpf, EbpfLoader};

use crate::Error;
use crate::maps::Maps;
use crate::objects;

/// Where and how big: the settings that shape the loaded objects.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// bpffs directory the maps are pinned in (one per rivorad instance).
    pub pin_dir: PathBuf,
    /// Length of the shared Maglev table (a prime).
    pub maglev_table_size: u32,
}

/// Names of every map the objects pin, for clean-up.
pub const MAP_NAMES: &[&str] = &[
    "vip_map",
    "vip_map6",
    "service_config_map",
    "maglev_table",
    "backend_map",
    "backend_map6",
    "backend_health_map",
    "connection_affinity_map",
    "connection_affinity_map6",
    "nat_reverse_map",
    "nat_reverse_map6",
    "stats_map",
    "drop_stats_map",
];

/// How the operator asked for XDP to be attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpModeRequest {
    /// Native where the driver runs XDP well, generic on veth and bridges.
    Auto,
    /// Driver mode; fails if the driver has no XDP support.
    Native,
    /// Generic (skb) mode: works everywhere, slower.
    Generic,
}

/// The mode XDP actually runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpModeActual {
    /// In the driver.
    Native,
    /// In the generic skb path.
    Generic,
}

impl XdpModeActual {
    /// Name for logs and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            XdpModeActual::Native => "native",
            XdpModeActual::Generic => "generic",
        }
    }
}

/// What got attached where.
#[derive(Clone, Debug)]
pub struct Attachment {
    /// Interface name.
    pub interface: String,
    /// Interface index.
    pub ifindex: u32,
    /// XDP mode in effect.
    pub xdp_mode: XdpModeActual,
    /// Why that mode was chosen (logged by rivorad).
    pub xdp_mode_reason: String,
    /// Kernel ID of the XDP program.
    pub xdp_program_id: u32,
    /// Kernel ID of the TCX egress program.
    pub tc_program_id: u32,
}

/// The loaded programs. Dropping it detaches whatever it attached.
pub struct Datapath {
    xdp: Ebpf,
    tc: Ebpf,
    pin_dir: PathBuf,
    attachment: Option<Attachment>,
}

impl Datapath {
    /// Loads both objects with their maps pinned in `opts.pin_dir` (created
    /// if missing). Returns the programs and the typed map handles.
    pub fn load(opts: &LoadOptions) -> Result<(Datapath, Maps), Error> {
        std::fs::create_dir_all(&opts.pin_dir).map_err(|e| Error::Io {
            what: format!("create pin directory {}", opts.pin_dir.display()),
            source: e,
        })?;
        let load = |bytes: &[u8], what: &'static str| -> Result<Ebpf, Error> {
            EbpfLoader::new()
                .default_map_pin_directory(&opts.pin_dir)
                .map_max_entries("maglev_table", opts.maglev_table_size)
                .load(bytes)
                .map_err(|e| Error::Load {
                    what,
                    source: Box::new(e),
                })
        };
        let mut xdp = load(objects::XDP_INGRESS, "xdp_ingress object")?;
        let mut tc = load(objects::TC_NAT, "tc_nat object")?;
        {
            let prog: &mut Xdp = program(&mut xdp, "xdp_ingress")?;
            prog.load().map_err(|e| Error::Program {
                name: "xdp_ingress",
                source: Box::new(e),
            })?;
        }
        {
            let prog: &mut SchedClassifier = program(&mut tc, "tc_nat")?;
            prog.load().map_err(|e| Error::Program {
                name: "tc_nat",
                source: Box::new(e),
            })?;
        }
        let maps = Maps::take_from(&mut xdp)?;
        Ok((
            Datapath {
                xdp,
                tc,
                pin_dir: opts.pin_dir.clone(),
                attachment: None,
            },
            maps,
        ))
    }

    /// The pin directory in use.
    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    /// Current attachment, if any.
    pub fn attachment(&self) -> Option<&Attachment> {
        self.attachment.as_ref()
    }

    /// Attaches xdp_ingress (in the requested mode) and tc_nat (TCX egress)
    /// to `interface`.
    pub fn attach(
        &mut self,
        interface: &str,
        request: XdpModeRequest,
    ) -> Result<&Attachment, Error> {
        let ifindex = ifindex(interface)?;
        let (mode, reason) = match request {
            XdpModeRequest::Native => (
                XdpModeActual::Native,
                "requested with --xdp-mode native".to_string(),
            ),
            XdpModeRequest::Generic => (
                XdpModeActual::Generic,
                "requested with --xdp-mode generic".to_string(),
            ),
            XdpModeRequest::Auto => auto_mode(interface),
        };
        let xdp: &mut Xdp = program(&mut self.xdp, "xdp_ingress")?;
        let flags = match mode {
            XdpModeActual::Native => XdpMode::Driver,
            XdpModeActual::Generic => XdpMode::Skb,
        };
        let (mode, reason) = match xdp.attach(interface, flags) {
            Ok(_) => (mode, reason),
            Err(e) if request == XdpModeRequest::Auto && mode == XdpModeActual::Native => {
                xdp.attach(interface, XdpMode::Skb)
                    .map_err(|e| Error::Attach {
                        what: format!("xdp_ingress (generic) on {interface}"),
                        source: Box::new(e),
                    })?;
                (
                    XdpModeActual::Generic,
                    format!("driver refused native XDP ({e}); fell back to generic"),
                )
            }
            Err(e) => {
                return Err(Error::Attach {
                    what: format!("xdp_ingress ({}) on {interface}", mode.as_str()),
                    source: Box::new(e),
                });
            }
        };
        let xdp_program_id = xdp.info().map(|i| i.id()).unwrap_or(0);
        let tc: &mut SchedClassifier = program(&mut self.tc, "tc_nat")?;
        tc.attach_with_options(
            interface,
            TcAttachType::Egress,
            TcAttachOptions::TcxOrder(LinkOrder::default()),
        )
        .map_err(|e| Error::Attach {
            what: format!("tc_nat (tcx egress) on {interface}"),
            source: Box::new(e),
        })?;
        let tc_program_id = tc.info().map(|i| i.id()).unwrap_or(0);
        self.attachment = Some(Attachment {
            interface: interface.to_string(),
            ifindex,
            xdp_mode: mode,
            xdp_mode_reason: reason,
            xdp_program_id,
            tc_program_id,
        });
        Ok(self.attachment.as_ref().unwrap())
    }

    /// Runs xdp_ingress once on `frame` (BPF_PROG_TEST_RUN): the verdict and
    /// the frame as the program left it.
    pub fn run_xdp(&mut self, frame: &[u8]) -> Result<(u32, Vec<u8>), Error> {
        let prog: &mut Xdp = program(&mut self.xdp, "xdp_ingress")?;
        run(prog, frame)
    }

    /// Runs tc_nat once on `frame`: the TCX verdict and the resulting frame.
    pub fn run_tc(&mut self, frame: &[u8]) -> Result<(i32, Vec<u8>), Error> {
        let prog: &mut SchedClassifier = program(&mut self.tc, "tc_nat")?;
        run(prog, frame).map(|(v, out)| (v as i32, out))
    }

    /// Removes every map pin and the pin directory itself (if then empty).
    /// Used on a clean stop: maps stay alive while this process holds them.
    pub fn unpin_all(&self) -> Result<(), Error> {
        remove_pins(&self.pin_dir)
    }
}

/// Removes the pins of every Rivora map in `pin_dir`, then the directory if
/// it is empty. Missing pins are not an error.
pub fn remove_pins(pin_dir: &Path) -> Result<(), Error> {
    for name in MAP_NAMES {
        match std::fs::remove_file(pin_dir.join(name)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::Io {
                    what: format!("remove pin {}/{name}", pin_dir.display()),
                    source: e,
                });
            }
        }
    }
    match std::fs::remove_dir(pin_dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        // Something else lives there: leave it.
        Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) => Ok(()),
        Err(e) => Err(Error::Io {
            what: format!("remove {}", pin_dir.display()),
            source: e,
        }),
    }
}

fn program<'a, T>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut T, Error>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    let p = ebpf.program_mut(name).ok_or(Error::MissingProgram(name))?;
    p.try_into().map_err(|e| Error::Program {
        name,
        source: Box::new(e),
    })
}

fn run<P>(prog: &mut P, frame: &[u8]) -> Result<(u32, Vec<u8>), Error>
where
    P: for<'o> TestRun<Opts<'o> = TestRunOptions<'o>, Result = aya::programs::TestRunResult>,
{
    let mut out = vec![0u8; frame.len() + 512];
    let res = {
        let opts = TestRunOptions {
            data_in: Some(frame),
            data_out: Some(&mut out),
            ..TestRunOptions::new()
        };
        prog.test_run(opts)
            .map_err(|e| Error::TestRun(Box::new(e)))?
    };
    out.truncate(res.data_size_out as usize);
    Ok((res.return_value, out))
}

fn ifindex(interface: &str) -> Result<u32, Error> {
    let c =
        std::ffi::CString::new(interface).map_err(|_| Error::NoInterface(interface.to_string()))?;
    // SAFETY: valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        Err(Error::NoInterface(interface.to_string()))
    } else {
        Ok(idx)
    }
}

/// The `auto` rule: generic on veth, on bridges and on bridge ports (XDP_TX
/// out of a veth does not reliably cross a bridge, and veth's native XDP
/// needs XDP on the peer too); native on everything else, with a fallback to
/// generic if the driver refuses.
fn auto_mode(interface: &str) -> (XdpModeActual, String) {
    let sys = Path::new("/sys/class/net").join(interface);
    // sysfs shows the network namespace it was mounted in, which is not ours
    // when rivorad was moved into a namespace with setns: trust it only when
    // it describes this very interface.
    let ours = std::fs::read_to_string(sys.join("ifindex"))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .is_some_and(|i| ifindex(interface).is_ok_and(|j| i == j));
    if ours && sys.join("bridge").exists() {
        return (
            XdpModeActual::Generic,
            format!("auto: {interface} is a bridge"),
        );
    }
    if ours && sys.join("brport").exists() {
        return (
            XdpModeActual::Generic,
            format!("auto: {interface} is a bridge port"),
        );
    }
    match driver_name(interface) {
        Some(d) if d == "veth" => (XdpModeActual::Generic, "auto: driver veth".to_string()),
        Some(d) if d == "bridge" => (
            XdpModeActual::Generic,
            format!("auto: {interface} is a bridge"),
        ),
        Some(d) => (XdpModeActual::Native, format!("auto: driver {d}")),
        None => (XdpModeActual::Generic, "auto: driver unknown".to_string()),
    }
}

/// The driver name from the ETHTOOL_GDRVINFO ioctl (works for virtual
/// devices, which have no /sys/class/net/IF/device link).
fn driver_name(interface: &str) -> Option<String> {
    #[repr(C)]
    struct DrvInfo {
        cmd: u32,
        driver: [u8; 32],
        version: [u8; 32],
        fw_version: [u8; 32],
        bus_info: [u8; 32],
        erom_version: [u8; 32],
        reserved2: [u8; 12],
        n_priv_flags: u32,
        n_stats: u32,
        testinfo_len: u32,
        eedump_len: u32,
        regdump_len: u32,
    }
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        data: *mut DrvInfo,
        _pad: [u8; 16],
    }
    const ETHTOOL_GDRVINFO: u32 = 3;
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    let mut info: DrvInfo = unsafe { std::mem::zeroed() };
    info.cmd = ETHTOOL_GDRVINFO;
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: &mut info,
        _pad: [0; 16],
    };
    let bytes = interface.as_bytes();
    if bytes.len() >= libc::IFNAMSIZ {
        return None;
    }
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: plain socket + ioctl with correctly sized, live buffers.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let rc = libc::ioctl(fd, SIOCETHTOOL, &mut req);
        libc::close(fd);
        if rc != 0 {
            return None;
        }
    }
    let end = info.driver.iter().position(|&c| c == 0).unwrap_or(32);
    Some(String::from_utf8_lossy(&info.driver[..end]).into_owned())
}
