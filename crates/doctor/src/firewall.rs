//! nftables and iptables rules reduced to what matters for VIP traffic:
//! which destination addresses and ports a rule matches and what it does.
//! Parsing is pure (`nft -j list ruleset` JSON, `iptables-save` text), so
//! the firewall check is tested with rulesets written by hand.

use std::collections::BTreeMap;
use std::net::IpAddr;

use rivora_config::VipConfig;
use serde_json::Value;

use crate::facts::Net;

/// What a rule does to the packets it matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Rewrites addresses (dnat, snat, masquerade, redirect, tproxy; the
    /// name as the tool spells it).
    Nat(String),
    /// Drops.
    Drop,
    /// Rejects.
    Reject,
    /// Accepts.
    Accept,
    /// Anything else (counter, log, jump, mark, ...).
    Other,
}

impl Action {
    /// Whether the rule changes what happens to a VIP's packets (rewrites
    /// or discards them) rather than only letting them pass or counting.
    pub fn interferes(&self) -> bool {
        matches!(self, Action::Nat(_) | Action::Drop | Action::Reject)
    }

    fn describe(&self) -> String {
        match self {
            Action::Nat(n) => n.clone(),
            Action::Drop => "drop".into(),
            Action::Reject => "reject".into(),
            Action::Accept => "accept".into(),
            Action::Other => "no verdict".into(),
        }
    }
}

/// One rule, as far as VIP traffic is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// `nft`, `iptables` or `ip6tables`.
    pub tool: &'static str,
    /// nftables family (`ip`, `ip6`, `inet`); `ip`/`ip6` for iptables.
    pub family: String,
    /// Table.
    pub table: String,
    /// Chain.
    pub chain: String,
    /// nftables rule handle (for `nft delete rule ... handle N`).
    pub handle: Option<u64>,
    /// iptables: the rule as `iptables-save` prints it after `-A CHAIN`.
    pub spec: String,
    /// Destination addresses or prefixes it matches (positively).
    pub daddrs: Vec<Net>,
    /// Destination port ranges it matches (positively).
    pub dports: Vec<(u16, u16)>,
    /// `tcp` or `udp` when the rule names one.
    pub proto: Option<String>,
    /// What it does.
    pub action: Action,
}

/// The rules of one tool.
pub type Ruleset = Vec<Rule>;

impl Rule {
    fn covers_family(&self, ip: IpAddr) -> bool {
        match self.family.as_str() {
            "ip" => ip.is_ipv4(),
            "ip6" => ip.is_ipv6(),
            "inet" => true,
            _ => false,
        }
    }

    fn ports_overlap(&self, vip: &VipConfig) -> bool {
        self.dports.is_empty()
            || self
                .dports
                .iter()
                .any(|&(a, b)| a <= vip.ports.last && vip.ports.first <= b)
    }

    fn proto_matches(&self, vip: &VipConfig) -> bool {
        self.proto
            .as_deref()
            .is_none_or(|p| p == vip.protocol.as_str())
    }

    /// How this rule concerns `vip`: Some(true) when it matches the VIP's
    /// address, Some(false) when it matches its port on any address, None
    /// when it does not concern it.
    pub fn concerns(&self, vip: &VipConfig) -> Option<bool> {
        if !self.covers_family(vip.address) || !self.proto_matches(vip) || !self.ports_overlap(vip)
        {
            return None;
        }
        if self.daddrs.iter().any(|n| n.contains(vip.address)) {
            return Some(true);
        }
        (self.daddrs.is_empty() && !self.dports.is_empty()).then_some(false)
    }

    /// The rule in one line, for the report.
    pub fn describe(&self) -> String {
        match self.tool {
            "nft" => {
                let mut parts = Vec::new();
                if !self.daddrs.is_empty() {
                    let a: Vec<String> = self.daddrs.iter().map(net_text).collect();
                    parts.push(format!("daddr {}", a.join(",")));
                }
                if !self.dports.is_empty() {
                    let p: Vec<String> = self.dports.iter().map(|r| range_text(*r)).collect();
                    parts.push(format!(
                        "{} dport {}",
                        self.proto.as_deref().unwrap_or("th"),
                        p.join(",")
                    ));
                }
                parts.push(self.action.describe());
                format!(
                    "nft {} {} {} handle {}: {}",
                    self.family,
                    self.table,
                    self.chain,
                    self.handle.unwrap_or(0),
                    parts.join(" ")
                )
            }
            tool => format!("{tool} -t {} -A {} {}", self.table, self.chain, self.spec),
        }
    }

