//! BGPPeers to this node's BGP speaker configuration (pure; the agent calls it on every pass
//! in BGP mode).
//!
//! Why a pure function of (BGPPeers, this node's Node, Secrets): every rule here (which peers
//! a node's selector picks, where the password comes from, what is refused and why) is tested
//! without an API server, and the configuration is recomputed from each snapshot, so a Secret
//! or a label that changes is picked up without a restart.
//!
//! The rules:
//! - A BGPPeer applies to this node when its `nodeSelector` matches the Node's labels (unset:
//!   every node), by the same matcher as AddressPool selectors ([`rivora_k8s_api::selector`]).
//! - Peers are taken oldest first (creationTimestamp, then name): the oldest valid peer's
//!   `localASN` is the speaker's (one speaker per node has one AS); a newer peer with another
//!   `localASN`, or with the same address and port as an older one, is refused.
//! - `passwordSecretRef` names a Secret and a key: a missing Secret or key, a key that is not
//!   UTF-8 or longer than 80 bytes (TCP-MD5's limit) refuses that peer, so no session comes up
//!   without its password, and the problem names the Secret.
//! - `nextHops`: at most one per family (the speaker sends one next hop per family).
//! - The router ID is the Node's first IPv4 InternalIP, else its first IPv4 address of any
//!   type, else four bytes derived from the node's name (RFC 6286 asks only for a non-zero
//!   4-octet number unique in the AS; node names are unique in a cluster).
//! - Nodes labelled [`EXCLUDE_LABEL`] keep their sessions but announce nothing
//!   ([`NodeBgp::announce`]), as kube-proxy and MetalLB treat that label.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Secret};
use rivora_bgp::{PeerConfig, SpeakerConfig};
use rivora_k8s_api::BGPPeer;
use rivora_k8s_api::selector;

/// The well-known Node label that keeps a node from announcing load-balancer addresses.
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
/// TCP-MD5's longest key (RFC 2385 via the kernel's TCP_MD5SIG_MAXKEYLEN).
pub const MAX_PASSWORD_LEN: usize = 80;

/// Why a BGPPeer selected for this node is not (or not fully) configured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerProblem {
    /// A field that does not parse or is out of range.
    BadField {
        /// The BGPPeer.
        peer: String,
        /// The field (`spec.address`, ...).
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The password's Secret or key is missing or unusable.
    Password {
        /// The BGPPeer.
        peer: String,
        /// `namespace/name` of the Secret.
        secret: String,
        /// What is wrong.
        reason: String,
    },
    /// Another `localASN` than the older peer's the speaker already uses.
    LocalAsnConflict {
        /// The refused BGPPeer.
        peer: String,
        /// Its `localASN`.
        asn: u32,
        /// The older BGPPeer whose AS the speaker has.
        holder: String,
        /// That AS.
        holder_asn: u32,
    },
    /// The same address and port as an older peer.
    Duplicate {
        /// The refused BGPPeer.
        peer: String,
        /// The older BGPPeer.
        holder: String,
    },
}

impl PeerProblem {
    /// The BGPPeer the problem is about.
    pub fn peer(&self) -> &str {
        match self {
            PeerProblem::BadField { peer, .. }
            | PeerProblem::Password { peer, .. }
            | PeerProblem::LocalAsnConflict { peer, .. }
            | PeerProblem::Duplicate { peer, .. } => peer,
        }
    }
}

impl fmt::Display for PeerProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PeerProblem::BadField {
                peer,
                field,
                reason,
            } => write!(f, "BGPPeer {peer}: {field}: {reason}; no session"),
            PeerProblem::Password {
                peer,
                secret,
                reason,
            } => write!(
                f,
                "BGPPeer {peer}: spec.passwordSecretRef: Secret {secret}: {reason}; no session without the password"
            ),
            PeerProblem::LocalAsnConflict {
                peer,
                asn,
                holder,
                holder_asn,
            } => write!(
                f,
                "BGPPeer {peer}: spec.localASN {asn} differs from {holder_asn} of the older BGPPeer {holder}; a node's speaker has one AS; no session"
            ),
            PeerProblem::Duplicate { peer, holder } => write!(
                f,
                "BGPPeer {peer}: the same address and port as the older BGPPeer {holder}; no second session"
            ),
        }
    }
}

