//! Checks a [`ClassifierSpec`] against Meridio-2's API rules (L34Route and
//! DistributionGroup) and Rivora's own limits, reporting every problem at
//! once. Every source (static YAML, Kubernetes) runs it before handing a
//! spec to the writer, which can then trust names, slots and sizes.
//!
//! Each [`Problem`] says which object (group or rule, by index and name),
//! which field (named as Meridio-2 and rivorad's YAML spell it), which item
//! of a list, and why, so a source can point at the offending text.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

use super::model::{ByteMatch, ClassifierSpec, GroupSpec, RuleSpec};

/// Most slots (`maxEndpoints`) a group may have. A group's Maglev table
/// for a family has the largest prime <= 100 x max_endpoints entries
/// ([`GroupSpec::table_size`]) and is held whole in the datapath's
/// `cls_table` (`RV_CLS_TABLE_SLOTS`, 1,048,576 entries shared by every
/// group's tables); 4096 slots give at most 409,597 entries, so even the
/// largest group's IPv4 and IPv6 tables fit together. Meridio-2 sets no
/// maximum, but its default is 102 and every slot is one Pod of the group,
/// so 4096 is far above real use. Whether all groups' tables fit together
/// is not checked here.
pub const MAX_SLOTS: u16 = 4096;

/// Most rules that may list one VIP: the datapath evaluates a VIP's rules,
/// in priority order, in a bounded loop (the verifier needs a bound), so a
/// VIP with more rules could not be served.
pub const MAX_RULES_PER_VIP: usize = 32;

/// Most VIPs (`destinationCIDRs`) of one rule (Meridio-2's API limit).
pub const MAX_VIPS_PER_RULE: usize = 100;

/// Most source prefixes (`sourceCIDRs`) of one rule (Meridio-2's limit).
pub const MAX_SOURCES_PER_RULE: usize = 100;

/// Most port ranges on each side (`sourcePorts`, `destinationPorts`) of one
/// rule (Meridio-2's limit).
pub const MAX_PORT_RANGES: usize = 20;

/// Most byte matches (`byteMatches`) of one rule (Meridio-2's limit).
pub const MAX_BYTE_MATCHES: usize = 10;

/// The object a [`Problem`] is about: its index in
/// [`ClassifierSpec::groups`] or [`ClassifierSpec::rules`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Object {
    /// `groups[i]`.
    Group(usize),
    /// `rules[i]`.
    Rule(usize),
}

/// One thing wrong with a [`ClassifierSpec`], located as precisely as the
/// spec allows: object, field, list item, and field of that item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The group or rule.
    pub object: Object,
    /// Its name as given (may be empty: that is then the problem).
    pub name: String,
    /// The field, as Meridio-2 and the YAML spell it: `name`,
    /// `maxEndpoints`, `targets` (groups); `name`, `group`, `priority`,
    /// `destinationCIDRs`, `sourceCIDRs`, `sourcePorts`,
    /// `destinationPorts`, `protocols`, `byteMatches` (rules).
    pub field: &'static str,
    /// The item of a list field, when the problem is about one item.
    pub item: Option<usize>,
    /// The field of that item (`identifier` or `addresses` of a target).
    pub sub: Option<&'static str>,
    /// Why, naming the offending value.
    pub message: String,
}

impl fmt::Display for Problem {
    /// `rule "ns/r1": destinationCIDRs[1]: ...`,
    /// `group "dg-a": targets[0].identifier: ...`; an unnamed object is
    /// `rule #3 (no name)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (kind, index) = match self.object {
            Object::Group(i) => ("group", i),
            Object::Rule(i) => ("rule", i),
        };
        if self.name.is_empty() {
            write!(f, "{kind} #{index} (no name): ")?;
        } else {
            write!(f, "{kind} {:?}: ", self.name)?;
        }
        f.write_str(self.field)?;
        if let Some(item) = self.item {
            write!(f, "[{item}]")?;
        }
        if let Some(sub) = self.sub {
            write!(f, ".{sub}")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// Checks `spec`; Ok when it is clean, else every problem, one message
/// each (a [`Problem`] displayed: object, field, reason).
pub fn validate(spec: &ClassifierSpec) -> Result<(), Vec<String>> {
    let problems = problems(spec);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.iter().map(ToString::to_string).collect())
    }
}

