//! Loading the BPF objects (maps pinned by name in one directory, so both
//! programs share them and they outlive rivorad), attaching them to an
//! interface, and running them under BPF_PROG_TEST_RUN for packet tests.

use std::path::{Path, PathBuf};

use aya::programs::links::{FdLink, PinnedLink};
use aya::programs::tc::{SchedClassifierLink, TcAttachOptions};
use aya::programs::xdp::XdpLink;
use aya::programs::{
    LinkOrder, SchedClassifier, TcAttachType, TestRun, TestRunOptions, Xdp, XdpMode,
};
use aya::{Ebpf, EbpfLoader};

use crate::Error;
use crate::compat;
use crate::holder;
use crate::maps::Maps;
use crate::objects;
use crate::stages;
use rivora_abi as abi;

/// Where and how big: the settings that shape the loaded objects.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// bpffs directory the maps are pinned in (one per rivorad instance).
    pub pin_dir: PathBuf,
    /// Length of the shared Maglev table (a prime).
    pub maglev_table_size: u32,
    /// Capacity of each flow table (connection_affinity_map(6),
    /// nat_reverse_map(6)): how many concurrent flows per family keep their
    /// state before the least recently used are evicted.
    pub flow_table_size: u32,
    /// When the pinned maps cannot be adopted (another ABI version or
    /// layout): remove them and start empty instead of refusing. Established
    /// flows through NAT VIPs lose their state.
    pub reset_incompatible: bool,
    /// Load `xdp_ingress.o` and `tc_nat.o` from this directory instead of
    /// the objects built into this binary (testing a rebuilt program, or
    /// staging an upgrade of the programs alone).
    pub object_dir: Option<PathBuf>,
}

/// What loading found in the pin directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadOutcome {
    /// No maps were pinned: empty maps were created.
    Fresh,
    /// Compatible pinned maps were reused: their content is to be adopted.
    Reused,
    /// Incompatible pinned maps were removed (reset_incompatible); why.
    Reset(Vec<String>),
}

/// Names of the maps the objects pin besides the classifier's
/// ([`crate::classifier::maps::CLS_MAP_NAMES`]); [`map_names`] has them all.
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
    "nat_endpoint_map",
    "nat_endpoint_map6",
    "flow_guard_config_map",
    "nat_backend_filter_map",
    "flow_filter_map",
    "flow_filter_ctl_map",
    "stats_map",
    "backend_stats_map",
    "drop_stats_map",
    "rivora_meta",
    "iface_mac_map",
    "tunnel_config_map",
    "vip_range_map",
    "vip_range_map6",
    "frag_map",
    "frag_map6",
    "frag_rev_map",
    "frag_rev_map6",
    "rl_config_map",
    "svc_rl_config_map",
    "rl_buckets_map",
    "rl_buckets_map6",
    "vip_index_map",
    "vip_index_ctl_map",
    "src_range_map",
    "src_range_map6",
    "vip_drop_stats_map",
    "syn_hint_map",
    "svc_affinity_timeout_map",
    "client_affinity_map",
    "client_affinity_map6",
    "snat_config_map",
    "snat_flow_map",
    "snat_flow_map6",
    "snat_rev_map",
    "snat_rev_map6",
    "snat_stats_map",
];

/// Pin name prefixes of the persistent links (`--persist-datapath`).
pub const LINK_PIN_PREFIXES: &[&str] = &["link_xdp_", "link_tcx_egress_"];

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
    /// Whether tc_nat is attached (TCX egress); its IDs are 0 otherwise.
    pub egress: bool,
    /// Why that mode was chosen (logged by rivorad).
    pub xdp_mode_reason: String,
    /// Kernel ID of the XDP program.
    pub xdp_program_id: u32,
    /// Kernel ID of the TCX egress program.
    pub tc_program_id: u32,
    /// Kernel ID of the XDP link.
    pub xdp_link_id: u32,
    /// Kernel ID of the TCX link.
    pub tc_link_id: u32,
    /// The programs were swapped into links pinned by an earlier rivorad
    /// (atomic replacement: no moment without a program).
    pub replaced_pinned_links: bool,
    /// The links are pinned and outlive this process (`--persist-datapath`).
    pub persistent: bool,
    /// When the kernel loaded the XDP program (Unix seconds).
    pub xdp_loaded_at_unix: u64,
    /// When the kernel loaded the TCX program (Unix seconds).
    pub tc_loaded_at_unix: u64,
}

