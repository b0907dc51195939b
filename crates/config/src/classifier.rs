//! The optional `classifier:` section: Meridio-2's distribution groups and
//! L34Routes written as YAML, decoded into a
//! [`rivora_dataplane::classifier::ClassifierSpec`].
//!
//! ```yaml
//! classifier:
//!   groups:
//!     - name: dg-a
//!       maxEndpoints: 32          # optional, default 102
//!       sctpHash: ports           # optional: ports (default) | five-tuple
//!       targets:
//!         - identifier: 0
//!           addresses: [192.168.10.2, "fd00::2"]
//!   rules:
//!     - name: r-web
//!       group: dg-a
//!       priority: 10
//!       destinationCIDRs: [10.0.0.1/32, "2001:db8::1/128"]
//!       sourceCIDRs: [192.0.2.0/24]
//!       sourcePorts: ["1024-65535"]
//!       destinationPorts: [80, "443"]
//!       protocols: [TCP, UDP, SCTP]
//!       byteMatches: ["tcp[13:1]&0x02=0x02"]
//! ```
//!
//! The decoder checks what the text can say wrong (types, unknown keys,
//! value syntax, each at its own line and column); then the dataplane's
//! [`validate::problems`] checks the meaning (names, references, limits,
//! families), and each problem is placed back at the YAML node it is about.
//! A problem of a field that already failed to decode is not reported twice.
//!
//! This file is a child module of `decode` so it can use the decoder's
//! helpers.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;

use rivora_dataplane::SourceRange;
use rivora_dataplane::classifier::validate::{self, MAX_SLOTS, Object};
use rivora_dataplane::classifier::{
    ByteMatch, ClassifierSpec, GroupSpec, PortRange, RuleProto, RuleSpec, SctpHash, TargetSpec,
};

use super::{Decoder, MAX_NAME_LEN, join};
use crate::VipConfig;
use crate::yaml::{Kind, Node, Pos};

const CLASSIFIER_KEYS: &[&str] = &["groups", "rules"];
const GROUP_KEYS: &[&str] = &["name", "maxEndpoints", "sctpHash", "targets"];
const TARGET_KEYS: &[&str] = &["identifier", "addresses"];
const RULE_KEYS: &[&str] = &[
    "name",
    "group",
    "priority",
    "destinationCIDRs",
    "sourceCIDRs",
    "sourcePorts",
    "destinationPorts",
    "protocols",
    "byteMatches",
];

/// A group's `maxEndpoints` when none is given (Meridio-2's default).
const DEFAULT_MAX_ENDPOINTS: u16 = 102;

/// What a decoded `classifier:` section holds: the spec, and where its
/// VIPs were written (for the check against `vips:`).
#[derive(Default)]
pub(super) struct ClassifierDraft {
    pub spec: ClassifierSpec,
    /// Each VIP of each rule: address, YAML path, position.
    vips: Vec<(IpAddr, String, Pos)>,
}

/// Where one list item of a field was written, and the fields inside it.
struct ItemLoc {
    /// Its index in the YAML list (items that failed are left out of the
    /// spec, so this may differ from the spec's index).
    index: usize,
    pos: Pos,
    subs: Vec<(&'static str, Pos)>,
}

/// Where a field's value was written, and its accepted items.
struct FieldLoc {
    pos: Pos,
    items: Vec<ItemLoc>,
}

/// Where a group or rule was written, and which of its fields failed to
/// decode (the validator's view of those is not reported).
struct Loc {
    path: String,
    pos: Pos,
    fields: HashMap<&'static str, FieldLoc>,
    failed: HashSet<&'static str>,
    /// Not even a mapping: nothing of it is reported by the validator.
    all_failed: bool,
}

impl Loc {
    fn new(path: String, pos: Pos) -> Self {
        Loc {
            path,
            pos,
            fields: HashMap::new(),
            failed: HashSet::new(),
            all_failed: false,
        }
    }

    fn field(&mut self, key: &'static str, pos: Pos) {
        self.fields.insert(
            key,
            FieldLoc {
                pos,
                items: Vec::new(),
            },
        );
    }

    fn failed_if(&mut self, failed: bool, key: &'static str) {
        if failed {
            self.failed.insert(key);
        }
    }