/// Every problem of `spec`, groups first, then rules, each in spec order
/// (the per-VIP rule count last).
pub fn problems(spec: &ClassifierSpec) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut group_names: HashMap<&str, usize> = HashMap::new();
    for (i, group) in spec.groups.iter().enumerate() {
        check_group(&mut out, i, group, &mut group_names);
    }
    let mut rule_names: HashMap<&str, usize> = HashMap::new();
    for (i, rule) in spec.rules.iter().enumerate() {
        check_rule(&mut out, i, rule, &mut rule_names, &group_names);
    }
    check_rules_per_vip(&mut out, spec);
    out
}

/// Builds problems of one object.
struct At<'o> {
    out: &'o mut Vec<Problem>,
    object: Object,
    name: &'o str,
}

impl At<'_> {
    fn field(&mut self, field: &'static str, message: String) {
        self.push(field, None, None, message);
    }

    fn item(&mut self, field: &'static str, item: usize, message: String) {
        self.push(field, Some(item), None, message);
    }

    fn push(
        &mut self,
        field: &'static str,
        item: Option<usize>,
        sub: Option<&'static str>,
        message: String,
    ) {
        self.out.push(Problem {
            object: self.object,
            name: self.name.to_string(),
            field,
            item,
            sub,
            message,
        });
    }
}

/// Why `addr` cannot be a VIP or a target address, if it cannot.
fn unusable(addr: IpAddr) -> Option<String> {
    let what = match addr {
        _ if addr.is_unspecified() => "the unspecified address".to_string(),
        _ if addr.is_loopback() => "a loopback address".to_string(),
        _ if addr.is_multicast() => "a multicast address".to_string(),
        IpAddr::V4(a) if a == Ipv4Addr::BROADCAST => "the broadcast address".to_string(),
        IpAddr::V6(a) => match a.to_ipv4_mapped() {
            Some(v4) => format!("an IPv4-mapped IPv6 address (write {v4})"),
            None => return None,
        },
        IpAddr::V4(_) => return None,
    };
    Some(format!("{addr} is {what}"))
}

fn family(v6: bool) -> &'static str {
    if v6 { "IPv6" } else { "IPv4" }
}

fn check_group<'s>(
    out: &mut Vec<Problem>,
    i: usize,
    group: &'s GroupSpec,
    names: &mut HashMap<&'s str, usize>,
) {
    let mut at = At {
        out,
        object: Object::Group(i),
        name: &group.name,
    };
    if group.name.is_empty() {
        at.field("name", "a group needs a name".to_string());
    } else if let Some(first) = names.get(group.name.as_str()) {
        at.field(
            "name",
            format!("{:?} is also the name of groups[{first}]", group.name),
        );
    } else {
        names.insert(&group.name, i);
    }
    if !(1..=MAX_SLOTS).contains(&group.max_endpoints) {
        at.field(
            "maxEndpoints",
            format!(
                "{} is not 1-{MAX_SLOTS} (the group's Maglev table, the largest prime \
                 <= 100 x maxEndpoints, must fit the classifier's table)",
                group.max_endpoints
            ),
        );
    }
    let mut slots: HashMap<u16, usize> = HashMap::new();
    for (k, target) in group.targets.iter().enumerate() {
        if target.slot >= group.max_endpoints {
            at.push(
                "targets",
                Some(k),
                Some("identifier"),
                format!(
                    "identifier {} is not below maxEndpoints {} (slots are 0-{})",
                    target.slot,
                    group.max_endpoints,
                    group.max_endpoints.saturating_sub(1)
                ),
            );
        }
        if let Some(first) = slots.get(&target.slot) {
            at.push(
                "targets",
                Some(k),
                Some("identifier"),
                format!(
                    "identifier {} is also the identifier of targets[{first}]",
                    target.slot
                ),
            );
        } else {
            slots.insert(target.slot, k);
        }
        if target.v4.is_none() && target.v6.is_none() {
            at.push(
                "targets",
                Some(k),
                Some("addresses"),
                "a target needs at least one address (IPv4, IPv6 or one of each)".to_string(),
            );
        }
        let addrs = [target.v4.map(IpAddr::V4), target.v6.map(IpAddr::V6)];
        for why in addrs.into_iter().flatten().filter_map(unusable) {
            at.push(
                "targets",
                Some(k),
                Some("addresses"),
                format!("{why}, not a target's address"),
            );
        }
    }
}

