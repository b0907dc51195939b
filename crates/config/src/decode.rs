//! Turns the positioned YAML tree into a [`Config`], checking every rule and
//! collecting every problem instead of stopping at the first one.
//!
//! Each helper reports its own problems and returns `None` for a value it
//! could not accept; callers carry on with what they have so that later,
//! independent checks (duplicates, address families, limits) still run. The
//! result is only returned when no problem at all was found, so a partially
//! built value never escapes.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::error::FieldError;
use crate::yaml::{Kind, Node, Pos, Value};
use crate::{
    BackendConfig, BgpConfig, BgpPeer, CheckKind, Community, Config, DEFAULT_ANNOUNCE_INTERVAL,
    DEFAULT_BGP_PORT, DEFAULT_HOLD_TIME, HealthCheck, KEEP_DESTINATION_PORT, L2Announce,
    MAX_BACKENDS, MAX_MD5_PASSWORD, MAX_SYN_RATE, MAX_VIPS, Mode, NatForwarding, PortRange,
    Protocol, RateLimit, SessionAffinity, Settings, VipConfig,
};

/// The `classifier:` section (a child module, to share the helpers).
#[path = "classifier.rs"]
mod classifier;

const TOP_KEYS: &[&str] = &["vips", "settings", "bgp", "l2Announce", "classifier"];
/// How to say "no VIPs" on purpose, for the errors of a file that says
/// nothing: only an explicit empty list removes every VIP.
const NO_VIPS_HINT: &str = "write `vips: []` to run without VIPs (a file caught half-written \
     must not remove every VIP; replace the file atomically: write a temporary file, then rename it)";
const BGP_KEYS: &[&str] = &["localAS", "routerID", "peers"];
const PEER_KEYS: &[&str] = &[
    "address",
    "as",
    "port",
    "password",
    "holdTime",
    "nextHop",
    "localAddress",
];
const NEXT_HOP_KEYS: &[&str] = &["ipv4", "ipv6"];
const L2_KEYS: &[&str] = &["interface", "announceInterval"];
const SETTINGS_KEYS: &[&str] = &["synRateLimit", "tunnelSource"];
const TUNNEL_KEYS: &[&str] = &["ipv4", "ipv6"];
const RATE_LIMIT_KEYS: &[&str] = &["rate", "burst"];
const VIP_KEYS: &[&str] = &[
    "name",
    "address",
    "port",
    "protocol",
    "mode",
    "sessionAffinity",
    "natForwarding",
    "synRateLimit",
    "backends",
    "healthCheck",
    "advertise",
    "communities",
];
const BACKEND_KEYS: &[&str] = &["address", "port", "weight", "mac", "healthCheck"];
const CHECK_KEYS: &[&str] = &[
    "type",
    "interval",
    "timeout",
    "rise",
    "fall",
    "port",
    "path",
    "expectStatus",
    "host",
];
const HTTP_ONLY_KEYS: &[&str] = &["path", "expectStatus", "host"];

/// Longest VIP name: `[a-z0-9][a-z0-9-_.]{0,62}`.
const MAX_NAME_LEN: usize = 63;

/// Decodes and validates a document (`None` for a stream without one).
pub(crate) fn decode(root: Option<&Node>) -> Result<Config, Vec<FieldError>> {
    let mut decoder = Decoder::default();
    let config = decoder.config(root);
    if decoder.errors.is_empty() {
        Ok(config)
    } else {
        // Report in file order; a stable sort keeps problems found at the
        // same place in the order they were checked.
        decoder
            .errors
            .sort_by_key(|e| (e.line.is_none(), e.line, e.column));
        Err(decoder.errors)
    }
}

/// `parent.key`, or `key` at the top level.
fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

/// `10.0.0.1:80` or `[2001:db8::1]:80`; a backend keeping the client's
/// destination port (port 0) is `10.0.0.1 (destination port)`.
fn socket(address: IpAddr, port: u16) -> String {
    if port == KEEP_DESTINATION_PORT {
        format!("{address} (destination port)")
    } else {
        SocketAddr::new(address, port).to_string()
    }
}

/// `10.0.0.1:80/tcp`, `10.0.0.1:8000-8099/tcp`, `[2001:db8::1]:any/udp`.
fn vip_endpoint(address: IpAddr, ports: PortRange, protocol: Protocol) -> String {
    match address {
        IpAddr::V4(a) => format!("{a}:{ports}/{protocol}"),
        IpAddr::V6(a) => format!("[{a}]:{ports}/{protocol}"),
    }
}

fn family(address: IpAddr) -> &'static str {
    if address.is_ipv4() { "IPv4" } else { "IPv6" }
}

/// The keys of a mapping that passed the unknown/duplicate key checks.
struct Fields<'n> {
    /// Where the mapping starts; missing keys are reported there.
    pos: Pos,
    entries: Vec<(&'n str, &'n Node)>,
}

impl<'n> Fields<'n> {
    fn get(&self, key: &str) -> Option<&'n Node> {
        self.entries
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, node)| *node)
    }

    /// An optional key: absent or explicitly empty (`key:` / `key: ~`) both
    /// mean "use the default".
    fn optional(&self, key: &str) -> Option<&'n Node> {
        self.get(key).filter(|n| !matches!(n.kind(), Kind::Null))
    }
}

/// What could be learnt about one VIP, even if some of it is invalid, so the
/// cross-VIP checks can still run.
#[derive(Default)]
struct VipDraft {
    name: Option<(String, Pos)>,
    /// Address, ports and protocol, with where the port was written.
    endpoint: Option<(IpAddr, PortRange, Protocol, Pos)>,
    config: Option<VipConfig>,
}

/// A port range already defined: its ports, VIP index and VIP position.
type RangeSeen = (PortRange, usize, Pos);

/// What could be learnt about one backend, for the duplicate checks.
#[derive(Default)]
struct BackendDraft {
    key: Option<(IpAddr, u16)>,
    config: Option<BackendConfig>,
    /// It keeps the client's destination port and inherits its VIP's health
    /// check, which gives no port to probe (the VIP reports it once).
    inherited_check_lacks_port: bool,
}

#[derive(Default)]
struct Decoder {
    errors: Vec<FieldError>,
}

impl Decoder {
    fn error(&mut self, path: &str, pos: Pos, message: impl Into<String>) {
        self.errors.push(FieldError {
            path: path.to_string(),
            line: Some(pos.line),
            column: Some(pos.column),
            message: message.into(),
        });
    }