    /// How to look at the rule, and the command that removes it.
    pub fn removal(&self) -> String {
        match self.tool {
            "nft" => format!(
                "`nft -a list chain {f} {t} {c}` shows it; `nft delete rule {f} {t} {c} handle {h}` removes it",
                f = self.family,
                t = self.table,
                c = self.chain,
                h = self.handle.unwrap_or(0)
            ),
            tool => format!(
                "`{tool} -t {t} -S {c}` shows it; `{tool} -t {t} -D {c} {s}` removes it",
                t = self.table,
                c = self.chain,
                s = self.spec
            ),
        }
    }
}

fn net_text(n: &Net) -> String {
    let full = if n.addr.is_ipv4() { 32 } else { 128 };
    if n.len == full {
        n.addr.to_string()
    } else {
        format!("{}/{}", n.addr, n.len)
    }
}

fn range_text((a, b): (u16, u16)) -> String {
    if a == b {
        a.to_string()
    } else {
        format!("{a}-{b}")
    }
}

/// Parses `nft -j list ruleset` output: every rule of the ip, ip6 and inet
/// families (others never see routed IP traffic), with named sets resolved.
pub fn parse_nft_json(text: &str) -> Result<Ruleset, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("nft -j output: {e}"))?;
    let items = v["nftables"]
        .as_array()
        .ok_or("nft -j output has no \"nftables\" array")?;
    // Named sets: (family, table, name) -> elements.
    let mut sets: BTreeMap<(String, String, String), Value> = BTreeMap::new();
    for item in items {
        if let Some(s) = item.get("set") {
            let key = (
                s["family"].as_str().unwrap_or("").to_string(),
                s["table"].as_str().unwrap_or("").to_string(),
                s["name"].as_str().unwrap_or("").to_string(),
            );
            sets.insert(key, s.get("elem").cloned().unwrap_or(Value::Null));
        }
    }
    let mut out = Vec::new();
    for item in items {
        let Some(r) = item.get("rule") else { continue };
        let family = r["family"].as_str().unwrap_or("").to_string();
        if !matches!(family.as_str(), "ip" | "ip6" | "inet") {
            continue;
        }
        let table = r["table"].as_str().unwrap_or("").to_string();
        let mut rule = Rule {
            tool: "nft",
            family: family.clone(),
            table: table.clone(),
            chain: r["chain"].as_str().unwrap_or("").to_string(),
            handle: r["handle"].as_u64(),
            spec: String::new(),
            daddrs: Vec::new(),
            dports: Vec::new(),
            proto: None,
            action: Action::Other,
        };
        let resolve = |right: &Value| -> Value {
            match right.as_str().and_then(|s| s.strip_prefix('@')) {
                Some(name) => sets
                    .get(&(family.clone(), table.clone(), name.to_string()))
                    .cloned()
                    .unwrap_or(Value::Null),
                None => right.clone(),
            }
        };
        for e in r["expr"].as_array().into_iter().flatten() {
            if let Some(m) = e.get("match") {
                let op = m["op"].as_str().unwrap_or("==");
                if op == "!=" {
                    continue;
                }
                let right = resolve(&m["right"]);
                if let Some(p) = m["left"].get("payload") {
                    let (proto, field) = (
                        p["protocol"].as_str().unwrap_or(""),
                        p["field"].as_str().unwrap_or(""),
                    );
                    match (proto, field) {
                        ("ip" | "ip6", "daddr") => collect_nets(&right, &mut rule.daddrs),
                        ("tcp" | "udp" | "th", "dport") => {
                            collect_ports(&right, &mut rule.dports);
                            if proto != "th" {
                                rule.proto = Some(proto.to_string());
                            }
                        }
                        _ => {}
                    }
                } else if m["left"]["meta"]["key"].as_str() == Some("l4proto")
                    && let Some(p) = right.as_str()
                    && (p == "tcp" || p == "udp")
                {
                    rule.proto = Some(p.to_string());
                }
                continue;
            }
            for nat in ["dnat", "snat", "masquerade", "redirect", "tproxy"] {
                if e.get(nat).is_some() {
                    rule.action = Action::Nat(nat.to_string());
                }
            }
            if e.get("drop").is_some() {
                rule.action = Action::Drop;
            } else if e.get("reject").is_some() {
                rule.action = Action::Reject;
            } else if e.get("accept").is_some() && rule.action == Action::Other {
                rule.action = Action::Accept;
            }
        }
        out.push(rule);
    }
    Ok(out)
}