/// How to attach.
#[derive(Clone, Debug)]
pub struct AttachOptions {
    /// Interface facing the clients.
    pub interface: String,
    /// Requested XDP mode (applies to a fresh attach; a pinned link keeps its
    /// mode).
    pub xdp_mode: XdpModeRequest,
    /// Pin the links so the datapath keeps forwarding while rivorad is down.
    pub persist: bool,
    /// Load and attach tc_nat (TCX egress) now. Only NAT VIPs need it (it
    /// puts the VIP back on their replies): a node with only DSR VIPs
    /// neither loads nor attaches it, and [`Datapath::attach_egress`] adds
    /// it when the first NAT VIP comes. An egress link pinned by an earlier
    /// start is taken over whatever this says.
    pub egress: bool,
}

/// A link this process keeps: owned ones detach when dropped, pinned ones
/// live on in bpffs.
enum HeldLink {
    Owned(#[allow(dead_code)] FdLink),
    Pinned(#[allow(dead_code)] PinnedLink),
}

/// The loaded programs. Dropping it detaches whatever it attached, except
/// pinned links, which keep forwarding with the last programs.
pub struct Datapath {
    xdp: Ebpf,
    tc: Ebpf,
    /// tc_nat went through the verifier (it is loaded only when needed).
    tc_loaded: bool,
    pin_dir: PathBuf,
    attachment: Option<Attachment>,
    links: Vec<HeldLink>,
}

impl Datapath {
    /// Loads both objects with their maps pinned in `opts.pin_dir` (created
    /// if missing), reusing maps an earlier rivorad pinned there when they
    /// are compatible. Refuses incompatible ones unless told to reset them.
    /// Returns the programs, the typed map handles and what was found.
    pub fn load(opts: &LoadOptions) -> Result<(Datapath, Maps, LoadOutcome), Error> {
        std::fs::create_dir_all(&opts.pin_dir).map_err(|e| Error::Io {
            what: format!("create pin directory {}", opts.pin_dir.display()),
            source: e,
        })?;
        let mut upgrade_from = None;
        let sizes = compat::TableSizes {
            maglev_table: opts.maglev_table_size,
            flow_table: opts.flow_table_size,
        };
        let outcome = match compat::inspect(&opts.pin_dir, &sizes) {
            compat::PinnedState::Empty => LoadOutcome::Fresh,
            compat::PinnedState::Compatible => LoadOutcome::Reused,
            compat::PinnedState::Upgradable(from) => {
                upgrade_from = Some(from);
                LoadOutcome::Reused
            }
            compat::PinnedState::Incompatible(problems) if opts.reset_incompatible => {
                remove_map_pins(&opts.pin_dir)?;
                LoadOutcome::Reset(problems)
            }
            compat::PinnedState::Incompatible(problems) => {
                return Err(Error::Incompatible {
                    pin_dir: opts.pin_dir.clone(),
                    problems,
                });
            }
        };
        let load = |bytes: &[u8], what: &'static str| -> Result<Ebpf, Error> {
            let mut loader = EbpfLoader::new();
            loader
                .default_map_pin_directory(&opts.pin_dir)
                .map_max_entries("maglev_table", opts.maglev_table_size);
            for name in compat::FLOW_TABLES.iter().chain(&compat::SNAT_TABLES) {
                loader.map_max_entries(name, opts.flow_table_size);
            }
            loader.map_max_entries(
                "flow_filter_map",
                2 * compat::flow_filter_words(opts.flow_table_size),
            );
            loader.load(bytes).map_err(|e| Error::Load {
                what,
                source: Box::new(e),
            })
        };
        // A start that fails from here on must not leave the pins it created
        // (pins it found belong to a running datapath and stay).
        let loaded = (|| -> Result<(Ebpf, Ebpf), Error> {
            let (mut xdp, tc) = match &opts.object_dir {
                None => (
                    load(objects::XDP_INGRESS, "xdp_ingress object")?,
                    load(objects::TC_NAT, "tc_nat object")?,
                ),
                Some(dir) => {
                    let read = |name: &str| {
                        std::fs::read(dir.join(name)).map_err(|e| Error::Io {
                            what: format!("read {}", dir.join(name).display()),
                            source: e,
                        })
                    };
                    (
                        load(&read("xdp_ingress.o")?, "xdp_ingress object")?,
                        load(&read("tc_nat.o")?, "tc_nat object")?,
                    )
                }
            };
            {
                let prog: &mut Xdp = program(&mut xdp, "xdp_ingress")?;
                prog.load().map_err(|e| Error::Program {
                    name: "xdp_ingress",
                    source: Box::new(e),
                })?;
            }
            // Before anything can run xdp_ingress: a stage it jumps to
            // must be there.
            stages::fill(&mut xdp)?;
            // tc_nat is parsed (its maps are the same pins) but loaded
            // only when attached: see AttachOptions::egress.
            Ok((xdp, tc))
        })();
        let (mut xdp, tc) = match loaded {
            Ok(v) => v,
            Err(e) => {
                if outcome != LoadOutcome::Reused {
                    let _ = remove_pins(&opts.pin_dir);
                }
                return Err(e);
            }
        };
        let mut maps = Maps::take_from(&mut xdp)?;
        if let Some(from) = upgrade_from {
            // The added maps were created (empty) and pinned by the load;
            // the rest are the earlier version's, adopted as they are.
            let mut meta = maps.meta.get(&0, 0).map_err(|e| Error::Map {
                map: "rivora_meta",
                source: e,
            })?;
            meta.abi_version = abi::ABI_VERSION;
            maps.meta.set(0, meta, 0).map_err(|e| Error::Map {
                map: "rivora_meta",
                source: e,
            })?;
            tracing::info!(
                from,
                to = abi::ABI_VERSION,
                "upgraded the pinned maps in place: the maps this ABI version adds were created empty, the rest adopted"
            );
        }
        // The flow filter: exact at once over empty tables; otherwise kept
        // as the earlier start left it, or (a map this load added) not
        // trusted until rebuilt (flow_filter.rs).
        if outcome == LoadOutcome::Reused {
            maps.flow_filter.init_adopted()?;
        } else {
            maps.flow_filter.init_fresh()?;
        }
        if outcome != LoadOutcome::Reused {
            let meta = abi::Meta {
                abi_version: abi::ABI_VERSION,
                maglev_table_size: opts.maglev_table_size,
                ..Default::default()
            };
            maps.meta.set(0, meta, 0).map_err(|e| Error::Map {
                map: "rivora_meta",
                source: e,
            })?;
        }
        let datapath = Datapath {
            xdp,
            tc,
            tc_loaded: false,
            pin_dir: opts.pin_dir.clone(),
            attachment: None,
            links: Vec::new(),
        };
        Ok((datapath, maps, outcome))
    }

    /// The pin directory in use.
    pub fn pin_dir(&self) -> &Path {
        &self.pin_dir
    }

    /// Why the datapath does not forward on its interface now (None: it does): the XDP link
    /// was detached behind rivorad's back, or is gone. Read from the kernel on every call.
    ///
    /// Why: a node whose XDP program runs nowhere serves nothing; the announcers use this to
    /// stop attracting traffic to it.
    pub fn xdp_problem(&self) -> Option<String> {
        let a = self.attachment.as_ref()?;
        match crate::linkinfo::link_ifindex(a.xdp_link_id) {
            Ok(Some(i)) if i == a.ifindex => None,
            Ok(Some(0)) => Some(format!(
                "the XDP link {} on {} was detached",
                a.xdp_link_id, a.interface
            )),
            Ok(Some(i)) => Some(format!(
                "the XDP link {} is on interface index {i}, not {} ({})",
                a.xdp_link_id, a.ifindex, a.interface
            )),
            Ok(None) => Some(format!(
                "the XDP link {} on {} no longer exists",
                a.xdp_link_id, a.interface
            )),
            Err(e) => Some(format!(
                "cannot read the XDP link {} on {}: {e}",
                a.xdp_link_id, a.interface
            )),
        }
    }

    /// Current attachment, if any.
    pub fn attachment(&self) -> Option<&Attachment> {
        self.attachment.as_ref()
    }

    /// Attaches xdp_ingress and tc_nat (TCX egress) to the interface. When
    /// an earlier rivorad left pinned links for it, the new programs replace
    /// the old ones on those links atomically; otherwise fresh links are
    /// created in the requested mode. With `persist` the links are (kept)
    /// pinned, otherwise any pins are removed so the links die with us.
    pub fn attach(&mut self, opts: &AttachOptions) -> Result<&Attachment, Error> {
        let interface = opts.interface.as_str();
        let ifindex = ifindex(interface)?;
        let xdp_pin = self
            .pin_dir
            .join(format!("{}{interface}", LINK_PIN_PREFIXES[0]));
        // The stage array outlives this process with the program (see
        // stages.rs), pinned before the program can run on the interface.
        // If attaching fails below, the pin stays until the next start's
        // clean-up: the XDP link may already run this program.
        let own_id = program::<Xdp>(&mut self.xdp, "xdp_ingress")?
            .info()
            .map_err(|e| Error::Program {
                name: "xdp_ingress",
                source: Box::new(e),
            })?
            .id();
        let stage_pin = stages::pin(&self.xdp, &self.pin_dir, own_id)?;
        let xdp_replaced = self.attach_xdp_and_tc(opts, interface, ifindex, &xdp_pin)?;
        // The previous program's array only after the link update and a
        // grace period; arrays of loads that never got attached now.
        stages::retire_others(&self.pin_dir, stage_pin, xdp_replaced)?;
        Ok(self.attachment.as_ref().unwrap())
    }

    /// The body of [`Datapath::attach`]: attaches (or swaps) the XDP link
    /// and TCX egress and records the attachment. Returns whether the XDP
    /// link was an earlier start's pinned one (the programs swapped).
    fn attach_xdp_and_tc(
        &mut self,
        opts: &AttachOptions,
        interface: &str,
        ifindex: u32,
        xdp_pin: &Path,
    ) -> Result<bool, Error> {
        let xdp_pin = xdp_pin.to_path_buf();
        let tc_pin = self
            .pin_dir
            .join(format!("{}{interface}", LINK_PIN_PREFIXES[1]));
        let attach_err = |what: String| {
            move |e: aya::programs::ProgramError| Error::Attach {
                what,
                cause: holder::flatten(&e),
            }
        };

        // XDP
        let xdp: &mut Xdp = program(&mut self.xdp, "xdp_ingress")?;
        let (xdp_link, mode, reason, xdp_replaced) = if xdp_pin.exists() {
            let old = open_pinned(&xdp_pin)?;
            let link = XdpLink::try_from(old).map_err(|e| link_err(&xdp_pin, e))?;
            let id = xdp.attach_to_link(link).map_err(attach_err(format!(
                "xdp_ingress onto pinned link {}",
                xdp_pin.display()
            )))?;
            let link: FdLink = xdp
                .take_link(id)
                .map_err(attach_err("take xdp link".into()))?
                .try_into()
                .map_err(|e| link_err(&xdp_pin, e))?;
            let (mode, reason) = match pinned_xdp_mode(&self.pin_dir) {
                Some(m) => (m, "kept from the pinned link".to_string()),
                None => (
                    XdpModeActual::Generic,
                    "pinned link (mode not recorded)".to_string(),
                ),
            };
            (link, mode, reason, true)
        } else {
            let (mode, reason) = match opts.xdp_mode {
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
            let flags = |m| match m {
                XdpModeActual::Native => XdpMode::Driver,
                XdpModeActual::Generic => XdpMode::Skb,
            };
            let (id, mode, reason) = match xdp.attach(interface, flags(mode)) {
                Ok(id) => (id, mode, reason),
                Err(e)
                    if opts.xdp_mode == XdpModeRequest::Auto && mode == XdpModeActual::Native =>
                {
                    let id = xdp.attach(interface, XdpMode::Skb).map_err(|e| {
                        xdp_attach_error(interface, ifindex, XdpModeActual::Generic, &e)
                    })?;
                    (
                        id,
                        XdpModeActual::Generic,
                        format!("driver refused native XDP ({e}); fell back to generic"),
                    )
                }
                Err(e) => return Err(xdp_attach_error(interface, ifindex, mode, &e)),
            };
            let link: FdLink = xdp
                .take_link(id)
                .map_err(attach_err("take xdp link".into()))?
                .try_into()
                .map_err(|e| link_err(&xdp_pin, e))?;
            (link, mode, reason, false)
        };
        let (xdp_program_id, xdp_loaded_at_unix) = prog_facts(xdp.info());

        let xdp_link_id = xdp_link.info().map(|i| i.id()).unwrap_or(0);
        self.links
            .push(hold(xdp_link, &xdp_pin, opts.persist, xdp_replaced)?);

        // TCX egress: for NAT VIPs, or an earlier start's pinned link.
        let tc = if opts.egress || tc_pin.exists() {
            Some(self.attach_tc(interface, opts.persist)?)
        } else {
            None
        };
        if opts.persist && !xdp_replaced {
            record_xdp_mode(&self.pin_dir, mode)?;
        }
        let t = tc.unwrap_or_default();
        self.attachment = Some(Attachment {
            interface: interface.to_string(),
            ifindex,
            xdp_mode: mode,
            egress: tc.is_some(),
            xdp_mode_reason: reason,
            xdp_program_id,
            tc_program_id: t.program_id,
            xdp_link_id,
            tc_link_id: t.link_id,
            replaced_pinned_links: xdp_replaced || t.replaced,
            persistent: opts.persist,
            xdp_loaded_at_unix,
            tc_loaded_at_unix: t.loaded_at_unix,
        });
        Ok(xdp_replaced)
    }

    /// Loads and attaches tc_nat (TCX egress) to the attached interface,
    /// if it is not yet: what a node that started with only DSR VIPs needs
    /// before its first NAT VIP is programmed. Pinned like the XDP link
    /// when the datapath is persistent.
    pub fn attach_egress(&mut self) -> Result<&Attachment, Error> {
        let (interface, persist) = match &self.attachment {
            None => return Err(Error::Invalid("attach_egress before attach".into())),
            Some(a) if a.egress => return Ok(self.attachment.as_ref().unwrap()),
            Some(a) => (a.interface.clone(), a.persistent),
        };
        let t = self.attach_tc(&interface, persist)?;
        let a = self.attachment.as_mut().expect("checked above");
        a.egress = true;
        a.tc_program_id = t.program_id;
        a.tc_link_id = t.link_id;
        a.tc_loaded_at_unix = t.loaded_at_unix;
        Ok(a)
    }

    fn load_tc(&mut self) -> Result<(), Error> {
        if !self.tc_loaded {
            let prog: &mut SchedClassifier = program(&mut self.tc, "tc_nat")?;
            prog.load().map_err(|e| Error::Program {
                name: "tc_nat",
                source: Box::new(e),
            })?;
            self.tc_loaded = true;
        }
        Ok(())
    }

    /// Loads tc_nat if needed and attaches it to `interface`'s TCX egress,
    /// onto the pinned link when an earlier start left one.
    fn attach_tc(&mut self, interface: &str, persist: bool) -> Result<TcAttached, Error> {
        self.load_tc()?;
        let tc_pin = self
            .pin_dir
            .join(format!("{}{interface}", LINK_PIN_PREFIXES[1]));
        let attach_err = |what: String| {
            move |e: aya::programs::ProgramError| Error::Attach {
                what,
                cause: holder::flatten(&e),
            }
        };
        let tc: &mut SchedClassifier = program(&mut self.tc, "tc_nat")?;
        let (tc_link, replaced) = if tc_pin.exists() {
            let old = open_pinned(&tc_pin)?;
            let link = SchedClassifierLink::try_from(old).map_err(|e| link_err(&tc_pin, e))?;
            let id = tc.attach_to_link(link).map_err(attach_err(format!(
                "tc_nat onto pinned link {}",
                tc_pin.display()
            )))?;
            let link: FdLink = tc
                .take_link(id)
                .map_err(attach_err("take tcx link".into()))?
                .try_into()
                .map_err(|e| link_err(&tc_pin, e))?;
            (link, true)
        } else {
            let id = tc
                .attach_with_options(
                    interface,
                    TcAttachType::Egress,
                    TcAttachOptions::TcxOrder(LinkOrder::default()),
                )
                .map_err(attach_err(format!("tc_nat (tcx egress) on {interface}")))?;
            let link: FdLink = tc
                .take_link(id)
                .map_err(attach_err("take tcx link".into()))?
                .try_into()
                .map_err(|e| link_err(&tc_pin, e))?;
            (link, false)
        };
        let (program_id, loaded_at_unix) = prog_facts(tc.info());
        let link_id = tc_link.info().map(|i| i.id()).unwrap_or(0);
        self.links.push(hold(tc_link, &tc_pin, persist, replaced)?);
        Ok(TcAttached {
            program_id,
            link_id,
            loaded_at_unix,
            replaced,
        })
    }

    /// Runs xdp_ingress once on `frame` (BPF_PROG_TEST_RUN): the verdict and
    /// the frame as the program left it.
    pub fn run_xdp(&mut self, frame: &[u8]) -> Result<(u32, Vec<u8>), Error> {
        let prog: &mut Xdp = program(&mut self.xdp, "xdp_ingress")?;
        run(prog, frame)
    }

    /// Runs xdp_ingress once on `frame` as if it arrived on interface
    /// `ifindex` of the calling thread's network namespace (so FIB lookups
    /// see that namespace's routes and neighbours).
    pub fn run_xdp_on(&mut self, frame: &[u8], ifindex: u32) -> Result<(u32, Vec<u8>), Error> {
        let prog: &mut Xdp = program(&mut self.xdp, "xdp_ingress")?;
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex, rx_queue_index, egress_ifindex
        // The kernel wants data_end = the frame's length (no metadata).
        let mut ctx = [0u8; 24];
        ctx[4..8].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
        ctx[12..16].copy_from_slice(&ifindex.to_ne_bytes());
        let mut out = vec![0u8; frame.len() + 512];
        let res = {
            let opts = TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ctx_in: Some(&ctx),
                ..TestRunOptions::new()
            };
            prog.test_run(opts)
                .map_err(|e| Error::TestRun(Box::new(e)))?
        };
        out.truncate(res.data_size_out as usize);
        Ok((res.return_value, out))
    }

    /// Runs tc_nat once on `frame`: the TCX verdict and the resulting frame.
    pub fn run_tc(&mut self, frame: &[u8]) -> Result<(i32, Vec<u8>), Error> {
        self.load_tc()?;
        let prog: &mut SchedClassifier = program(&mut self.tc, "tc_nat")?;
        run(prog, frame).map(|(v, out)| (v as i32, out))
    }

    /// Removes every map and link pin and the pin directory itself (if
    /// then empty). Used on a clean stop without `--persist-datapath`: maps
    /// and links stay alive while this process holds them.
    pub fn unpin_all(&self) -> Result<(), Error> {
        remove_pins(&self.pin_dir)
    }
}

/// A refused fresh attach of xdp_ingress, with the holder of the hook and
/// the way out when the kernel says it is occupied (EBUSY, EEXIST).
fn xdp_attach_error(
    interface: &str,
    ifindex: u32,
    mode: XdpModeActual,
    e: &aya::programs::ProgramError,
) -> Error {
    let mut cause = holder::flatten(e);
    let wanted = match mode {
        XdpModeActual::Native => holder::HookMode::Native,
        XdpModeActual::Generic => holder::HookMode::Generic,
    };
    if let Some(why) = holder::explain_busy(
        interface,
        ifindex,
        holder::errno_of(e),
        wanted,
        holder::Attacher::Rivorad,
    ) {
        cause = format!("{cause}: {why}");
    }
    Error::Attach {
        what: format!("xdp_ingress ({}) on {interface}", mode.as_str()),
        cause,
    }
}

/// What attaching tc_nat produced.
#[derive(Clone, Copy, Debug, Default)]
struct TcAttached {
    program_id: u32,
    link_id: u32,
    loaded_at_unix: u64,
    /// Swapped into a pinned link an earlier start left.
    replaced: bool,
}

/// Keeps `link`: pinned at `pin` when `persist` (already pinned when
/// `replaced`), otherwise owned, and any old pin removed so the link dies
/// with this process.
fn hold(link: FdLink, pin: &Path, persist: bool, replaced: bool) -> Result<HeldLink, Error> {
    Ok(match (persist, replaced) {
        // Already pinned: our fd is an extra reference.
        (true, true) => HeldLink::Owned(link),
        (true, false) => HeldLink::Pinned(link.pin(pin).map_err(|e| Error::Io {
            what: format!("pin link {}", pin.display()),
            source: std::io::Error::other(e.to_string()),
        })?),
        (false, true) => {
            // Not persistent: drop the pin so the link dies with us.
            std::fs::remove_file(pin).map_err(|e| Error::Io {
                what: format!("unpin link {}", pin.display()),
                source: e,
            })?;
            HeldLink::Owned(link)
        }
        (false, false) => HeldLink::Owned(link),
    })
}

/// Kernel id and load time (Unix seconds) of a loaded program.
fn prog_facts(info: Result<aya::programs::ProgramInfo, aya::programs::ProgramError>) -> (u32, u64) {
    match info {
        Ok(i) => {
            let at = i
                .loaded_at()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs())
                .unwrap_or(0);
            (i.id(), at)
        }
        Err(_) => (0, 0),
    }
}