/// This node's BGP configuration from the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct NodeBgp {
    /// The speaker's configuration; None when no BGPPeer is configured for this node.
    pub config: Option<SpeakerConfig>,
    /// The BGPPeer of each configured peer, in `config.peers` order.
    pub peers: Vec<String>,
    /// What was refused, oldest peer first.
    pub problems: Vec<PeerProblem>,
    /// False when the Node carries [`EXCLUDE_LABEL`]: sessions, but no routes.
    pub announce: bool,
}

/// The router ID: the Node's first IPv4 InternalIP, else its first IPv4 address, else four
/// bytes of a stable hash (FNV-1a) of `node_name`, never 0.0.0.0.
pub fn router_id(node: Option<&Node>, node_name: &str) -> Ipv4Addr {
    let addrs: Vec<(String, Ipv4Addr)> = node
        .and_then(|n| n.status.as_ref())
        .and_then(|s| s.addresses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|a| Some((a.type_.clone(), a.address.parse::<Ipv4Addr>().ok()?)))
        .collect();
    if let Some((_, a)) = addrs
        .iter()
        .find(|(t, _)| t == "InternalIP")
        .or(addrs.first())
    {
        return *a;
    }
    let mut h: u32 = 0x811c_9dc5;
    for b in node_name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    Ipv4Addr::from(if h == 0 { 1 } else { h })
}

/// The Secrets passwords may come from: those of the one namespace rivorad may read Secrets in
/// (its RBAC Role), as the watch delivered them.
#[derive(Clone, Copy, Debug)]
pub struct Passwords<'a> {
    /// The namespace (`rivorad --namespace`).
    pub namespace: &'a str,
    /// Its Secrets.
    pub secrets: &'a [Arc<Secret>],
}

impl<'a> Passwords<'a> {
    /// The Secrets `secrets` of `namespace`.
    pub fn new(namespace: &'a str, secrets: &'a [Arc<Secret>]) -> Self {
        Passwords { namespace, secrets }
    }
}

/// The password of a `passwordSecretRef`, or why there is none.
fn password(from: &Passwords<'_>, r: &rivora_k8s_api::SecretKeyRef) -> Result<String, String> {
    if r.namespace != from.namespace {
        return Err(format!(
            "rivorad reads the BGP passwords' Secrets only in namespace {} (--namespace, \
             the namespace its RBAC Role grants): move the Secret there",
            from.namespace
        ));
    }
    let secret = from
        .secrets
        .iter()
        .find(|s| {
            s.metadata.namespace.as_deref() == Some(r.namespace.as_str())
                && s.metadata.name.as_deref() == Some(r.name.as_str())
        })
        .ok_or_else(|| "not found".to_string())?;
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&r.key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(&r.key))
                .map(|s| s.clone().into_bytes())
        })
        .ok_or_else(|| format!("has no key {:?}", r.key))?;
    let text = String::from_utf8(bytes).map_err(|_| format!("key {:?} is not UTF-8", r.key))?;
    if text.is_empty() {
        return Err(format!("key {:?} is empty", r.key));
    }
    if text.len() > MAX_PASSWORD_LEN {
        return Err(format!(
            "key {:?} is {} bytes, TCP-MD5 takes at most {MAX_PASSWORD_LEN}",
            r.key,
            text.len()
        ));
    }
    Ok(text)
}