    /// Whether the validator's problem about `field` may be spurious: the
    /// field, or one it is checked against, failed to decode.
    fn hides(&self, field: &str) -> bool {
        let depends_on = match field {
            "targets" => Some("maxEndpoints"),
            "sourceCIDRs" => Some("destinationCIDRs"),
            "byteMatches" => Some("protocols"),
            _ => None,
        };
        self.all_failed
            || self.failed.contains(field)
            || depends_on.is_some_and(|d| self.failed.contains(d))
    }
}

impl Decoder {
    /// The `classifier:` mapping.
    pub(super) fn classifier(&mut self, node: &Node, path: &str) -> ClassifierDraft {
        let mut draft = ClassifierDraft::default();
        let Some(fields) = self.mapping(
            node,
            path,
            "the classifier (a mapping with the keys groups, rules)",
            CLASSIFIER_KEYS,
        ) else {
            return draft;
        };
        let mut locs: Vec<(Object, Loc)> = Vec::new();
        if let Some(n) = fields.optional("groups") {
            let gpath = join(path, "groups");
            for (i, item) in self.list(n, &gpath, "a list of groups").iter().enumerate() {
                let mut loc = Loc::new(format!("{gpath}[{i}]"), item.pos);
                let group = self.group(item, &mut loc);
                draft.spec.groups.push(group);
                locs.push((Object::Group(i), loc));
            }
        }
        if let Some(n) = fields.optional("rules") {
            let rpath = join(path, "rules");
            for (i, item) in self.list(n, &rpath, "a list of rules").iter().enumerate() {
                let mut loc = Loc::new(format!("{rpath}[{i}]"), item.pos);
                let rule = self.rule(item, &mut loc, &mut draft.vips);
                draft.spec.rules.push(rule);
                locs.push((Object::Rule(i), loc));
            }
        }
        let locs: HashMap<Object, Loc> = locs.into_iter().collect();
        for problem in validate::problems(&draft.spec) {
            let Some(loc) = locs.get(&problem.object) else {
                continue;
            };
            if loc.hides(problem.field) {
                continue;
            }
            let mut path = join(&loc.path, problem.field);
            let mut pos = loc.pos;
            if let Some(field) = loc.fields.get(problem.field) {
                pos = field.pos;
                if let Some(item) = problem.item.and_then(|k| field.items.get(k)) {
                    path = format!("{path}[{}]", item.index);
                    pos = item.pos;
                    if let Some(sub) = problem.sub {
                        path = join(&path, sub);
                        if let Some((_, p)) = item.subs.iter().find(|(s, _)| *s == sub) {
                            pos = *p;
                        }
                    }
                }
            }
            self.error(&path, pos, problem.message);
        }
        draft
    }

    /// A classifier VIP is a whole address: no `vips:` entry may use it.
    pub(super) fn check_classifier_vips(&mut self, draft: &ClassifierDraft, vips: &[VipConfig]) {
        let mut reported = HashSet::new();
        for (address, path, pos) in &draft.vips {
            let Some(vip) = vips.iter().find(|v| v.address == *address) else {
                continue;
            };
            if !reported.insert((*address, path.clone())) {
                continue;
            }
            self.error(
                path,
                *pos,
                format!(
                    "{address} is also the address of VIP `{}` under `vips:`; a classifier \
                     VIP takes every packet to its address, so it cannot share it with a \
                     `vips:` entry: use another address for one of them",
                    vip.name
                ),
            );
        }
    }

    fn group(&mut self, node: &Node, loc: &mut Loc) -> GroupSpec {
        let path = loc.path.clone();
        let mut group = GroupSpec {
            name: String::new(),
            max_endpoints: DEFAULT_MAX_ENDPOINTS,
            sctp_hash: SctpHash::default(),
            targets: Vec::new(),
        };
        let Some(fields) = self.mapping(
            node,
            &path,
            "a group (a mapping with the keys name, maxEndpoints, sctpHash, targets)",
            GROUP_KEYS,
        ) else {
            loc.all_failed = true;
            return group;
        };
        let before = self.errors.len();
        if let Some(n) = self.required(&fields, &path, "name") {
            loc.field("name", n.pos);
            group.name = self
                .object_name(n, &join(&path, "name"), "group")
                .unwrap_or_default();
        }
        loc.failed_if(self.errors.len() > before, "name");

        if let Some(n) = fields.optional("maxEndpoints") {
            loc.field("maxEndpoints", n.pos);
            let p = join(&path, "maxEndpoints");
            match self.integer(n, &p, "maxEndpoints", 1, i128::from(MAX_SLOTS)) {
                Some(v) => group.max_endpoints = v as u16,
                None => loc.failed_if(true, "maxEndpoints"),
            }
        }

        if let Some(n) = fields.optional("sctpHash") {
            let p = join(&path, "sctpHash");
            if let Some(text) = self.text(n, &p, "an SCTP hash (ports or five-tuple)") {
                match [SctpHash::Ports, SctpHash::FiveTuple]
                    .into_iter()
                    .find(|h| h.as_str() == text)
                {
                    Some(h) => group.sctp_hash = h,
                    None => self.error(
                        &p,
                        n.pos,
                        format!(
                            "{text:?} is not a valid sctpHash; valid values: ports, five-tuple"
                        ),
                    ),
                }
            }
        }

        let before = self.errors.len();
        if let Some(n) = self.required(&fields, &path, "targets") {
            let tpath = join(&path, "targets");
            let mut items = Vec::new();
            for (k, item) in self.list(n, &tpath, "a list of targets").iter().enumerate() {
                if let Some((target, subs)) = self.target(item, &format!("{tpath}[{k}]")) {
                    group.targets.push(target);
                    items.push(ItemLoc {
                        index: k,
                        pos: item.pos,
                        subs,
                    });
                }
            }
            loc.fields.insert("targets", FieldLoc { pos: n.pos, items });
        }
        loc.failed_if(self.errors.len() > before, "targets");
        group
    }