/// Addresses and prefixes in an nft JSON value: "10.0.0.1", "10.0.0.0/8",
/// {"prefix": {"addr", "len"}}, {"range": [a, b]} (kept as its first
/// address), {"set": [...]}, set elements {"elem": {"val": ...}}.
fn collect_nets(v: &Value, out: &mut Vec<Net>) {
    match v {
        Value::String(s) => {
            if let Some(n) = parse_net(s) {
                out.push(n);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_nets(x, out)),
        Value::Object(o) => {
            if let Some(p) = o.get("prefix") {
                if let (Some(addr), Some(len)) = (
                    p["addr"].as_str().and_then(|a| a.parse().ok()),
                    p["len"].as_u64(),
                ) {
                    out.push(Net {
                        addr,
                        len: len as u8,
                    });
                }
            } else if let Some(r) = o.get("range").and_then(Value::as_array) {
                // A range a-b: cover it by the prefix of the common bits.
                if let (Some(a), Some(b)) = (
                    r.first()
                        .and_then(Value::as_str)
                        .and_then(|s| s.parse::<IpAddr>().ok()),
                    r.get(1)
                        .and_then(Value::as_str)
                        .and_then(|s| s.parse::<IpAddr>().ok()),
                ) && let Some(n) = covering(a, b)
                {
                    out.push(n);
                }
            } else if let Some(s) = o.get("set") {
                collect_nets(s, out);
            } else if let Some(e) = o.get("elem") {
                collect_nets(&e["val"], out);
            }
        }
        _ => {}
    }
}

/// The shortest prefix holding both `a` and `b`.
fn covering(a: IpAddr, b: IpAddr) -> Option<Net> {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let len = (u32::from(a) ^ u32::from(b)).leading_zeros() as u8;
            Some(Net {
                addr: IpAddr::V4(a),
                len,
            })
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let len = (u128::from(a) ^ u128::from(b)).leading_zeros() as u8;
            Some(Net {
                addr: IpAddr::V6(a),
                len,
            })
        }
        _ => None,
    }
}

fn collect_ports(v: &Value, out: &mut Vec<(u16, u16)>) {
    match v {
        Value::Number(n) => {
            if let Some(p) = n.as_u64().and_then(|p| u16::try_from(p).ok()) {
                out.push((p, p));
            }
        }
        Value::String(s) => {
            if let Ok(p) = s.parse::<u16>() {
                out.push((p, p));
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_ports(x, out)),
        Value::Object(o) => {
            if let Some(r) = o.get("range").and_then(Value::as_array) {
                if let (Some(a), Some(b)) = (
                    r.first().and_then(Value::as_u64),
                    r.get(1).and_then(Value::as_u64),
                ) {
                    out.push((a.min(65535) as u16, b.min(65535) as u16));
                }
            } else if let Some(s) = o.get("set") {
                collect_ports(s, out);
            } else if let Some(e) = o.get("elem") {
                collect_ports(&e["val"], out);
            }
        }
        _ => {}
    }
}

/// "10.0.0.1", "10.0.0.0/8", "fd00::/64" (iptables also writes masks as
/// "/255.255.255.0").
fn parse_net(s: &str) -> Option<Net> {
    let (a, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a.parse().ok()?;
    let full = if addr.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => full,
        Some(l) => match l.parse::<u8>() {
            Ok(n) if n <= full => n,
            Ok(_) => return None,
            Err(_) => match l.parse::<std::net::Ipv4Addr>() {
                Ok(m) => u32::from(m).leading_ones() as u8,
                Err(_) => return None,
            },
        },
    };
    Some(Net { addr, len })
}

/// Splits an iptables-save line into words, keeping "quoted text" (rule
/// comments) as one word.
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut has = false;
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
                has = true;
            }
            c if c.is_whitespace() && !quoted => {
                if has {
                    out.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            c => {
                cur.push(c);
                has = true;
            }
        }
    }
    if has {
        out.push(cur);
    }
    out
}

fn parse_port_list(s: &str, out: &mut Vec<(u16, u16)>) {
    for part in s.split(',') {
        let (a, b) = part.split_once(':').unwrap_or((part, part));
        let a = if a.is_empty() {
            Some(0)
        } else {
            a.parse().ok()
        };
        let b = if b.is_empty() {
            Some(65535)
        } else {
            b.parse().ok()
        };
        if let (Some(a), Some(b)) = (a, b) {
            out.push((a, b));
        }
    }
}