/// One BGPPeer as a speaker peer, its local AS, or the problem that refuses it.
fn peer_config(
    p: &BGPPeer,
    name: &str,
    secrets: &Passwords<'_>,
) -> Result<(PeerConfig, u32), PeerProblem> {
    let bad = |field: &'static str, reason: String| PeerProblem::BadField {
        peer: name.to_string(),
        field,
        reason,
    };
    let s = &p.spec;
    let address: IpAddr = s.address.parse().map_err(|_| {
        bad(
            "spec.address",
            format!("{:?} is not an IP address", s.address),
        )
    })?;
    let asn = |field, v: i64| {
        u32::try_from(v)
            .ok()
            .filter(|a| *a != 0)
            .ok_or_else(|| bad(field, format!("{v} is not an AS number (1-4294967295)")))
    };
    let remote_as = asn("spec.peerASN", s.peer_asn)?;
    let local_as = asn("spec.localASN", s.local_asn)?;
    let mut c = PeerConfig::new(address, remote_as);
    c.port = u16::try_from(s.port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| bad("spec.port", format!("{} is not a port", s.port)))?;
    c.hold_time = u16::try_from(s.hold_time_seconds)
        .ok()
        .filter(|h| *h == 0 || *h >= 3)
        .ok_or_else(|| {
            bad(
                "spec.holdTimeSeconds",
                format!("{} is neither 0 nor 3-65535", s.hold_time_seconds),
            )
        })?;
    if let Some(l) = &s.local_address {
        let a: IpAddr = l
            .parse()
            .map_err(|_| bad("spec.localAddress", format!("{l:?} is not an IP address")))?;
        if a.is_ipv4() != address.is_ipv4() {
            return Err(bad(
                "spec.localAddress",
                format!("{a} is not of spec.address's family"),
            ));
        }
        c.local_address = Some(a);
    }
    for h in &s.next_hops {
        let a: IpAddr = h
            .parse()
            .map_err(|_| bad("spec.nextHops", format!("{h:?} is not an IP address")))?;
        let taken = match a {
            IpAddr::V4(v4) => c.next_hop_v4.replace(v4).is_some(),
            IpAddr::V6(v6) => c.next_hop_v6.replace(v6).is_some(),
        };
        if taken {
            return Err(bad(
                "spec.nextHops",
                format!("{a}: at most one next hop per family"),
            ));
        }
    }
    for text in &s.communities {
        let parsed = text
            .split_once(':')
            .and_then(|(a, v)| Some((a.parse::<u16>().ok()?, v.parse::<u16>().ok()?)));
        match parsed {
            Some((a, v)) => c.communities.push(u32::from(a) << 16 | u32::from(v)),
            None => {
                return Err(bad(
                    "spec.communities",
                    format!("{text:?} is not AS:VALUE (each 0-65535)"),
                ));
            }
        }
    }
    if let Some(r) = &s.password_secret_ref {
        c.password = Some(
            password(secrets, r).map_err(|reason| PeerProblem::Password {
                peer: name.to_string(),
                secret: format!("{}/{}", r.namespace, r.name),
                reason,
            })?,
        );
    }
    Ok((c, local_as))
}

/// This node's BGP configuration: the BGPPeers whose `nodeSelector` matches `node` (this
/// node's Node, None before it is known: only peers without a selector apply), with their
/// passwords from `secrets`.
pub fn node_bgp(
    peers: &[Arc<BGPPeer>],
    node: Option<&Node>,
    node_name: &str,
    secrets: &Passwords<'_>,
) -> NodeBgp {
    let labels: BTreeMap<String, String> = node
        .and_then(|n| n.metadata.labels.clone())
        .unwrap_or_default();
    let mut selected: Vec<&BGPPeer> = peers
        .iter()
        .map(Arc::as_ref)
        .filter(|p| selector::matches(p.spec.node_selector.as_ref(), &labels))
        .collect();
    selected.sort_by_key(|p| {
        let ts = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (ts.is_none(), ts, p.metadata.name.clone())
    });
    let mut out = NodeBgp {
        announce: !labels.contains_key(EXCLUDE_LABEL),
        ..NodeBgp::default()
    };
    let mut configured: Vec<PeerConfig> = Vec::new();
    let mut local: Option<(u32, String)> = None;
    for p in selected {
        let name = p.metadata.name.clone().unwrap_or_default();
        let (c, asn) = match peer_config(p, &name, secrets) {
            Ok(v) => v,
            Err(e) => {
                out.problems.push(e);
                continue;
            }
        };
        if let Some((holder_asn, holder)) = &local
            && *holder_asn != asn
        {
            out.problems.push(PeerProblem::LocalAsnConflict {
                peer: name,
                asn,
                holder: holder.clone(),
                holder_asn: *holder_asn,
            });
            continue;
        }
        if let Some(i) = configured
            .iter()
            .position(|o| o.address == c.address && o.port == c.port)
        {
            out.problems.push(PeerProblem::Duplicate {
                peer: name,
                holder: out.peers[i].clone(),
            });
            continue;
        }
        local.get_or_insert((asn, name.clone()));
        configured.push(c);
        out.peers.push(name);
    }
    if let Some((asn, _)) = local {
        out.config = Some(SpeakerConfig {
            local_as: asn,
            router_id: router_id(node, node_name),
            peers: configured,
        });
    }
    out
}

#[cfg(test)]
mod tests;