fn open_pinned(path: &Path) -> Result<FdLink, Error> {
    PinnedLink::from_pin(path)
        .map(FdLink::from)
        .map_err(|e| link_err(path, e))
}

fn link_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io {
        what: format!("link {}", path.display()),
        source: std::io::Error::other(e.to_string()),
    }
}

fn meta_array(pin_dir: &Path) -> Result<aya::maps::Array<aya::maps::MapData, abi::Meta>, Error> {
    let data =
        aya::maps::MapData::from_pin(pin_dir.join("rivora_meta")).map_err(|e| Error::Map {
            map: "rivora_meta",
            source: e,
        })?;
    aya::maps::Map::Array(data)
        .try_into()
        .map_err(|e| Error::Map {
            map: "rivora_meta",
            source: e,
        })
}

fn pinned_xdp_mode(pin_dir: &Path) -> Option<XdpModeActual> {
    match meta_array(pin_dir).ok()?.get(&0, 0).ok()?.xdp_mode {
        abi::xdp_mode::NATIVE => Some(XdpModeActual::Native),
        abi::xdp_mode::GENERIC => Some(XdpModeActual::Generic),
        _ => None,
    }
}

fn record_xdp_mode(pin_dir: &Path, mode: XdpModeActual) -> Result<(), Error> {
    let mut meta = meta_array(pin_dir)?;
    let mut m = meta.get(&0, 0).map_err(|e| Error::Map {
        map: "rivora_meta",
        source: e,
    })?;
    m.xdp_mode = match mode {
        XdpModeActual::Native => abi::xdp_mode::NATIVE,
        XdpModeActual::Generic => abi::xdp_mode::GENERIC,
    };
    meta.set(0, m, 0).map_err(|e| Error::Map {
        map: "rivora_meta",
        source: e,
    })
}