    /// One target; None when some of it is wrong (reported).
    fn target(
        &mut self,
        node: &Node,
        path: &str,
    ) -> Option<(TargetSpec, Vec<(&'static str, Pos)>)> {
        let fields = self.mapping(
            node,
            path,
            "a target (a mapping with the keys identifier, addresses)",
            TARGET_KEYS,
        )?;
        let mut subs = Vec::new();
        let slot = self.required(&fields, path, "identifier").and_then(|n| {
            subs.push(("identifier", n.pos));
            let max = i128::from(MAX_SLOTS) - 1;
            self.integer(n, &join(path, "identifier"), "identifier", 0, max)
        });
        let mut ok = true;
        let (mut v4, mut v6) = (None, None);
        if let Some(n) = self.required(&fields, path, "addresses") {
            subs.push(("addresses", n.pos));
            let apath = join(path, "addresses");
            for (j, a) in self
                .list(n, &apath, "a list of addresses")
                .iter()
                .enumerate()
            {
                let p = format!("{apath}[{j}]");
                match self.plain_address(a, &p) {
                    Some(IpAddr::V4(x)) if v4.is_none() => v4 = Some(x),
                    Some(IpAddr::V6(x)) if v6.is_none() => v6 = Some(x),
                    Some(addr) => {
                        let family = if addr.is_ipv4() { "IPv4" } else { "IPv6" };
                        self.error(
                            &p,
                            a.pos,
                            format!(
                                "{addr} is a second {family} address: a target has at most \
                                 one address per family"
                            ),
                        );
                        ok = false;
                    }
                    None => ok = false,
                }
            }
        } else {
            ok = false;
        }
        let slot = slot? as u16;
        ok.then_some((TargetSpec { slot, v4, v6 }, subs))
    }

    fn rule(
        &mut self,
        node: &Node,
        loc: &mut Loc,
        vips: &mut Vec<(IpAddr, String, Pos)>,
    ) -> RuleSpec {
        let path = loc.path.clone();
        let mut rule = RuleSpec {
            name: String::new(),
            priority: 1,
            group: String::new(),
            vips: Vec::new(),
            sources: Vec::new(),
            source_ports: Vec::new(),
            destination_ports: Vec::new(),
            protocols: BTreeSet::new(),
            byte_matches: Vec::new(),
        };
        let Some(fields) = self.mapping(
            node,
            &path,
            "a rule (a mapping with the keys name, group, priority, destinationCIDRs, \
             sourceCIDRs, sourcePorts, destinationPorts, protocols, byteMatches)",
            RULE_KEYS,
        ) else {
            loc.all_failed = true;
            return rule;
        };

        for (key, what) in [("name", "rule"), ("group", "group")] {
            let before = self.errors.len();
            if let Some(n) = self.required(&fields, &path, key) {
                loc.field(key, n.pos);
                let name = self.object_name(n, &join(&path, key), what);
                let name = name.unwrap_or_default();
                if key == "name" {
                    rule.name = name;
                } else {
                    rule.group = name;
                }
            }
            loc.failed_if(self.errors.len() > before, key);
        }

        let before = self.errors.len();
        if let Some(n) = self.required(&fields, &path, "priority") {
            loc.field("priority", n.pos);
            let max = i128::from(i32::MAX);
            if let Some(p) = self.integer(n, &join(&path, "priority"), "priority", 1, max) {
                rule.priority = p as i32;
            }
        }
        loc.failed_if(self.errors.len() > before, "priority");

        // destinationCIDRs: required.
        let key = "destinationCIDRs";
        let before = self.errors.len();
        if let Some(n) = self.required(&fields, &path, key) {
            let fpath = join(&path, key);
            rule.vips = self.items(n, &fpath, "a list of VIPs", loc, key, |d, item, p| {
                d.vip_cidr(item, p)
            });
            for (vip, item) in rule.vips.iter().zip(&loc.fields[key].items) {
                vips.push((*vip, format!("{fpath}[{}]", item.index), item.pos));
            }
        }
        loc.failed_if(self.errors.len() > before, key);

        let key = "sourceCIDRs";
        if let Some(n) = fields.optional(key) {
            let before = self.errors.len();
            let fpath = join(&path, key);
            rule.sources = self.items(n, &fpath, "a list of prefixes", loc, key, |d, item, p| {
                let text = d.text(item, p, "a prefix such as 192.0.2.0/24")?;
                match text.trim().parse::<SourceRange>() {
                    Ok(s) => Some(s),
                    Err(e) => {
                        d.error(p, item.pos, e);
                        None
                    }
                }
            });
            loc.failed_if(self.errors.len() > before, key);
        }

        for key in ["sourcePorts", "destinationPorts"] {
            if let Some(n) = fields.optional(key) {
                let before = self.errors.len();
                let fpath = join(&path, key);
                let ports = self.items(n, &fpath, "a list of ports", loc, key, |d, item, p| {
                    d.port_range(item, p)
                });
                if key == "sourcePorts" {
                    rule.source_ports = ports;
                } else {
                    rule.destination_ports = ports;
                }
                loc.failed_if(self.errors.len() > before, key);
            }
        }

        let key = "protocols";
        let before = self.errors.len();
        if let Some(n) = self.required(&fields, &path, key) {
            let fpath = join(&path, key);
            let protocols = self.items(n, &fpath, "a list of protocols", loc, key, |d, item, p| {
                d.rule_proto(item, p)
            });
            let items = &loc.fields[key].items;
            for (k, proto) in protocols.iter().enumerate() {
                if let Some(first) = protocols[..k].iter().position(|q| q == proto) {
                    let item = &items[k];
                    self.error(
                        &format!("{fpath}[{}]", item.index),
                        item.pos,
                        format!(
                            "{proto} is listed twice (also {fpath}[{}])",
                            items[first].index
                        ),
                    );
                }
            }
            rule.protocols = protocols.into_iter().collect();
        }
        loc.failed_if(self.errors.len() > before, key);

        let key = "byteMatches";
        if let Some(n) = fields.optional(key) {
            let before = self.errors.len();
            let fpath = join(&path, key);
            rule.byte_matches = self.items(
                n,
                &fpath,
                "a list of byte matches",
                loc,
                key,
                |d, item, p| {
                    let text = match item.kind() {
                        Kind::Str(t) => t,
                        _ => {
                            let found = item.describe();
                            d.error(
                                p,
                                item.pos,
                                format!(
                                    "expected a byte match such as \"tcp[13:1]&0x02=0x02\", \
                                     found {found}"
                                ),
                            );
                            return None;
                        }
                    };
                    match text.parse::<ByteMatch>() {
                        Ok(m) => Some(m),
                        Err(e) => {
                            d.error(p, item.pos, e);
                            None
                        }
                    }
                },
            );
            loc.failed_if(self.errors.len() > before, key);
        }
        rule
    }

    /// The items of a list field, each decoded by `one` (None: reported
    /// and left out); records where the accepted ones were written.
    fn items<T>(
        &mut self,
        node: &Node,
        path: &str,
        expected: &str,
        loc: &mut Loc,
        key: &'static str,
        mut one: impl FnMut(&mut Self, &Node, &str) -> Option<T>,
    ) -> Vec<T> {
        let mut out = Vec::new();
        let mut items = Vec::new();
        for (k, item) in self.list(node, path, expected).iter().enumerate() {
            if let Some(v) = one(self, item, &format!("{path}[{k}]")) {
                out.push(v);
                items.push(ItemLoc {
                    index: k,
                    pos: item.pos,
                    subs: Vec::new(),
                });
            }
        }
        loc.fields.insert(
            key,
            FieldLoc {
                pos: node.pos,
                items,
            },
        );
        out
    }

    /// The items of a list (none, reported, when it is not one).
    fn list<'n>(&mut self, node: &'n Node, path: &str, expected: &str) -> &'n [Node] {
        match node.kind() {
            Kind::Seq(items) => items,
            _ => {
                let found = node.describe();
                self.error(
                    path,
                    node.pos,
                    format!("expected {expected}, found {found}"),
                );
                &[]
            }
        }
    }

