//! The desired state the map writer is given: VIPs and their backends, in
//! plain Rust types, independent of where they came from (static YAML today,
//! Kubernetes later). Both paths converge here.

use std::fmt;
use std::net::IpAddr;

/// IP protocol numbers Rivora balances.
pub mod proto {
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
}

/// Forwarding mode of a VIP, as the datapath encodes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mode {
    /// Full NAT.
    Nat,
    /// L2 direct server return.
    Dsr,
    /// L3 direct server return over IP-in-IP.
    DsrIpip,
    /// L3 direct server return over GRE.
    DsrGre,
}

impl Mode {
    /// The `enum rv_mode` value the BPF program switches on.
    pub fn abi(self) -> u8 {
        match self {
            Mode::Nat => rivora_abi::mode::NAT,
            Mode::Dsr => rivora_abi::mode::DSR,
            Mode::DsrIpip => rivora_abi::mode::DSR_IPIP,
            Mode::DsrGre => rivora_abi::mode::DSR_GRE,
        }
    }

    /// The name used in config, API and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Nat => "nat",
            Mode::Dsr => "dsr",
            Mode::DsrIpip => "dsr-ipip",
            Mode::DsrGre => "dsr-gre",
        }
    }
}

/// What identifies a VIP in the datapath: an exact (address, port, protocol).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VipKey {
    /// The VIP address.
    pub addr: IpAddr,
    /// The VIP port.
    pub port: u16,
    /// IP protocol number ([`proto`]).
    pub proto: u8,
}

impl fmt::Display for VipKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = match self.proto {
            proto::TCP => "tcp",
            proto::UDP => "udp",
            _ => "?",
        };
        match self.addr {
            IpAddr::V4(a) => write!(f, "{a}:{}/{p}", self.port),
            IpAddr::V6(a) => write!(f, "[{a}]:{}/{p}", self.port),
        }
    }
}

/// What identifies a backend: one server process, shared by every VIP that
/// lists it, so it gets one backend ID (and later one health probe).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendKey {
    /// The backend's own address.
    pub addr: IpAddr,
    /// The port packets are rewritten to.
    pub port: u16,
}

impl fmt::Display for BackendKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.addr {
            IpAddr::V4(a) => write!(f, "{a}:{}", self.port),
            IpAddr::V6(a) => write!(f, "[{a}]:{}", self.port),
        }
    }
}

/// One backend of a VIP.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BackendSpec {
    /// Address and port.
    pub key: BackendKey,
    /// Relative share of new flows (>= 1).
    pub weight: u32,
    /// Needed by DSR modes; zero when unknown.
    pub mac: [u8; 6],
}

/// One VIP as the control plane wants it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VipSpec {
    /// Operator-facing name (unique), shown by the API.
    pub name: String,
    /// Address, port and protocol.
    pub key: VipKey,
    /// Forwarding mode.
    pub mode: Mode,
    /// Backends; may be empty (the VIP then drops as no_healthy_backend).
    pub backends: Vec<BackendSpec>,
}

impl VipSpec {
    /// Backends in a canonical order, so that a reordered list is not
    /// mistaken for a change.
    pub fn sorted_backends(&self) -> Vec<BackendSpec> {
        let mut b = self.backends.clone();
        b.sort();
        b
    }
}