fn check_rule<'s>(
    out: &mut Vec<Problem>,
    i: usize,
    rule: &'s RuleSpec,
    names: &mut HashMap<&'s str, usize>,
    groups: &HashMap<&str, usize>,
) {
    let mut at = At {
        out,
        object: Object::Rule(i),
        name: &rule.name,
    };
    if rule.name.is_empty() {
        at.field("name", "a rule needs a name".to_string());
    } else if let Some(first) = names.get(rule.name.as_str()) {
        at.field(
            "name",
            format!("{:?} is also the name of rules[{first}]", rule.name),
        );
    } else {
        names.insert(&rule.name, i);
    }
    if rule.group.is_empty() {
        at.field("group", "a rule needs a group".to_string());
    } else if !groups.contains_key(rule.group.as_str()) {
        at.field(
            "group",
            format!("{:?} is not the name of any group", rule.group),
        );
    }
    if rule.priority < 1 {
        at.field(
            "priority",
            format!("{} is below 1 (priorities start at 1)", rule.priority),
        );
    }

    // VIPs.
    if rule.vips.is_empty() {
        at.field(
            "destinationCIDRs",
            "a rule needs at least one VIP".to_string(),
        );
    }
    if rule.vips.len() > MAX_VIPS_PER_RULE {
        at.field(
            "destinationCIDRs",
            format!(
                "{} VIPs; at most {MAX_VIPS_PER_RULE} are allowed",
                rule.vips.len()
            ),
        );
    }
    let mut seen: HashMap<IpAddr, usize> = HashMap::new();
    for (k, vip) in rule.vips.iter().enumerate() {
        if let Some(why) = unusable(*vip) {
            at.item("destinationCIDRs", k, format!("{why}, not a VIP"));
        }
        if let Some(first) = seen.get(vip) {
            at.item(
                "destinationCIDRs",
                k,
                format!("{vip} is listed twice (also destinationCIDRs[{first}])"),
            );
        } else {
            seen.insert(*vip, k);
        }
    }

    // Sources: each of a family some VIP of the rule has.
    let has_v4 = rule.vips.iter().any(IpAddr::is_ipv4);
    let has_v6 = rule.vips.iter().any(IpAddr::is_ipv6);
    if rule.sources.len() > MAX_SOURCES_PER_RULE {
        at.field(
            "sourceCIDRs",
            format!(
                "{} source prefixes; at most {MAX_SOURCES_PER_RULE} are allowed",
                rule.sources.len()
            ),
        );
    }
    for (k, source) in rule.sources.iter().enumerate() {
        if source.prefix_len > source.max_len() {
            at.item(
                "sourceCIDRs",
                k,
                format!(
                    "{source}: prefix length {} is above {} ({})",
                    source.prefix_len,
                    source.max_len(),
                    family(source.addr.is_ipv6())
                ),
            );
        }
        let v6 = source.addr.is_ipv6();
        let covered = if v6 { has_v6 } else { has_v4 };
        if !covered && !rule.vips.is_empty() {
            at.item(
                "sourceCIDRs",
                k,
                format!(
                    "{source} is {} but every VIP of the rule is {} (sources and \
                     destinations must be of one family)",
                    family(v6),
                    family(!v6)
                ),
            );
        }
    }

    // Ports.
    for (field, ranges) in [
        ("sourcePorts", &rule.source_ports),
        ("destinationPorts", &rule.destination_ports),
    ] {
        if ranges.len() > MAX_PORT_RANGES {
            at.field(
                field,
                format!(
                    "{} port ranges; at most {MAX_PORT_RANGES} are allowed",
                    ranges.len()
                ),
            );
        }
        for (k, r) in ranges.iter().enumerate() {
            if r.first > r.last {
                at.item(
                    field,
                    k,
                    format!("port range {}-{}: first port above last", r.first, r.last),
                );
            }
        }
    }

    // Protocols and byte matches.
    if rule.protocols.is_empty() {
        at.field(
            "protocols",
            "a rule needs at least one protocol (TCP, UDP, SCTP)".to_string(),
        );
    }
    if rule.byte_matches.len() > MAX_BYTE_MATCHES {
        at.field(
            "byteMatches",
            format!(
                "{} byte matches; at most {MAX_BYTE_MATCHES} are allowed",
                rule.byte_matches.len()
            ),
        );
    }
    for (k, m) in rule.byte_matches.iter().enumerate() {
        if let Some(why) = byte_match_problem(m) {
            at.item("byteMatches", k, why);
        }
        if !rule.protocols.contains(&m.proto) {
            let listed: Vec<String> = rule.protocols.iter().map(ToString::to_string).collect();
            at.item(
                "byteMatches",
                k,
                format!(
                    "{m} matches {} but the rule's protocols are [{}]",
                    m.proto,
                    listed.join(", ")
                ),
            );
        }
    }
}