    fn config(&mut self, root: Option<&Node>) -> Config {
        let Some(root) = root else {
            // An empty or comment-only file is what a non-atomic writer
            // (shell `>`, an editor saving in place) leaves for a moment:
            // it must never read as "remove every VIP".
            self.errors.push(FieldError {
                path: "vips".to_string(),
                line: Some(1),
                column: Some(1),
                message: format!("the file is empty (or holds only comments); {NO_VIPS_HINT}"),
            });
            return Config::default();
        };
        self.check_tags(root, "");
        if matches!(root.kind(), Kind::Null) {
            // `---` alone, or `~`: as empty as an empty file.
            self.error(
                "vips",
                root.pos,
                format!("the document is empty (null); {NO_VIPS_HINT}"),
            );
            return Config::default();
        }
        let Some(fields) = self.mapping(
            root,
            "",
            "the top level to be a mapping with the keys `vips`, `settings`, `bgp` and `l2Announce`",
            TOP_KEYS,
        ) else {
            return Config::default();
        };
        let settings = match fields.optional("settings") {
            Some(n) => self.settings(n, "settings"),
            None => Settings::default(),
        };
        let bgp = fields.optional("bgp").and_then(|n| self.bgp(n, "bgp"));
        let l2_announce = fields
            .optional("l2Announce")
            .and_then(|n| self.l2_announce(n, "l2Announce"));
        let classifier = fields
            .optional("classifier")
            .map(|n| self.classifier(n, "classifier"))
            .unwrap_or_default();
        let Some(vips_node) = fields.optional("vips") else {
            let message = match fields.get("vips") {
                Some(_) => format!("`vips` is empty (null); {NO_VIPS_HINT}"),
                None => format!("missing required key `vips`; {NO_VIPS_HINT}"),
            };
            let pos = fields.get("vips").map_or(fields.pos, |n| n.pos);
            self.error("vips", pos, message);
            return Config {
                vips: Vec::new(),
                settings,
                bgp,
                l2_announce,
                classifier: classifier.spec,
            };
        };
        let items = match vips_node.kind() {
            Kind::Seq(items) => items,
            _ => {
                let found = vips_node.describe();
                self.error(
                    "vips",
                    vips_node.pos,
                    format!("expected a list of VIPs, found {found}"),
                );
                return Config {
                    vips: Vec::new(),
                    settings,
                    bgp,
                    l2_announce,
                    classifier: classifier.spec,
                };
            }
        };
        if items.len() > MAX_VIPS {
            self.error(
                "vips",
                vips_node.pos,
                format!(
                    "{} VIPs are defined; at most {MAX_VIPS} are supported",
                    items.len()
                ),
            );
        }

        let mut vips = Vec::with_capacity(items.len());
        let mut names: HashMap<String, (usize, Pos)> = HashMap::new();
        let mut endpoints: HashMap<(IpAddr, PortRange, Protocol), (usize, Pos)> = HashMap::new();
        // Port ranges (not single ports) by address and protocol, to find
        // overlaps: the datapath could not tell which VIP a port belongs to.
        let mut ranges: HashMap<(IpAddr, Protocol), Vec<RangeSeen>> = HashMap::new();
        let mut all_backends: HashSet<(IpAddr, u16)> = HashSet::new();
        for (i, item) in items.iter().enumerate() {
            let path = format!("vips[{i}]");
            let draft = self.vip(item, &path, &mut all_backends);
            if let Some((name, pos)) = draft.name {
                if let Some(&(first, first_pos)) = names.get(&name) {
                    self.error(
                        &join(&path, "name"),
                        pos,
                        format!(
                            "duplicate VIP name `{name}`: already used by vips[{first}] at line {}",
                            first_pos.line
                        ),
                    );
                } else {
                    names.insert(name, (i, pos));
                }
            }
            if let Some((address, ports, protocol, port_pos)) = draft.endpoint {
                let endpoint = (address, ports, protocol);
                if let Some(&(first, first_pos)) = endpoints.get(&endpoint) {
                    self.error(
                        &path,
                        item.pos,
                        format!(
                            "VIP {} is already defined by vips[{first}] at line {}",
                            vip_endpoint(address, ports, protocol),
                            first_pos.line
                        ),
                    );
                } else {
                    endpoints.insert(endpoint, (i, item.pos));
                    if !ports.is_single() {
                        let same = ranges.entry((address, protocol)).or_default();
                        if let Some(&(other, first, first_pos)) =
                            same.iter().find(|(r, _, _)| r.overlaps(&ports))
                        {
                            self.error(
                                &join(&path, "port"),
                                port_pos,
                                format!(
                                    "VIP {} overlaps vips[{first}] ({}, line {}): port ranges \
                                     of one address and protocol must not overlap (a single \
                                     port inside a range is fine: it takes that port)",
                                    vip_endpoint(address, ports, protocol),
                                    vip_endpoint(address, other, protocol),
                                    first_pos.line
                                ),
                            );
                        } else {
                            same.push((ports, i, item.pos));
                        }
                    }
                }
            }
            if let Some(vip) = draft.config {
                vips.push(vip);
            }
        }
        if all_backends.len() > MAX_BACKENDS {
            self.error(
                "vips",
                vips_node.pos,
                format!(
                    "{} distinct backends (address, port) are defined across all VIPs; \
                     at most {MAX_BACKENDS} are supported",
                    all_backends.len()
                ),
            );
        }
        if self.errors.is_empty() {
            self.check_shared_backend_probes(items, &vips);
            self.check_tunnel_sources(items, &vips, &settings);
        }
        self.check_classifier_vips(&classifier, &vips);
        Config {
            vips,
            settings,
            bgp,
            l2_announce,
            classifier: classifier.spec,
        }
    }

    /// An L3 DSR VIP needs an outer source address of its family.
    fn check_tunnel_sources(&mut self, items: &[Node], vips: &[VipConfig], settings: &Settings) {
        for (i, (vip, item)) in vips.iter().zip(items).enumerate() {
            if !matches!(vip.mode, Mode::DsrIpip | Mode::DsrGre) {
                continue;
            }
            let have = if vip.address.is_ipv6() {
                settings.tunnel_source_v6.is_some()
            } else {
                settings.tunnel_source_v4.is_some()
            };
            if !have {
                let key = if vip.address.is_ipv6() {
                    "ipv6"
                } else {
                    "ipv4"
                };
                self.error(
                    &format!("vips[{i}].mode"),
                    item.pos,
                    format!(
                        "mode {} needs settings.tunnelSource.{key}: the outer source address of the tunnel",
                        vip.mode
                    ),
                );
            }
        }
    }

    /// The `settings:` mapping.
    fn settings(&mut self, node: &Node, path: &str) -> Settings {
        let Some(fields) = self.mapping(
            node,
            path,
            "settings (a mapping with the keys synRateLimit, tunnelSource)",
            SETTINGS_KEYS,
        ) else {
            return Settings::default();
        };
        let syn_rate_limit = fields
            .optional("synRateLimit")
            .and_then(|n| self.rate_limit(n, &join(path, "synRateLimit")));
        let mut tunnel_source_v4 = None;
        let mut tunnel_source_v6 = None;
        if let Some(n) = fields.optional("tunnelSource") {
            let tpath = join(path, "tunnelSource");
            if let Some(t) = self.mapping(
                n,
                &tpath,
                "a tunnel source (a mapping with the keys ipv4, ipv6)",
                TUNNEL_KEYS,
            ) {
                for (key, want_v6) in [("ipv4", false), ("ipv6", true)] {
                    if let Some(a) = t.optional(key) {
                        let p = join(&tpath, key);
                        match self.address(a, &p, "a tunnel source") {
                            Some(addr) if addr.is_ipv6() == want_v6 => {
                                if want_v6 {
                                    tunnel_source_v6 = Some(addr);
                                } else {
                                    tunnel_source_v4 = Some(addr);
                                }
                            }
                            Some(addr) => self.error(
                                &p,
                                a.pos,
                                format!(
                                    "{addr} is not an {} address",
                                    if want_v6 { "IPv6" } else { "IPv4" }
                                ),
                            ),
                            None => {}
                        }
                    }
                }
            }
        }
        Settings {
            syn_rate_limit,
            tunnel_source_v4,
            tunnel_source_v6,
        }
    }