/// Parses `iptables-save` (tool `iptables`) or `ip6tables-save` (tool
/// `ip6tables`) output.
pub fn parse_iptables_save(text: &str, tool: &'static str) -> Ruleset {
    let family = if tool == "ip6tables" { "ip6" } else { "ip" };
    let mut table = String::new();
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.trim().to_string();
            continue;
        }
        let Some(rest) = line.strip_prefix("-A ") else {
            continue;
        };
        let w = words(rest);
        let Some(chain) = w.first() else { continue };
        let mut rule = Rule {
            tool,
            family: family.into(),
            table: table.clone(),
            chain: chain.clone(),
            handle: None,
            spec: w[1..].join(" "),
            daddrs: Vec::new(),
            dports: Vec::new(),
            proto: None,
            action: Action::Other,
        };
        let mut negate = false;
        let mut i = 1;
        while i < w.len() {
            let word = w[i].as_str();
            let next = w.get(i + 1).map(String::as_str).unwrap_or("");
            match word {
                "!" => {
                    negate = true;
                    i += 1;
                    continue;
                }
                "-d" | "--destination" if !negate => {
                    rule.daddrs.extend(next.split(',').filter_map(parse_net));
                }
                "-p" | "--protocol" if !negate && (next == "tcp" || next == "udp") => {
                    rule.proto = Some(next.to_string());
                }
                "--dport" | "--destination-port" | "--dports" | "--destination-ports"
                    if !negate =>
                {
                    parse_port_list(next, &mut rule.dports);
                }
                "-j" | "--jump" => {
                    rule.action = match next {
                        "DNAT" | "SNAT" | "MASQUERADE" | "REDIRECT" | "TPROXY" | "NETMAP" => {
                            Action::Nat(next.to_string())
                        }
                        "DROP" => Action::Drop,
                        "REJECT" => Action::Reject,
                        "ACCEPT" => Action::Accept,
                        _ => Action::Other,
                    };
                }
                _ => {}
            }
            negate = false;
            i += 1;
        }
        out.push(rule);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vip(addr: &str, port: u16, proto: &str) -> VipConfig {
        let text = format!(
            "vips:\n  - name: v\n    address: \"{addr}\"\n    port: {port}\n    protocol: {proto}\n    \
             backends: [ {{ address: \"{}\", port: 8080 }} ]\n",
            if addr.contains(':') {
                "fd00::9"
            } else {
                "10.0.0.9"
            }
        );
        rivora_config::parse(&text, "t.yaml")
            .unwrap()
            .vips
            .remove(0)
    }

    /// What `nft -j list ruleset` printed (nft 1.0.6) for:
    /// table inet fw { set vips { type ipv4_addr; elements = { 10.200.100.1 } }
    ///   chain pre { type nat hook prerouting priority dstnat;
    ///     ip daddr 10.200.100.1 tcp dport 80 dnat ip to 10.0.0.5:8080
    ///     tcp dport { 443, 8000-8100 } redirect to :3128
    ///     ip daddr @vips counter
    ///     ip daddr != 10.200.100.1 drop } }
    const NFT: &str = r#"{"nftables": [{"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
      {"table": {"family": "inet", "name": "fw", "handle": 1}},
      {"set": {"family": "inet", "name": "vips", "table": "fw", "type": "ipv4_addr", "handle": 2, "elem": ["10.200.100.1"]}},
      {"chain": {"family": "inet", "table": "fw", "name": "pre", "handle": 3, "type": "nat", "hook": "prerouting", "prio": -100, "policy": "accept"}},
      {"rule": {"family": "inet", "table": "fw", "chain": "pre", "handle": 4, "expr": [
        {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "10.200.100.1"}},
        {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": 80}},
        {"dnat": {"family": "ip", "addr": "10.0.0.5", "port": 8080}}]}},
      {"rule": {"family": "inet", "table": "fw", "chain": "pre", "handle": 5, "expr": [
        {"match": {"op": "==", "left": {"payload": {"protocol": "tcp", "field": "dport"}}, "right": {"set": [443, {"range": [8000, 8100]}]}}},
        {"redirect": {"port": 3128}}]}},
      {"rule": {"family": "inet", "table": "fw", "chain": "pre", "handle": 6, "expr": [
        {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "@vips"}},
        {"counter": {"packets": 0, "bytes": 0}}]}},
      {"rule": {"family": "inet", "table": "fw", "chain": "pre", "handle": 7, "expr": [
        {"match": {"op": "!=", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "10.200.100.1"}},
        {"drop": null}]}},
      {"rule": {"family": "bridge", "table": "br", "chain": "c", "handle": 8, "expr": [{"drop": null}]}}]}"#;

    #[test]
    fn nft_rules_give_their_destinations_ports_and_verdicts() {
        let rules = parse_nft_json(NFT).unwrap();
        assert_eq!(rules.len(), 4, "the bridge family rule is left out");
        let dnat = &rules[0];
        assert_eq!(dnat.handle, Some(4));
        assert_eq!(dnat.daddrs, vec![parse_net("10.200.100.1").unwrap()]);
        assert_eq!(dnat.dports, vec![(80, 80)]);
        assert_eq!(dnat.proto.as_deref(), Some("tcp"));
        assert_eq!(dnat.action, Action::Nat("dnat".into()));
        assert_eq!(
            dnat.describe(),
            "nft inet fw pre handle 4: daddr 10.200.100.1 tcp dport 80 dnat"
        );
        assert!(
            dnat.removal()
                .contains("`nft delete rule inet fw pre handle 4`")
        );
        assert_eq!(rules[1].dports, vec![(443, 443), (8000, 8100)]);
        assert_eq!(rules[1].action, Action::Nat("redirect".into()));
        assert_eq!(
            rules[2].daddrs,
            vec![parse_net("10.200.100.1").unwrap()],
            "named set"
        );
        assert_eq!(rules[2].action, Action::Other);
        assert!(
            rules[3].daddrs.is_empty(),
            "a negated match matches other addresses"
        );
        assert_eq!(rules[3].action, Action::Drop);

        let web = vip("10.200.100.1", 80, "tcp");
        assert_eq!(rules[0].concerns(&web), Some(true));
        assert_eq!(rules[1].concerns(&web), None, "other ports");
        assert_eq!(rules[2].concerns(&web), Some(true));
        assert_eq!(rules[3].concerns(&web), None);
        assert_eq!(rules[0].concerns(&vip("10.200.100.1", 80, "udp")), None);
        assert_eq!(rules[0].concerns(&vip("10.200.100.2", 80, "tcp")), None);
        assert_eq!(
            rules[1].concerns(&vip("10.9.9.9", 8050, "tcp")),
            Some(false),
            "by port"
        );
        assert_eq!(
            rules[1].concerns(&vip("fd00::1", 443, "tcp")),
            Some(false),
            "inet covers IPv6"
        );
        assert!(parse_nft_json("{}").is_err());
        // An address range is covered by its common prefix.
        let mut nets = Vec::new();
        collect_nets(
            &serde_json::json!({"range": ["10.200.100.0", "10.200.100.255"]}),
            &mut nets,
        );
        assert_eq!(nets, vec![parse_net("10.200.100.0/24").unwrap()]);
    }

    #[test]
    fn iptables_save_rules_give_their_destinations_ports_and_targets() {
        let text = "# Generated by iptables-save v1.8.9\n*nat\n:PREROUTING ACCEPT [0:0]\n\
            -A PREROUTING -d 10.200.100.0/24 -p tcp -m tcp --dport 80 -m comment --comment \"old lb\" -j DNAT --to-destination 10.0.0.5:8080\n\
            -A PREROUTING ! -d 10.200.100.1/32 -j MASQUERADE\nCOMMIT\n*filter\n\
            -A FORWARD -p udp -m multiport --dports 53,5000:5100 -j DROP\n\
            -A INPUT -d 10.200.100.1/255.255.255.255 -j ACCEPT\nCOMMIT\n";
        let rules = parse_iptables_save(text, "iptables");
        assert_eq!(rules.len(), 4);
        assert_eq!(rules[0].table, "nat");
        assert_eq!(rules[0].chain, "PREROUTING");
        assert_eq!(rules[0].daddrs, vec![parse_net("10.200.100.0/24").unwrap()]);
        assert_eq!(rules[0].dports, vec![(80, 80)]);
        assert_eq!(rules[0].action, Action::Nat("DNAT".into()));
        assert!(rules[0].spec.contains("--comment \"old lb\""));
        assert!(
            rules[0]
                .removal()
                .starts_with("`iptables -t nat -S PREROUTING` shows it; `iptables -t nat -D PREROUTING -d 10.200.100.0/24")
        );
        assert!(rules[1].daddrs.is_empty());
        assert_eq!(rules[2].dports, vec![(53, 53), (5000, 5100)]);
        assert_eq!(rules[2].proto.as_deref(), Some("udp"));
        assert_eq!(rules[3].daddrs[0].len, 32);
        let dns = vip("10.1.1.1", 53, "udp");
        assert_eq!(rules[2].concerns(&dns), Some(false));
        assert_eq!(
            rules[0].concerns(&vip("10.200.100.7", 80, "tcp")),
            Some(true)
        );
        assert_eq!(
            rules[0].concerns(&vip("fd00::1", 80, "tcp")),
            None,
            "iptables is IPv4"
        );
    }
}