    /// An integer in `min..=max`.
    fn integer(
        &mut self,
        node: &Node,
        path: &str,
        what: &str,
        min: i128,
        max: i128,
    ) -> Option<i128> {
        match node.kind() {
            Kind::Int(text, value) => {
                let v = value.filter(|v| (min..=max).contains(v));
                if v.is_none() {
                    self.error(
                        path,
                        node.pos,
                        format!("{text} is not a valid {what} ({min}-{max})"),
                    );
                }
                v
            }
            _ => {
                let found = node.describe();
                self.error(
                    path,
                    node.pos,
                    format!("expected an integer {what} ({min}-{max}), found {found}"),
                );
                None
            }
        }
    }

    /// A group or rule name (`what`), or a rule's reference to a group:
    /// the VIP names' rule, so it is safe in metric labels and file names.
    fn object_name(&mut self, node: &Node, path: &str, what: &str) -> Option<String> {
        let text = self.text(node, path, &format!("a {what} name"))?;
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
                    "{text:?} is not a valid {what} name: use 1-{MAX_NAME_LEN} characters \
                     from a-z, 0-9, '-', '_' and '.', starting with a letter or digit"
                ),
            );
            None
        }
    }

    /// A single address, no prefix (what is usable is the validator's).
    fn plain_address(&mut self, node: &Node, path: &str) -> Option<IpAddr> {
        let text = self.text(node, path, "an IP address")?.trim();
        match text.parse::<IpAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                let why = if text.contains('/') {
                    "write a single address, without a prefix length"
                } else {
                    "not a valid IPv4 or IPv6 address"
                };
                self.error(path, node.pos, format!("{text:?}: {why}"));
                None
            }
        }
    }

    /// A VIP: `ADDR`, `ADDR/32` (IPv4) or `ADDR/128` (IPv6).
    fn vip_cidr(&mut self, node: &Node, path: &str) -> Option<IpAddr> {
        let text = self.text(node, path, "a VIP such as 10.0.0.1/32")?.trim();
        let (addr, len) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (text, None),
        };
        let Ok(address) = addr.parse::<IpAddr>() else {
            self.error(
                path,
                node.pos,
                format!("{text:?} is not an IPv4 or IPv6 address (with /32 or /128)"),
            );
            return None;
        };
        let host = if address.is_ipv4() { "32" } else { "128" };
        match len {
            Some(l) if l != host => {
                self.error(
                    path,
                    node.pos,
                    format!(
                        "{text} is not a single address: a VIP is a /32 (IPv4) or /128 \
                         (IPv6), write {address}/{host} or {address}"
                    ),
                );
                None
            }
            _ => Some(address),
        }
    }

    /// A port range: an integer port, or the text `N`, `N-M` or `any`.
    fn port_range(&mut self, node: &Node, path: &str) -> Option<PortRange> {
        let text = match node.kind() {
            Kind::Int(text, _) | Kind::Str(text) => text,
            _ => {
                let found = node.describe();
                self.error(
                    path,
                    node.pos,
                    format!(
                        "expected a port, a range such as \"1024-65535\", or any; found {found}"
                    ),
                );
                return None;
            }
        };
        match text.parse::<PortRange>() {
            Ok(r) => Some(r),
            Err(e) => {
                self.error(path, node.pos, e);
                None
            }
        }
    }

    /// `TCP`, `UDP` or `SCTP` (Meridio-2's spelling).
    fn rule_proto(&mut self, node: &Node, path: &str) -> Option<RuleProto> {
        let text = self.text(node, path, "a protocol (TCP, UDP, SCTP)")?;
        let all = [RuleProto::Tcp, RuleProto::Udp, RuleProto::Sctp];
        if let Some(p) = all.into_iter().find(|p| p.to_string() == text) {
            return Some(p);
        }
        let hint = all
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(text))
            .map(|p| format!(" (write {p})"))
            .unwrap_or_default();
        self.error(
            path,
            node.pos,
            format!("{text:?} is not a valid protocol{hint}; valid values: TCP, UDP, SCTP"),
        );
        None
    }
}