    /// A `synRateLimit` mapping: `rate` (required) and `burst` (default:
    /// the rate), each 1 to [`MAX_SYN_RATE`].
    fn rate_limit(&mut self, node: &Node, path: &str) -> Option<RateLimit> {
        let fields = self.mapping(
            node,
            path,
            "a rate limit (a mapping with the keys rate, burst)",
            RATE_LIMIT_KEYS,
        )?;
        let rate = match self.required(&fields, path, "rate") {
            Some(n) => self.bounded(n, &join(path, "rate"), "rate", MAX_SYN_RATE),
            None => None,
        };
        let burst = match fields.optional("burst") {
            Some(n) => self
                .bounded(n, &join(path, "burst"), "burst", MAX_SYN_RATE)
                .map(Some),
            None => Some(None),
        };
        let (rate, burst) = (rate?, burst?);
        Some(RateLimit {
            rate,
            burst: burst.unwrap_or(rate),
        })
    }

    /// A backend listed by several VIPs is probed once, so every listing must
    /// lead to the same effective health check. Runs on a valid file only,
    /// where `vips[i]` and its backends line up with the YAML items.
    fn check_shared_backend_probes(&mut self, items: &[Node], vips: &[VipConfig]) {
        let mut first: HashMap<(IpAddr, u16), (String, Option<HealthCheck>, Pos)> = HashMap::new();
        for (i, (vip, item)) in vips.iter().zip(items).enumerate() {
            let nodes: Vec<&Node> = match item.kind() {
                Kind::Map(pairs) => pairs
                    .iter()
                    .find(|(k, _)| k.scalar_text() == Some("backends"))
                    .map(|(_, v)| match v.kind() {
                        Kind::Seq(list) => list.iter().collect(),
                        _ => Vec::new(),
                    })
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            for (j, b) in vip.backends.iter().enumerate() {
                let pos = nodes.get(j).map(|n| n.pos).unwrap_or(item.pos);
                let here = format!("vips[{i}].backends[{j}]");
                match first.get(&(b.address, b.port)) {
                    None => {
                        first.insert((b.address, b.port), (here, b.health_check.clone(), pos));
                    }
                    Some((there, check, there_pos)) if *check != b.health_check => {
                        let message = format!(
                            "backend {} has a different health check than {there} (line {}); \
                             a backend is probed once, so all VIPs listing it must agree",
                            socket(b.address, b.port),
                            there_pos.line
                        );
                        self.error(&join(&here, "healthCheck"), pos, message);
                    }
                    Some(_) => {}
                }
            }
        }
    }

    /// The `bgp:` mapping.
    fn bgp(&mut self, node: &Node, path: &str) -> Option<BgpConfig> {
        let fields = self.mapping(
            node,
            path,
            "a BGP section (a mapping with the keys localAS, routerID, peers)",
            BGP_KEYS,
        )?;
        let local_as = match self.required(&fields, path, "localAS") {
            Some(n) => self.as_number(n, &join(path, "localAS")),
            None => None,
        };
        let router_id = match self.required(&fields, path, "routerID") {
            Some(n) => self.router_id(n, &join(path, "routerID")),
            None => None,
        };
        let mut peers = Vec::new();
        let mut peers_ok = true;
        match self.required(&fields, path, "peers") {
            None => peers_ok = false,
            Some(list) => {
                let list_path = join(path, "peers");
                match list.kind() {
                    Kind::Seq([]) => {
                        self.error(
                            &list_path,
                            list.pos,
                            "no peers: list at least one BGP peer (or remove the `bgp` section)",
                        );
                        peers_ok = false;
                    }
                    Kind::Seq(items) => {
                        let mut seen: HashMap<(IpAddr, u16), (usize, Pos)> = HashMap::new();
                        for (j, item) in items.iter().enumerate() {
                            let item_path = format!("{list_path}[{j}]");
                            match self.bgp_peer(item, &item_path) {
                                Some(p) => {
                                    if let Some(&(first, first_pos)) =
                                        seen.get(&(p.address, p.port))
                                    {
                                        self.error(
                                            &item_path,
                                            item.pos,
                                            format!(
                                                "peer {} is listed twice (also peers[{first}] at line {})",
                                                SocketAddr::new(p.address, p.port),
                                                first_pos.line
                                            ),
                                        );
                                        peers_ok = false;
                                    } else {
                                        seen.insert((p.address, p.port), (j, item.pos));
                                        peers.push(p);
                                    }
                                }
                                None => peers_ok = false,
                            }
                        }
                    }
                    _ => {
                        let found = list.describe();
                        self.error(
                            &list_path,
                            list.pos,
                            format!("expected a list of BGP peers, found {found}"),
                        );
                        peers_ok = false;
                    }
                }
            }
        }
        let (local_as, router_id) = (local_as?, router_id?);
        peers_ok.then_some(BgpConfig {
            local_as,
            router_id,
            peers,
        })
    }

    /// One `bgp.peers[]` entry.
    fn bgp_peer(&mut self, node: &Node, path: &str) -> Option<BgpPeer> {
        let fields = self.mapping(
            node,
            path,
            "a BGP peer (a mapping with the keys address, as, port, password, holdTime, nextHop, localAddress)",
            PEER_KEYS,
        )?;
        let address = match self.required(&fields, path, "address") {
            Some(n) => self.peer_address(n, &join(path, "address"), "a BGP peer"),
            None => None,
        };
        let remote_as = match self.required(&fields, path, "as") {
            Some(n) => self.as_number(n, &join(path, "as")),
            None => None,
        };
        let port = match fields.optional("port") {
            Some(n) => self.number(n, &join(path, "port"), "port"),
            None => Some(DEFAULT_BGP_PORT),
        };
        let password = match fields.optional("password") {
            Some(n) => {
                let p = join(path, "password");
                match n.kind() {
                    Kind::Str("") => {
                        self.error(
                            &p,
                            n.pos,
                            "the password is empty: give the TCP-MD5 password, or remove `password` to connect without MD5",
                        );
                        None
                    }
                    Kind::Str(text) if text.len() > MAX_MD5_PASSWORD => {
                        self.error(
                            &p,
                            n.pos,
                            format!(
                                "the password is {} bytes long; TCP-MD5 allows at most {MAX_MD5_PASSWORD}",
                                text.len()
                            ),
                        );
                        None
                    }
                    Kind::Str(text) => Some(Some(text.to_string())),
                    _ => {
                        // Never echo the value: it may be a real password.
                        let what = match n.kind() {
                            Kind::Int(..) | Kind::Float(_) => "a number",
                            Kind::Bool(_) => "a boolean",
                            Kind::Seq(_) => "a list",
                            Kind::Map(_) => "a mapping",
                            _ => "something else",
                        };
                        self.error(
                            &p,
                            n.pos,
                            format!("expected the password as a string, found {what}; quote it"),
                        );
                        None
                    }
                }
            }
            None => Some(None),
        };
        let hold_time = match fields.optional("holdTime") {
            Some(n) => self.hold_time(n, &join(path, "holdTime")),
            None => Some(DEFAULT_HOLD_TIME),
        };
        let mut next_hop_v4 = Some(None);
        let mut next_hop_v6 = Some(None);
        if let Some(n) = fields.optional("nextHop") {
            let npath = join(path, "nextHop");
            match self.mapping(
                n,
                &npath,
                "next hops (a mapping with the keys ipv4, ipv6)",
                NEXT_HOP_KEYS,
            ) {
                None => {
                    next_hop_v4 = None;
                    next_hop_v6 = None;
                }
                Some(t) => {
                    if let Some(a) = t.optional("ipv4") {
                        let p = join(&npath, "ipv4");
                        next_hop_v4 = match self.peer_address(a, &p, "a next hop") {
                            Some(IpAddr::V4(v4)) => Some(Some(v4)),
                            Some(other) => {
                                self.error(&p, a.pos, format!("{other} is not an IPv4 address"));
                                None
                            }
                            None => None,
                        };
                    }
                    if let Some(a) = t.optional("ipv6") {
                        let p = join(&npath, "ipv6");
                        next_hop_v6 = match self.peer_address(a, &p, "a next hop") {
                            Some(IpAddr::V6(v6)) => Some(Some(v6)),
                            Some(other) => {
                                self.error(&p, a.pos, format!("{other} is not an IPv6 address"));
                                None
                            }
                            None => None,
                        };
                    }
                }
            }
        }
        let local_address = match fields.optional("localAddress") {
            Some(n) => {
                let p = join(path, "localAddress");
                match (self.peer_address(n, &p, "a local"), address) {
                    (Some(l), Some(a)) if l.is_ipv4() != a.is_ipv4() => {
                        self.error(
                            &p,
                            n.pos,
                            format!(
                                "local address {l} is {} but the peer address {a} is {}; \
                                 the connection needs one family",
                                family(l),
                                family(a)
                            ),
                        );
                        None
                    }
                    (Some(l), _) => Some(Some(l)),
                    (None, _) => None,
                }
            }
            None => Some(None),
        };
        Some(BgpPeer {
            address: address?,
            remote_as: remote_as?,
            port: port?,
            password: password?,
            hold_time: hold_time?,
            next_hop_v4: next_hop_v4?,
            next_hop_v6: next_hop_v6?,
            local_address: local_address?,
        })
    }

    /// An AS number: 1-4294967295 (0 is reserved, RFC 7607).
    fn as_number(&mut self, node: &Node, path: &str) -> Option<u32> {
        match node.kind() {
            Kind::Int(text, value) => {
                let number = value
                    .and_then(|v| u32::try_from(v).ok())
                    .filter(|&v| v != 0);
                if number.is_none() {
                    self.error(
                        path,
                        node.pos,
                        format!("{text} is not a valid AS number (1-4294967295; 0 is reserved)"),
                    );
                }
                number
            }
            _ => {
                let found = node.describe();
                self.error(
                    path,
                    node.pos,
                    format!("expected an AS number (an integer, 1-4294967295), found {found}"),
                );
                None
            }
        }
    }

    /// `routerID`: an IPv4 address other than 0.0.0.0.
    fn router_id(&mut self, node: &Node, path: &str) -> Option<std::net::Ipv4Addr> {
        let text = self.text(node, path, "a router ID (an IPv4 address)")?;
        match text.parse::<std::net::Ipv4Addr>() {
            Ok(id) if id.is_unspecified() => {
                self.error(path, node.pos, "0.0.0.0 is not a valid BGP router ID");
                None
            }
            Ok(id) => Some(id),
            Err(_) => {
                self.error(
                    path,
                    node.pos,
                    format!(
                        "{text:?} is not a router ID: write an IPv4 address, usually one of this node's"
                    ),
                );
                None
            }
        }
    }

    /// A unicast address of a peer, next hop or local end (`role`).
    fn peer_address(&mut self, node: &Node, path: &str, role: &str) -> Option<IpAddr> {
        let text = self.text(node, path, "an IP address")?;
        let Ok(address) = text.parse::<IpAddr>() else {
            self.error(
                path,
                node.pos,
                format!("{text:?} is not a valid IPv4 or IPv6 address"),
            );
            return None;
        };
        let reason = match address {
            _ if address.is_unspecified() => Some("the unspecified address"),
            _ if address.is_multicast() => Some("a multicast address"),
            IpAddr::V4(v4) if v4.is_broadcast() => Some("the broadcast address"),
            IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => {
                Some("an IPv4-mapped IPv6 address (write the IPv4 address)")
            }
            IpAddr::V6(v6) if v6.is_unicast_link_local() => {
                Some("an IPv6 link-local address (it has no interface scope here)")
            }
            _ => None,
        };
        if let Some(reason) = reason {
            self.error(
                path,
                node.pos,
                format!("{address} cannot be {role} address: it is {reason}"),
            );
            return None;
        }
        Some(address)
    }

    /// `holdTime`: seconds, 0 (no keepalives) or 3-65535.
    fn hold_time(&mut self, node: &Node, path: &str) -> Option<u16> {
        match node.kind() {
            Kind::Int(text, value) => {
                let v = value
                    .and_then(|v| u16::try_from(v).ok())
                    .filter(|&v| v != 1 && v != 2);
                if v.is_none() {
                    self.error(
                        path,
                        node.pos,
                        format!(
                            "{text} is not a valid hold time: 0 (no keepalives) or 3-65535 seconds (RFC 4271)"
                        ),
                    );
                }
                v
            }
            _ => {
                let found = node.describe();
                self.error(
                    path,
                    node.pos,
                    format!("expected a hold time in seconds (0 or 3-65535), found {found}"),
                );
                None
            }
        }
    }

    /// The `l2Announce:` mapping.
    fn l2_announce(&mut self, node: &Node, path: &str) -> Option<L2Announce> {
        let fields = self.mapping(
            node,
            path,
            "an L2 announcement section (a mapping with the keys interface, announceInterval; `{}` for the defaults)",
            L2_KEYS,
        )?;
        let interface = match fields.optional("interface") {
            Some(n) => {
                let p = join(path, "interface");
                let name = self.text(n, &p, "an interface name")?;
                let valid = !name.is_empty()
                    && name.len() <= 15
                    && name != "."
                    && name != ".."
                    && name
                        .chars()
                        .all(|c| c.is_ascii_graphic() && c != '/' && c != ':');
                if !valid {
                    self.error(
                        &p,
                        n.pos,
                        format!(
                            "{name:?} is not a valid interface name (1-15 characters, no spaces, `/` or `:`)"
                        ),
                    );
                    return None;
                }
                Some(name.to_string())
            }
            None => None,
        };
        let announce_interval = match fields.optional("announceInterval") {
            Some(n) => self.duration(
                n,
                &join(path, "announceInterval"),
                Duration::from_secs(1),
                Duration::from_secs(3600),
            )?,
            None => DEFAULT_ANNOUNCE_INTERVAL,
        };
        Some(L2Announce {
            interface,
            announce_interval,
        })
    }

    /// `true` or `false`.
    fn boolean(&mut self, node: &Node, path: &str) -> Option<bool> {
        match node.kind() {
            Kind::Bool(t) => Some(t.eq_ignore_ascii_case("true")),
            _ => {
                let found = node.describe();
                self.error(
                    path,
                    node.pos,
                    format!("expected true or false, found {found}"),
                );
                None
            }
        }
    }

    /// A VIP's `communities`: a list of `"AS:VALUE"` strings, each part
    /// 0-65535. Sorted and deduplicated.
    fn communities(&mut self, node: &Node, path: &str) -> Option<Vec<Community>> {
        let Kind::Seq(items) = node.kind() else {
            let found = node.describe();
            self.error(
                path,
                node.pos,
                format!("expected a list of communities such as [\"65000:100\"], found {found}"),
            );
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let Some(text) = self.text(item, &p, "a community such as \"65000:100\"") else {
                ok = false;
                continue;
            };
            let part = |s: &str| {
                (!s.is_empty() && s.len() <= 5 && s.chars().all(|c| c.is_ascii_digit()))
                    .then(|| s.parse::<u32>().ok())
                    .flatten()
                    .filter(|&v| v <= 0xffff)
            };
            match text.split_once(':').map(|(a, b)| (part(a), part(b))) {
                Some((Some(a), Some(v))) => out.push(Community((a << 16) | v)),
                _ => {
                    self.error(
                        &p,
                        item.pos,
                        format!(
                            "{text:?} is not a community: write \"AS:VALUE\" with both parts 0-65535, e.g. \"65000:100\""
                        ),
                    );
                    ok = false;
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        ok.then_some(out)
    }

    fn vip(
        &mut self,
        node: &Node,
        path: &str,
        all_backends: &mut HashSet<(IpAddr, u16)>,
    ) -> VipDraft {
        let mut draft = VipDraft::default();
        let Some(fields) = self.mapping(
            node,
            path,
            "a VIP (a mapping with the keys name, address, port, protocol, mode, backends)",
            VIP_KEYS,
        ) else {
            return draft;
        };

        let name = match self.required(&fields, path, "name") {
            Some(n) => self.vip_name(n, &join(path, "name")),
            None => None,
        };
        let address = match self.required(&fields, path, "address") {
            Some(n) => self.address(n, &join(path, "address"), "a VIP"),
            None => None,
        };
        let port_node = self.required(&fields, path, "port");
        let ports = match port_node {
            Some(n) => self.ports(n, &join(path, "port")),
            None => None,
        };
        let protocol = match fields.optional("protocol") {
            Some(n) => self.protocol(n, &join(path, "protocol")),
            None => Some(Protocol::default()),
        };
        let mode = match fields.optional("mode") {
            Some(n) => self.mode(n, &join(path, "mode")),
            None => Some(Mode::default()),
        };

        let session_affinity = match fields.optional("sessionAffinity") {
            Some(n) => self.session_affinity(n, &join(path, "sessionAffinity")),
            None => Some(SessionAffinity::default()),
        };
        let nat_forwarding = match fields.optional("natForwarding") {
            Some(n) => {
                let value = self.nat_forwarding(n, &join(path, "natForwarding"));
                match (value, mode) {
                    (Some(NatForwarding::Fib), Some(m)) if m != Mode::Nat => {
                        self.error(
                            &join(path, "natForwarding"),
                            n.pos,
                            format!(
                                "natForwarding applies to mode nat; mode {} forwards \
                                 without NAT: remove it or write `natForwarding: kernel`",
                                m.as_str()
                            ),
                        );
                        None
                    }
                    (Some(NatForwarding::Fib), Some(_)) => Some(NatForwarding::Fib),
                    (Some(NatForwarding::Kernel), _) => Some(NatForwarding::Kernel),
                    _ => None,
                }
            }
            None => Some(NatForwarding::default()),
        };
        let syn_rate_limit = match fields.optional("synRateLimit") {
            Some(n) => {
                let limit = self.rate_limit(n, &join(path, "synRateLimit"));
                if protocol == Some(Protocol::Udp) {
                    self.error(
                        &join(path, "synRateLimit"),
                        n.pos,
                        "a SYN rate limit applies to TCP connections; this VIP is udp",
                    );
                    None
                } else {
                    limit.map(Some)
                }
            }
            None => Some(None),
        };

        let advertise = match fields.optional("advertise") {
            Some(n) => self.boolean(n, &join(path, "advertise")),
            None => Some(true),
        };
        let communities = match fields.optional("communities") {
            Some(n) => {
                let list = self.communities(n, &join(path, "communities"));
                if advertise == Some(false) && list.as_ref().is_some_and(|l| !l.is_empty()) {
                    self.error(
                        &join(path, "communities"),
                        n.pos,
                        "communities are only sent with the VIP's BGP route, and this VIP has \
                         `advertise: false`: remove one of the two",
                    );
                    None
                } else {
                    list
                }
            }
            None => Some(Vec::new()),
        };

        let vip_check = match fields.optional("healthCheck") {
            Some(n) => self.health_check(n, &join(path, "healthCheck")),
            None => Some(None),
        };
        let mut unprobeable: Option<usize> = None;

        let mut backends = Vec::new();
        if let Some(list) = fields.optional("backends") {
            let list_path = join(path, "backends");
            match list.kind() {
                Kind::Seq(items) => {
                    let mut seen: HashMap<(IpAddr, u16), (usize, Pos)> = HashMap::new();
                    for (j, item) in items.iter().enumerate() {
                        let item_path = format!("{list_path}[{j}]");
                        let inherited = vip_check.clone().flatten();
                        let backend =
                            self.backend(item, &item_path, address, ports, inherited, mode);
                        if backend.inherited_check_lacks_port && unprobeable.is_none() {
                            unprobeable = Some(j);
                        }
                        if let Some(key) = backend.key {
                            if let Some(&(first, first_pos)) = seen.get(&key) {
                                self.error(
                                    &item_path,
                                    item.pos,
                                    format!(
                                        "backend {} is listed twice in this VIP \
                                         (also backends[{first}] at line {})",
                                        socket(key.0, key.1),
                                        first_pos.line
                                    ),
                                );
                            } else {
                                seen.insert(key, (j, item.pos));
                                all_backends.insert(key);
                            }
                        }
                        if let Some(config) = backend.config {
                            backends.push(config);
                        }
                    }
                }
                _ => {
                    let found = list.describe();
                    self.error(
                        &list_path,
                        list.pos,
                        format!("expected a list of backends, found {found}"),
                    );
                }
            }
        }

        // A backend keeping the client's destination port has no port of
        // its own to probe: the VIP's check must name one.
        let mut vip_check = vip_check;
        if let (Some(j), Some(n)) = (unprobeable, fields.get("healthCheck")) {
            self.error(
                &join(path, "healthCheck"),
                n.pos,
                format!(
                    "backends[{j}] gives no `port`, so it keeps the client's destination \
                     port (this VIP has a port range) and has no port of its own to probe: \
                     give the health check a `port`, or the backend a `port`"
                ),
            );
            vip_check = None;
        }

        if let Some(n) = fields.get("name") {
            draft.name = name.clone().map(|name| (name, n.pos));
        }
        if let (Some(address), Some(ports), Some(protocol), Some(port_node)) =
            (address, ports, protocol, port_node)
        {
            draft.endpoint = Some((address, ports, protocol, port_node.pos));
        }
        if let (
            Some(name),
            Some(address),
            Some(ports),
            Some(protocol),
            Some(mode),
            Some(health_check),
            Some(session_affinity),
            Some(nat_forwarding),
            Some(syn_rate_limit),
            Some(advertise),
            Some(communities),
        ) = (
            name,
            address,
            ports,
            protocol,
            mode,
            vip_check,
            session_affinity,
            nat_forwarding,
            syn_rate_limit,
            advertise,
            communities,
        ) {
            draft.config = Some(VipConfig {
                name,
                address,
                ports,
                protocol,
                mode,
                backends,
                health_check,
                session_affinity,
                nat_forwarding,
                syn_rate_limit,
                advertise,
                communities,
            });
        }
        draft
    }

    fn backend(
        &mut self,
        node: &Node,
        path: &str,
        vip_address: Option<IpAddr>,
        vip_ports: Option<PortRange>,
        inherited_check: Option<HealthCheck>,
        mode: Option<Mode>,
    ) -> BackendDraft {
        let mut draft = BackendDraft::default();
        let Some(fields) = self.mapping(
            node,
            path,
            "a backend (a mapping with the keys address, port, weight, mac)",
            BACKEND_KEYS,
        ) else {
            return draft;
        };

        let address_path = join(path, "address");
        let mut address = None;
        if let Some(n) = self.required(&fields, path, "address") {
            address = self.address(n, &address_path, "a backend");
            if let (Some(a), Some(v)) = (address, vip_address)
                && a.is_ipv4() != v.is_ipv4()
            {
                self.error(
                    &address_path,
                    n.pos,
                    format!(
                        "backend address {a} is {} but the VIP address {v} is {}; \
                             a backend must have the address family of its VIP",
                        family(a),
                        family(v)
                    ),
                );
                address = None;
            }
        }
        // Without a port of its own a backend listens on the VIP's port, or,
        // behind a port range, on whichever port the client connected to.
        let port = match fields.optional("port") {
            Some(n) => self.number(n, &join(path, "port"), "port"),
            None => vip_ports.map(|p| p.single_port().unwrap_or(KEEP_DESTINATION_PORT)),
        };
        let weight = match fields.optional("weight") {
            Some(n) => self.number(n, &join(path, "weight"), "weight"),
            None => Some(1),
        };
        let mac = match fields.optional("mac") {
            Some(n) => self.mac(n, &join(path, "mac")).map(Some),
            None => Some(None),
        };
        // DSR: the packet keeps the VIP as its destination.
        if let Some(m) = mode.filter(|m| *m != Mode::Nat) {
            if m == Mode::Dsr && fields.optional("mac").is_none() {
                self.error(
                    &join(path, "mac"),
                    fields.pos,
                    "missing required key `mac` in mode dsr: frames are sent to the backend by its MAC",
                );
            }
            if let (Some(n), Some(vp)) = (fields.optional("port"), vip_ports) {
                let same = vp.is_single()
                    && n.scalar_text().and_then(|t| t.parse::<u16>().ok()) == Some(vp.first);
                if !same {
                    self.error(
                        &join(path, "port"),
                        n.pos,
                        format!(
                            "in mode {m} a backend listens on the VIP's port (the packet is not rewritten): \
                             drop `port` or make it {vp}"
                        ),
                    );
                }
            }
        }
        let own_check = fields.optional("healthCheck");
        let mut health_check = match own_check {
            Some(n) => self.health_check(n, &join(path, "healthCheck")),
            None => Some(inherited_check),
        };
        if port == Some(KEEP_DESTINATION_PORT)
            && let Some(Some(check)) = &health_check
            && check.port.is_none()
        {
            match own_check {
                Some(n) => {
                    self.error(
                        &join(path, "healthCheck"),
                        n.pos,
                        "this backend gives no `port`, so it keeps the client's destination \
                         port (its VIP has a port range) and has no port of its own to probe: \
                         give the health check a `port`, or the backend a `port`",
                    );
                    health_check = None;
                }
                None => draft.inherited_check_lacks_port = true,
            }
        }

        if let (Some(address), Some(port)) = (address, port) {
            draft.key = Some((address, port));
        }
        if let (Some(address), Some(port), Some(weight), Some(mac), Some(health_check)) =
            (address, port, weight, mac, health_check)
        {
            draft.config = Some(BackendConfig {
                address,
                port,
                weight: u32::from(weight),
                mac,
                health_check,
            });
        }
        draft
    }

    /// A `healthCheck` mapping: `Some(None)` for `type: none`, `None` when
    /// invalid (problems reported).
    fn health_check(&mut self, node: &Node, path: &str) -> Option<Option<HealthCheck>> {
        let fields = self.mapping(
            node,
            path,
            "a health check (a mapping with the keys type, interval, timeout, rise, fall, port, path, expectStatus, host)",
            CHECK_KEYS,
        )?;
        let kind_node = self.required(&fields, path, "type")?;
        let kind = self
            .text(kind_node, &join(path, "type"), "a check type")?
            .to_string();
        if !matches!(kind.as_str(), "tcp" | "http" | "none") {
            self.error(
                &join(path, "type"),
                kind_node.pos,
                format!("{kind:?} is not a valid check type; valid values: tcp, http, none"),
            );
            return None;
        }
        if kind != "http" {
            for key in HTTP_ONLY_KEYS {
                if let Some(n) = fields.get(key) {
                    self.error(
                        &join(path, key),
                        n.pos,
                        format!("`{key}` only applies to `type: http`"),
                    );
                }
            }
        }
        if kind == "none" {
            return Some(None);
        }
        let interval = match fields.optional("interval") {
            Some(n) => self.duration(
                n,
                &join(path, "interval"),
                Duration::from_millis(100),
                Duration::from_secs(3600),
            ),
            None => Some(Duration::from_secs(2)),
        };
        let timeout = match fields.optional("timeout") {
            Some(n) => self.duration(
                n,
                &join(path, "timeout"),
                Duration::from_millis(10),
                Duration::from_secs(3600),
            ),
            None => Some(Duration::from_secs(1).min(interval.unwrap_or(Duration::from_secs(1)))),
        };
        if let (Some(i), Some(t), Some(n)) = (interval, timeout, fields.get("timeout"))
            && t > i
        {
            self.error(
                &join(path, "timeout"),
                n.pos,
                format!("timeout {t:?} is longer than the interval {i:?}; probes would overlap"),
            );
        }
        let count = |me: &mut Self, key: &str, default: u32| match fields.optional(key) {
            Some(n) => {
                let v = me.number(n, &join(path, key), key)?;
                if v > 100 {
                    me.error(
                        &join(path, key),
                        n.pos,
                        format!("{v} is not a valid {key} (1-100)"),
                    );
                    return None;
                }
                Some(u32::from(v))
            }
            None => Some(default),
        };
        let rise = count(self, "rise", 2);
        let fall = count(self, "fall", 3);
        let port = match fields.optional("port") {
            Some(n) => self.number(n, &join(path, "port"), "port").map(Some),
            None => Some(None),
        };
        let kind = if kind == "tcp" {
            Some(CheckKind::Tcp)
        } else {
            let http_path = match fields.optional("path") {
                Some(n) => {
                    let p = self.text(n, &join(path, "path"), "an HTTP path")?;
                    if !p.starts_with('/') || p.chars().any(|c| c.is_whitespace() || c.is_control())
                    {
                        self.error(
                            &join(path, "path"),
                            n.pos,
                            format!(
                                "{p:?} is not a valid HTTP path: start with / and use no spaces"
                            ),
                        );
                        None
                    } else {
                        Some(p.to_string())
                    }
                }
                None => Some("/".to_string()),
            };
            let expect = match fields.optional("expectStatus") {
                Some(n) => self.status_range(n, &join(path, "expectStatus")),
                None => Some((200, 399)),
            };
            let host = match fields.optional("host") {
                Some(n) => self
                    .text(n, &join(path, "host"), "a host name")
                    .map(|h| Some(h.to_string())),
                None => Some(None),
            };
            match (http_path, expect, host) {
                (Some(path), Some(expect), Some(host)) => {
                    Some(CheckKind::Http { path, expect, host })
                }
                _ => None,
            }
        };
        let (kind, interval, timeout, rise, fall, port) =
            (kind?, interval?, timeout?, rise?, fall?, port?);
        Some(Some(HealthCheck {
            kind,
            interval,
            timeout,
            rise,
            fall,
            port,
        }))
    }

    /// A duration with a unit: `500ms`, `2s`, `1m` (a bare number is
    /// ambiguous and rejected), within `min..=max`.
    fn duration(
        &mut self,
        node: &Node,
        path: &str,
        min: Duration,
        max: Duration,
    ) -> Option<Duration> {
        let text = self
            .text(node, path, "a duration such as 500ms or 2s")?
            .trim()
            .to_string();
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (digits, unit) = text.split_at(split);
        let value: Option<u64> = digits.parse().ok();
        let d = match (value, unit) {
            (Some(v), "ms") => Some(Duration::from_millis(v)),
            (Some(v), "s") => Some(Duration::from_secs(v)),
            (Some(v), "m") => v.checked_mul(60).map(Duration::from_secs),
            _ => None,
        };
        match d {
            Some(d) if d >= min && d <= max => Some(d),
            Some(d) => {
                self.error(
                    path,
                    node.pos,
                    format!("{text} is out of range ({min:?} to {max:?}); got {d:?}"),
                );
                None
            }
            None => {
                self.error(
                    path,
                    node.pos,
                    format!("{text:?} is not a duration: write a whole number with a unit, e.g. 500ms, 2s or 1m"),
                );
                None
            }
        }
    }

    /// `200`, or `200-399`, within 100-599.
    fn status_range(&mut self, node: &Node, path: &str) -> Option<(u16, u16)> {
        let text = node.scalar_text().unwrap_or_default().trim().to_string();
        let parse = |s: &str| {
            s.trim()
                .parse::<u16>()
                .ok()
                .filter(|v| (100..=599).contains(v))
        };
        let range = match text.split_once('-') {
            Some((a, b)) => parse(a).zip(parse(b)).filter(|(a, b)| a <= b),
            None => parse(&text).map(|v| (v, v)),
        };
        if range.is_none() {
            self.error(
                path,
                node.pos,
                format!(
                    "{text:?} is not a status or status range (e.g. 200 or 200-399, within 100-599)"
                ),
            );
        }
        range
    }

    /// Checks that `node` is a mapping whose keys are all in `allowed` and
    /// appear once; reports every offending key.
    fn mapping<'n>(
        &mut self,
        node: &'n Node,
        path: &str,
        expected: &str,
        allowed: &[&str],
    ) -> Option<Fields<'n>> {
        let Kind::Map(pairs) = node.kind() else {
            let found = node.describe();
            self.error(
                path,
                node.pos,
                format!("expected {expected}, found {found}"),
            );
            return None;
        };
        let mut fields = Fields {
            pos: node.pos,
            entries: Vec::with_capacity(pairs.len()),
        };
        let mut seen: HashMap<&str, Pos> = HashMap::new();
        for (key_node, value) in pairs {
            let key = match key_node.kind() {
                Kind::Null | Kind::Seq(_) | Kind::Map(_) => {
                    let found = key_node.describe();
                    self.error(
                        path,
                        key_node.pos,
                        format!("expected a key name, found {found}"),
                    );
                    continue;
                }
                _ => key_node.scalar_text().unwrap_or_default(),
            };
            let key_path = join(path, key);
            if !allowed.contains(&key) {
                let allowed = allowed.join(", ");
                let message = if key == "<<" {
                    format!("YAML merge keys (`<<`) are not supported; allowed keys: {allowed}")
                } else {
                    format!("unknown key `{key}`; allowed keys: {allowed}")
                };
                self.error(&key_path, key_node.pos, message);
                continue;
            }
            if let Some(first) = seen.get(key) {
                let line = first.line;
                self.error(
                    &key_path,
                    key_node.pos,
                    format!("duplicate key `{key}` (first given at line {line})"),
                );
                continue;
            }
            seen.insert(key, key_node.pos);
            fields.entries.push((key, value));
        }
        Some(fields)
    }

    fn required<'n>(&mut self, fields: &Fields<'n>, path: &str, key: &str) -> Option<&'n Node> {
        let node = fields.get(key);
        if node.is_none() {
            self.error(
                &join(path, key),
                fields.pos,
                format!("missing required key `{key}`"),
            );
        }
        node
    }