/// What is wrong with a byte match built by hand (the parser refuses all
/// of this already).
fn byte_match_problem(m: &ByteMatch) -> Option<String> {
    if !matches!(m.len, 1 | 2 | 4) {
        return Some(format!(
            "{}[{}:{}]: length {} is not 1, 2 or 4",
            m.proto.as_str(),
            m.offset,
            m.len,
            m.len
        ));
    }
    let header = m.proto.header_len();
    if u16::from(m.offset) + u16::from(m.len) > u16::from(header) {
        return Some(format!(
            "{}[{}:{}] reads past the {header}-byte {} header",
            m.proto.as_str(),
            m.offset,
            m.len,
            m.proto
        ));
    }
    let full = if m.len == 4 {
        u32::MAX
    } else {
        (1u32 << (8 * u32::from(m.len))) - 1
    };
    let bytes = if m.len == 1 { "byte" } else { "bytes" };
    if m.mask > full {
        return Some(format!(
            "{m}: mask {:#x} does not fit in {} {bytes}",
            m.mask, m.len
        ));
    }
    if m.value > full {
        return Some(format!(
            "{m}: value {:#x} does not fit in {} {bytes}",
            m.value, m.len
        ));
    }
    None
}

/// At most [`MAX_RULES_PER_VIP`] rules per VIP: reported once per VIP, at
/// the first rule (in spec order) beyond the limit.
fn check_rules_per_vip(out: &mut Vec<Problem>, spec: &ClassifierSpec) {
    let mut by_vip: BTreeMap<IpAddr, Vec<usize>> = BTreeMap::new();
    for (i, rule) in spec.rules.iter().enumerate() {
        let mut vips = rule.vips.clone();
        vips.sort();
        vips.dedup();
        for vip in vips {
            by_vip.entry(vip).or_default().push(i);
        }
    }
    for (vip, rules) in by_vip {
        if rules.len() <= MAX_RULES_PER_VIP {
            continue;
        }
        let i = rules[MAX_RULES_PER_VIP];
        let rule = &spec.rules[i];
        let k = rule.vips.iter().position(|v| *v == vip).unwrap_or(0);
        out.push(Problem {
            object: Object::Rule(i),
            name: rule.name.clone(),
            field: "destinationCIDRs",
            item: Some(k),
            sub: None,
            message: format!(
                "VIP {vip} is listed by {} rules; at most {MAX_RULES_PER_VIP} rules may \
                 list one VIP (the datapath evaluates a VIP's rules in a bounded loop)",
                rules.len()
            ),
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::SourceRange;
    use crate::classifier::model::{PortRange, RuleProto, SctpHash, TargetSpec};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn group(name: &str) -> GroupSpec {
        GroupSpec {
            name: name.to_string(),
            max_endpoints: 32,
            sctp_hash: SctpHash::Ports,
            targets: vec![TargetSpec {
                slot: 0,
                v4: Some("192.168.10.2".parse().unwrap()),
                v6: Some("fd00::2".parse().unwrap()),
            }],
        }
    }

    fn rule(name: &str, group: &str) -> RuleSpec {
        RuleSpec {
            name: name.to_string(),
            priority: 10,
            group: group.to_string(),
            vips: vec![ip("10.0.0.1"), ip("2001:db8::1")],
            sources: vec![SourceRange::new(ip("192.0.2.0"), 24)],
            source_ports: vec![PortRange {
                first: 1024,
                last: 65535,
            }],
            destination_ports: vec![PortRange {
                first: 80,
                last: 80,
            }],
            protocols: BTreeSet::from([RuleProto::Tcp, RuleProto::Udp]),
            byte_matches: vec!["tcp[13:1]&0x02=0x02".parse().unwrap()],
        }
    }

    fn clean() -> ClassifierSpec {
        ClassifierSpec {
            groups: vec![group("dg-a"), group("dg-b")],
            rules: vec![rule("r1", "dg-a"), rule("r2", "dg-b")],
        }
    }

    /// The one problem of `spec`, displayed.
    #[track_caller]
    fn one(spec: &ClassifierSpec) -> String {
        let errs = validate(spec).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:#?}");
        errs.into_iter().next().unwrap()
    }

    #[track_caller]
    fn has(got: &str, prefix: &str, text: &str) {
        assert!(
            got.starts_with(prefix),
            "{got:?} does not start with {prefix:?}"
        );
        assert!(got.contains(text), "{got:?} lacks {text:?}");
    }

    /// The limits are the datapath's (`bpf/rivora_abi.h`): a spec that
    /// passes fits the maps.
    #[test]
    fn limits_match_the_datapath() {
        use rivora_abi as abi;
        assert_eq!(MAX_RULES_PER_VIP, abi::CLS_MAX_RULES_PER_VIP);
        assert_eq!(MAX_PORT_RANGES, abi::CLS_MAX_PORT_RANGES);
        assert_eq!(MAX_BYTE_MATCHES, abi::CLS_MAX_BYTE_MATCHES);
        let biggest = crate::classifier::table_size_for(MAX_SLOTS).unwrap();
        assert_eq!(biggest, 409_597);
        assert!(biggest <= abi::CLS_TABLE_SLOTS);
        for proto in [RuleProto::Tcp, RuleProto::Udp, RuleProto::Sctp] {
            assert!(u32::from(proto.header_len()) <= abi::CLS_HDR_BYTES);
        }
    }

    #[test]
    fn clean_spec_and_empty_spec_pass() {
        assert_eq!(validate(&clean()), Ok(()));
        assert_eq!(validate(&ClassifierSpec::default()), Ok(()));
        // Edges: the limits themselves are fine.
        let mut s = clean();
        s.groups[0].max_endpoints = MAX_SLOTS;
        s.groups[0].targets[0].slot = MAX_SLOTS - 1;
        s.groups[1].max_endpoints = 1;
        s.rules[0].priority = 1;
        s.rules[0].vips = (0..100u32)
            .map(|n| IpAddr::V4(Ipv4Addr::from(0x0a00_0100 + n)))
            .collect();
        s.rules[0].sources = vec![SourceRange::new(ip("0.0.0.0"), 0); 100];
        s.rules[0].source_ports = vec![PortRange::ANY; 20];
        s.rules[0].destination_ports = vec![PortRange::ANY; 20];
        s.rules[0].byte_matches = vec!["tcp[0:2]=80".parse().unwrap(); 10];
        assert_eq!(validate(&s), Ok(()));
    }

    #[test]
    fn group_names() {
        let mut s = clean();
        s.groups[1].name = String::new();
        s.rules.truncate(1);
        has(&one(&s), "group #1 (no name): name: ", "needs a name");
        let mut s = clean();
        s.groups[1].name = "dg-a".into();
        s.rules.truncate(1);
        has(
            &one(&s),
            "group \"dg-a\": name: ",
            "also the name of groups[0]",
        );
    }

    #[test]
    fn group_max_endpoints() {
        let mut s = clean();
        s.groups[0].max_endpoints = 0;
        s.groups[0].targets.clear();
        has(
            &one(&s),
            "group \"dg-a\": maxEndpoints: ",
            "0 is not 1-4096",
        );
        s.groups[0].max_endpoints = MAX_SLOTS + 1;
        has(
            &one(&s),
            "group \"dg-a\": maxEndpoints: ",
            "4097 is not 1-4096",
        );
    }

    #[test]
    fn group_targets() {
        let mut s = clean();
        s.groups[0].targets[0].slot = 32;
        has(
            &one(&s),
            "group \"dg-a\": targets[0].identifier: ",
            "identifier 32 is not below maxEndpoints 32 (slots are 0-31)",
        );
        let mut s = clean();
        let t = s.groups[0].targets[0];
        s.groups[0].targets.push(t);
        has(
            &one(&s),
            "group \"dg-a\": targets[1].identifier: ",
            "identifier 0 is also the identifier of targets[0]",
        );
        let mut s = clean();
        s.groups[0].targets[0].v4 = None;
        s.groups[0].targets[0].v6 = None;
        has(
            &one(&s),
            "group \"dg-a\": targets[0].addresses: ",
            "at least one address",
        );
        let mut s = clean();
        s.groups[0].targets[0].v4 = Some(Ipv4Addr::LOCALHOST);
        has(
            &one(&s),
            "group \"dg-a\": targets[0].addresses: ",
            "127.0.0.1 is a loopback address",
        );
        s.groups[0].targets[0].v4 = None;
        s.groups[0].targets[0].v6 = Some("::ffff:10.1.1.1".parse().unwrap());
        has(
            &one(&s),
            "group \"dg-a\": targets[0].addresses: ",
            "IPv4-mapped",
        );
    }

    #[test]
    fn rule_names_and_group() {
        let mut s = clean();
        s.rules[1].name = String::new();
        has(&one(&s), "rule #1 (no name): name: ", "needs a name");
        s.rules[1].name = "r1".into();
        has(&one(&s), "rule \"r1\": name: ", "also the name of rules[0]");
        let mut s = clean();
        s.rules[1].group = "dg-x".into();
        has(
            &one(&s),
            "rule \"r2\": group: ",
            "\"dg-x\" is not the name of any group",
        );
        s.rules[1].group = String::new();
        has(&one(&s), "rule \"r2\": group: ", "needs a group");
        // A duplicate group name does not make the group unknown.
        let mut s = clean();
        s.groups[1].name = "dg-a".into();
        s.rules[1].group = "dg-a".into();
        has(&one(&s), "group \"dg-a\": name: ", "also the name");
    }

    #[test]
    fn rule_priority() {
        let mut s = clean();
        s.rules[0].priority = 0;
        has(&one(&s), "rule \"r1\": priority: ", "0 is below 1");
        s.rules[0].priority = -5;
        has(&one(&s), "rule \"r1\": priority: ", "-5 is below 1");
    }

    #[test]
    fn rule_vips() {
        let mut s = clean();
        s.rules[0].vips.clear();
        s.rules[0].sources.clear();
        has(
            &one(&s),
            "rule \"r1\": destinationCIDRs: ",
            "at least one VIP",
        );
        s.rules[0].vips = (0..101u32)
            .map(|n| IpAddr::V4(Ipv4Addr::from(0x0a00_0100 + n)))
            .collect();
        has(
            &one(&s),
            "rule \"r1\": destinationCIDRs: ",
            "101 VIPs; at most 100",
        );
        let mut s = clean();
        s.rules[0].vips.push(ip("10.0.0.1"));
        has(
            &one(&s),
            "rule \"r1\": destinationCIDRs[2]: ",
            "10.0.0.1 is listed twice (also destinationCIDRs[0])",
        );
        for (bad, why) in [
            ("0.0.0.0", "unspecified"),
            ("127.0.0.2", "loopback"),
            ("224.0.0.5", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("ff02::1", "multicast"),
            (
                "::ffff:10.0.0.9",
                "IPv4-mapped IPv6 address (write 10.0.0.9)",
            ),
        ] {
            let mut s = clean();
            s.rules[0].vips[1] = ip(bad);
            s.rules[0].sources.clear();
            has(&one(&s), "rule \"r1\": destinationCIDRs[1]: ", why);
        }
    }

    #[test]
    fn rule_sources() {
        let mut s = clean();
        s.rules[0].sources = vec![SourceRange::new(ip("0.0.0.0"), 0); 101];
        has(
            &one(&s),
            "rule \"r1\": sourceCIDRs: ",
            "101 source prefixes; at most 100",
        );
        let mut s = clean();
        s.rules[0]
            .sources
            .push(SourceRange::new(ip("10.0.0.0"), 33));
        has(
            &one(&s),
            "rule \"r1\": sourceCIDRs[1]: ",
            "prefix length 33 is above 32 (IPv4)",
        );
        let mut s = clean();
        s.rules[0]
            .sources
            .push(SourceRange::new(ip("2001:db8::"), 129));
        has(
            &one(&s),
            "rule \"r1\": sourceCIDRs[1]: ",
            "prefix length 129 is above 128 (IPv6)",
        );
        // Dual-stack rules take both families; single-family ones only theirs.
        let mut s = clean();
        s.rules[0]
            .sources
            .push(SourceRange::new(ip("2001:db8:1::"), 48));
        assert_eq!(validate(&s), Ok(()));
        s.rules[0].vips = vec![ip("10.0.0.1")];
        has(
            &one(&s),
            "rule \"r1\": sourceCIDRs[1]: ",
            "2001:db8:1::/48 is IPv6 but every VIP of the rule is IPv4",
        );
        s.rules[0].vips = vec![ip("2001:db8::1")];
        has(
            &one(&s),
            "rule \"r1\": sourceCIDRs[0]: ",
            "192.0.2.0/24 is IPv4 but every VIP of the rule is IPv6",
        );
    }

    #[test]
    fn rule_ports() {
        let mut s = clean();
        s.rules[0].source_ports[0] = PortRange {
            first: 90,
            last: 80,
        };
        has(
            &one(&s),
            "rule \"r1\": sourcePorts[0]: ",
            "port range 90-80: first port above last",
        );
        let mut s = clean();
        s.rules[0]
            .destination_ports
            .push(PortRange { first: 9, last: 8 });
        has(
            &one(&s),
            "rule \"r1\": destinationPorts[1]: ",
            "first port above last",
        );
        let mut s = clean();
        s.rules[0].source_ports = vec![PortRange::ANY; 21];
        has(
            &one(&s),
            "rule \"r1\": sourcePorts: ",
            "21 port ranges; at most 20",
        );
        let mut s = clean();
        s.rules[0].destination_ports = vec![PortRange::ANY; 21];
        has(
            &one(&s),
            "rule \"r1\": destinationPorts: ",
            "21 port ranges; at most 20",
        );
    }

    #[test]
    fn rule_protocols_and_byte_matches() {
        let mut s = clean();
        s.rules[0].protocols.clear();
        s.rules[0].byte_matches.clear();
        has(
            &one(&s),
            "rule \"r1\": protocols: ",
            "at least one protocol",
        );
        let mut s = clean();
        s.rules[0].byte_matches = vec!["tcp[0:2]=80".parse().unwrap(); 11];
        has(
            &one(&s),
            "rule \"r1\": byteMatches: ",
            "11 byte matches; at most 10",
        );
        let mut s = clean();
        s.rules[0].byte_matches.push("sctp[4:4]=0".parse().unwrap());
        has(
            &one(&s),
            "rule \"r1\": byteMatches[1]: ",
            "sctp[4:4]=0 matches SCTP but the rule's protocols are [TCP, UDP]",
        );
        // Hand-built matches the parser would refuse.
        let bad = |offset, len, mask, value| ByteMatch {
            proto: RuleProto::Udp,
            offset,
            len,
            mask,
            value,
        };
        for (m, why) in [
            (bad(0, 3, 0xff, 0), "length 3 is not 1, 2 or 4"),
            (
                bad(7, 2, 0xffff, 0),
                "udp[7:2] reads past the 8-byte UDP header",
            ),
            (bad(255, 4, 0, 0), "reads past"),
            (bad(0, 1, 0x1ff, 0), "mask 0x1ff does not fit in 1 byte"),
            (
                bad(0, 2, 0xffff, 0x10000),
                "value 0x10000 does not fit in 2 bytes",
            ),
        ] {
            let mut s = clean();
            s.rules[0].byte_matches = vec![m];
            has(&one(&s), "rule \"r1\": byteMatches[0]: ", why);
        }
    }

    #[test]
    fn rules_per_vip() {
        let mut s = clean();
        s.rules = (0..MAX_RULES_PER_VIP)
            .map(|n| rule(&format!("r{n:02}"), "dg-a"))
            .collect();
        assert_eq!(validate(&s), Ok(()));
        let mut extra = rule("z", "dg-a");
        extra.vips = vec![ip("10.9.9.9"), ip("10.0.0.1")];
        extra.sources.clear();
        s.rules.push(extra);
        // Both VIPs of the shared rules go over; the 33rd rule lists only one.
        has(
            &one(&s),
            "rule \"z\": destinationCIDRs[1]: ",
            "VIP 10.0.0.1 is listed by 33 rules; at most 32",
        );
        let p = problems(&s);
        assert_eq!(p[0].object, Object::Rule(32));
        assert_eq!((p[0].field, p[0].item), ("destinationCIDRs", Some(1)));
    }

    #[test]
    fn every_problem_is_reported() {
        let mut s = clean();
        s.groups[0].max_endpoints = 0;
        s.rules[0].priority = 0;
        s.rules[0].protocols.clear();
        s.rules[1].group = "nope".into();
        let errs = validate(&s).unwrap_err();
        // maxEndpoints, its target's slot, priority, protocols, the byte
        // match's protocol, the unknown group.
        assert_eq!(errs.len(), 6, "{errs:#?}");
        let p = problems(&s);
        assert_eq!(
            p.iter().map(|p| (p.object, p.field)).collect::<Vec<_>>(),
            vec![
                (Object::Group(0), "maxEndpoints"),
                (Object::Group(0), "targets"),
                (Object::Rule(0), "priority"),
                (Object::Rule(0), "protocols"),
                (Object::Rule(0), "byteMatches"),
                (Object::Rule(1), "group"),
            ]
        );
    }
}