/// Removes the pins of every Rivora map and link in `pin_dir` and its stage
/// arrays, then the directory if it is empty. Missing pins are not an error.
pub fn remove_pins(pin_dir: &Path) -> Result<(), Error> {
    remove_link_pins(pin_dir)?;
    remove_map_pins(pin_dir)?;
    stages::remove_pins_except(pin_dir, None)?;
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

/// Names of every map the objects pin, for clean-up and inspection.
pub fn map_names() -> impl Iterator<Item = &'static str> {
    MAP_NAMES
        .iter()
        .chain(crate::classifier::maps::CLS_MAP_NAMES)
        .copied()
}

/// Removes the pins of the persistent links in `pin_dir`: a link whose last
/// reference was its pin is detached.
pub fn remove_link_pins(pin_dir: &Path) -> Result<Vec<String>, Error> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(pin_dir) else {
        return Ok(removed);
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if LINK_PIN_PREFIXES.iter().any(|p| name.starts_with(p)) {
            std::fs::remove_file(entry.path()).map_err(|e| Error::Io {
                what: format!("remove link pin {}", entry.path().display()),
                source: e,
            })?;
            removed.push(name);
        }
    }
    Ok(removed)
}

/// Removes the pins of every Rivora map in `pin_dir`.
pub fn remove_map_pins(pin_dir: &Path) -> Result<(), Error> {
    for name in map_names() {
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
    Ok(())
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

/// The index of `interface` in the calling thread's network namespace.
pub fn interface_index(interface: &str) -> Result<u32, Error> {
    ifindex(interface)
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

/// Where `interface` sits in a bridge, as sysfs says when it describes this
/// very interface (sysfs shows the network namespace it was mounted in,
/// which is not ours when the process moved into a namespace with setns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BridgeRole {
    /// The interface is a bridge.
    Bridge,
    /// The interface is a port of a bridge.
    Port,
}

/// The bridge role of `interface`, or None (not in a bridge, or sysfs
/// belongs to another network namespace).
pub fn bridge_role(interface: &str) -> Option<BridgeRole> {
    let sys = Path::new("/sys/class/net").join(interface);
    let ours = std::fs::read_to_string(sys.join("ifindex"))
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .is_some_and(|i| ifindex(interface).is_ok_and(|j| i == j));
    if !ours {
        None
    } else if sys.join("bridge").exists() {
        Some(BridgeRole::Bridge)
    } else if sys.join("brport").exists() {
        Some(BridgeRole::Port)
    } else {
        None
    }
}

/// What `--xdp-mode auto` picks for `interface` and why (the reason rivorad
/// logs), before any attach: the fallback from native to generic when the
/// driver refuses happens only at attach time.
pub fn auto_xdp_mode(interface: &str) -> (XdpModeActual, String) {
    auto_mode(interface)
}

/// The `auto` rule: generic on veth, on bridges and on bridge ports (XDP_TX
/// out of a veth does not reliably cross a bridge, and veth's native XDP
/// needs XDP on the peer too); native on everything else, with a fallback to
/// generic if the driver refuses.
fn auto_mode(interface: &str) -> (XdpModeActual, String) {
    match bridge_role(interface) {
        Some(BridgeRole::Bridge) => {
            return (
                XdpModeActual::Generic,
                format!("auto: {interface} is a bridge"),
            );
        }
        Some(BridgeRole::Port) => {
            return (
                XdpModeActual::Generic,
                format!("auto: {interface} is a bridge port"),
            );
        }
        None => {}
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

/// The hardware address of `interface` (SIOCGIFHWADDR), read in the calling
/// thread's network namespace (sysfs may show another one).
pub fn interface_mac(interface: &str) -> Option<[u8; 6]> {
    #[repr(C)]
    struct IfReqHw {
        name: [u8; libc::IFNAMSIZ],
        family: u16,
        data: [u8; 14],
        _pad: [u8; 8],
    }
    let bytes = interface.as_bytes();
    if bytes.len() >= libc::IFNAMSIZ {
        return None;
    }
    let mut req = IfReqHw {
        name: [0; libc::IFNAMSIZ],
        family: 0,
        data: [0; 14],
        _pad: [0; 8],
    };
    req.name[..bytes.len()].copy_from_slice(bytes);
    // SAFETY: plain socket + ioctl with a correctly sized, live buffer.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let rc = libc::ioctl(fd, libc::SIOCGIFHWADDR, &mut req);
        libc::close(fd);
        if rc != 0 {
            return None;
        }
    }
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&req.data[..6]);
    Some(mac)
}

/// The driver of `interface` in the calling thread's network namespace
/// (the ETHTOOL_GDRVINFO ioctl, what `ethtool -i` prints), or None.
pub fn interface_driver(interface: &str) -> Option<String> {
    driver_name(interface)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Clean-up must know every map the objects pin: a name missing here
    /// is a pin left behind (and a pin directory that cannot be removed)
    /// after every stop without --persist-datapath.
    #[test]
    fn map_names_are_every_pinned_map() {
        let mut pinned: Vec<&str> =
            crate::compat::expected_maps(&crate::compat::TableSizes::defaults())
                .iter()
                .map(|m| m.name)
                .collect();
        let mut named: Vec<&str> = map_names().collect();
        pinned.sort_unstable();
        named.sort_unstable();
        assert_eq!(named, pinned);
    }
}