    /// Any non-empty scalar, as text: `name: 123` is the name "123".
    fn text<'n>(&mut self, node: &'n Node, path: &str, expected: &str) -> Option<&'n str> {
        match node.kind() {
            Kind::Null | Kind::Seq(_) | Kind::Map(_) => {
                let found = node.describe();
                self.error(
                    path,
                    node.pos,
                    format!("expected {expected}, found {found}"),
                );
                None
            }
            _ => node.scalar_text(),
        }
    }

    fn vip_name(&mut self, node: &Node, path: &str) -> Option<String> {
        let text = self.text(node, path, "a VIP name")?;
        let mut chars = text.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let rest_ok = chars
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'));
        if first_ok && rest_ok && text.len() <= MAX_NAME_LEN {
            Some(text.to_string())
        } else {
            self.error(
                path,
                node.pos,
                format!(
                    "{text:?} is not a valid VIP name: use 1-{MAX_NAME_LEN} characters \
                     from a-z, 0-9, '-', '_' and '.', starting with a letter or digit"
                ),
            );
            None
        }
    }

    /// A single IP address usable as a destination (`role` is "a VIP" or
    /// "a backend").
    fn address(&mut self, node: &Node, path: &str, role: &str) -> Option<IpAddr> {
        let text = self.text(node, path, "an IP address")?;
        if let Some((address, prefix)) = text.split_once('/') {
            self.error(
                path,
                node.pos,
                format!(
                    "{text} has a prefix length: write a single address \
                     ({address} without /{prefix})"
                ),
            );
            return None;
        }
        let Ok(address) = text.parse::<IpAddr>() else {
            self.error(
                path,
                node.pos,
                format!("{text:?} is not a valid IPv4 or IPv6 address"),
            );
            return None;
        };
        let reason = match address {
            _ if address.is_unspecified() => Some("the unspecified address".to_string()),
            _ if address.is_loopback() => Some("a loopback address".to_string()),
            _ if address.is_multicast() => Some("a multicast address".to_string()),
            IpAddr::V4(v4) if v4.is_broadcast() => Some("the broadcast address".to_string()),
            IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map(|v4| format!("an IPv4-mapped IPv6 address (write {v4} instead)")),
            IpAddr::V4(_) => None,
        };
        if let Some(reason) = reason {
            self.error(
                path,
                node.pos,
                format!("{address} cannot be {role} address: it is {reason}"),
            );
            return None;
        }
        Some(address)
    }

    /// An integer in 1-65535 (ports and weights share the range).
    fn number(&mut self, node: &Node, path: &str, what: &str) -> Option<u16> {
        match node.kind() {
            Kind::Int(text, value) => {
                let number = value
                    .and_then(|v| u16::try_from(v).ok())
                    .filter(|&v| v != 0);
                if number.is_none() {
                    self.error(
                        path,
                        node.pos,
                        format!("{text} is not a valid {what} (1-65535)"),
                    );
                }
                number
            }
            _ => {
                let found = node.describe();
                self.error(
                    path,
                    node.pos,
                    format!("expected an integer {what} (1-65535), found {found}"),
                );
                None
            }
        }
    }

    /// A VIP's `port:` a port (1-65535), a range `first-last` (both ends
    /// 1-65535, first <= last), or `any`.
    fn ports(&mut self, node: &Node, path: &str) -> Option<PortRange> {
        const FORMS: &str = "a port (1-65535), a port range such as 8000-8099, or `any`";
        let text = match node.kind() {
            Kind::Int(..) => return self.number(node, path, "port").map(PortRange::single),
            Kind::Str(text) => text.trim(),
            _ => {
                let found = node.describe();
                self.error(path, node.pos, format!("expected {FORMS}, found {found}"));
                return None;
            }
        };
        if text == "any" {
            return Some(PortRange::ANY);
        }
        let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
        if digits(text) {
            self.error(
                path,
                node.pos,
                format!(
                    "expected an integer port (1-65535), found the string {text:?}; \
                     write it without quotes"
                ),
            );
            return None;
        }
        let Some((a, b)) = text
            .split_once('-')
            .map(|(a, b)| (a.trim(), b.trim()))
            .filter(|(a, b)| digits(a) && digits(b))
        else {
            self.error(
                path,
                node.pos,
                format!("{text:?} is not a valid port: write {FORMS}"),
            );
            return None;
        };
        // Too many digits for a u32 is out of range all the same.
        let value = |s: &str| s.parse::<u32>().unwrap_or(u32::MAX);
        let (first, last) = (value(a), value(b));
        let valid = |p: u32| (1..=65535).contains(&p);
        if !valid(first) || !valid(last) {
            self.error(
                path,
                node.pos,
                format!("port range {text} is not valid: both ends must be ports (1-65535)"),
            );
            return None;
        }
        if first > last {
            self.error(
                path,
                node.pos,
                format!("port range {text} is reversed: write the lower port first ({b}-{a})"),
            );
            return None;
        }
        Some(PortRange {
            first: first as u16,
            last: last as u16,
        })
    }

    fn session_affinity(&mut self, node: &Node, path: &str) -> Option<SessionAffinity> {
        let text = self.text(node, path, "a session affinity")?;
        let found = SessionAffinity::ALL
            .into_iter()
            .find(|a| a.as_str() == text);
        if found.is_none() {
            let valid: Vec<_> = SessionAffinity::ALL.iter().map(|a| a.as_str()).collect();
            self.error(
                path,
                node.pos,
                format!(
                    "{text:?} is not a valid session affinity; valid values: {}",
                    valid.join(", ")
                ),
            );
        }
        found
    }

    fn nat_forwarding(&mut self, node: &Node, path: &str) -> Option<NatForwarding> {
        let text = self.text(node, path, "a NAT forwarding")?;
        let found = NatForwarding::ALL.into_iter().find(|f| f.as_str() == text);
        if found.is_none() {
            let valid: Vec<_> = NatForwarding::ALL.iter().map(|f| f.as_str()).collect();
            self.error(
                path,
                node.pos,
                format!(
                    "{text:?} is not a valid NAT forwarding; valid values: {}",
                    valid.join(", ")
                ),
            );
        }
        found
    }

    /// An integer in 1-`max`.
    fn bounded(&mut self, node: &Node, path: &str, what: &str, max: u64) -> Option<u64> {
        match node.kind() {
            Kind::Int(text, value) => {
                let number = value
                    .and_then(|v| u64::try_from(v).ok())
                    .filter(|v| (1..=max).contains(v));
                if number.is_none() {
                    self.error(
                        path,
                        node.pos,
                        format!("{text} is not a valid {what} (1-{max})"),
                    );
                }
                number
            }
            _ => {
                let found = node.describe();
                self.error(
                    path,
                    node.pos,
                    format!("expected an integer {what} (1-{max}), found {found}"),
                );
                None
            }
        }
    }

    fn protocol(&mut self, node: &Node, path: &str) -> Option<Protocol> {
        let text = self.text(node, path, "a protocol")?;
        let found = Protocol::ALL.into_iter().find(|p| p.as_str() == text);
        if found.is_none() {
            let valid: Vec<_> = Protocol::ALL.iter().map(|p| p.as_str()).collect();
            self.error(
                path,
                node.pos,
                format!(
                    "{text:?} is not a valid protocol; valid values: {}",
                    valid.join(", ")
                ),
            );
        }
        found
    }

    fn mode(&mut self, node: &Node, path: &str) -> Option<Mode> {
        let text = self.text(node, path, "a mode")?;
        let found = Mode::ALL.into_iter().find(|m| m.as_str() == text);
        if found.is_none() {
            let valid: Vec<_> = Mode::ALL.iter().map(|m| m.as_str()).collect();
            self.error(
                path,
                node.pos,
                format!(
                    "{text:?} is not a valid mode; valid values: {}",
                    valid.join(", ")
                ),
            );
        }
        found
    }

    /// A unicast MAC written as six colon-separated hex octets.
    fn mac(&mut self, node: &Node, path: &str) -> Option<[u8; 6]> {
        let text = self.text(node, path, "a MAC address")?;
        let mut mac = [0u8; 6];
        let mut parts = text.split(':');
        let mut valid = true;
        for byte in &mut mac {
            match parts.next() {
                Some(part) if part.len() == 2 && part.chars().all(|c| c.is_ascii_hexdigit()) => {
                    *byte = u8::from_str_radix(part, 16).unwrap_or_default();
                }
                _ => valid = false,
            }
        }
        if parts.next().is_some() {
            valid = false;
        }
        let problem = if !valid {
            Some(format!(
                "{text:?} is not a valid MAC address: expected six hex octets separated \
                 by colons, like 02:00:00:00:00:01"
            ))
        } else if mac == [0; 6] {
            Some(format!("{text} is not a usable MAC address (all zeros)"))
        } else if mac[0] & 1 == 1 {
            Some(format!(
                "{text} is a multicast or broadcast MAC address; a backend needs a unicast MAC"
            ))
        } else {
            None
        };
        match problem {
            Some(message) => {
                self.error(path, node.pos, message);
                None
            }
            None => Some(mac),
        }
    }

    /// Rejects tags other than the YAML core ones (`!!str`, `!!int`, ...):
    /// custom tags would silently mean nothing here.
    fn check_tags(&mut self, node: &Node, path: &str) {
        if let Some(tag) = &node.tag {
            let core = tag.is_yaml_core_schema()
                && matches!(
                    tag.suffix.as_str(),
                    "str" | "int" | "float" | "bool" | "null" | "seq" | "map"
                );
            if !core {
                self.error(path, node.pos, format!("unsupported YAML tag `{tag}`"));
            }
        }
        match &node.value {
            Value::Scalar { .. } => {}
            Value::Seq(items) => {
                for (i, item) in items.iter().enumerate() {
                    self.check_tags(item, &format!("{path}[{i}]"));
                }
            }
            Value::Map(pairs) => {
                for (key, value) in pairs {
                    let child = join(path, key.scalar_text().unwrap_or("?"));
                    self.check_tags(key, &child);
                    self.check_tags(value, &child);
                }
            }
        }
    }
}
