//! Rivora's L2 speaker: makes a node answer ARP and IPv6 neighbour
//! discovery for VIPs that are configured on no interface.
//!
//! Why: in L2 mode the clients' router (or the clients themselves) sit on
//! the same segment as the balancer and resolve the VIP's MAC address with
//! ARP or NDP. The VIPs are deliberately not interface addresses (the XDP
//! program handles their traffic; configuring them would make the kernel
//! claim them on every interface and on every node), so something must
//! answer for them: the [`Responder`].
//!
//! What it does, on one interface:
//!
//! * answers ARP requests (broadcast or unicast, including RFC 5227 probes)
//!   and neighbour solicitations (to the VIP's solicited-node group or
//!   unicast, including DAD) for VIPs in its set, with the interface's MAC;
//!   NAs carry the Solicited and Override flags and the target link-layer
//!   address option;
//! * announces a VIP with a gratuitous ARP (IPv4) or an unsolicited
//!   neighbour advertisement (IPv6) the moment it starts answering for it,
//!   and again every [`ResponderOptions::announce_interval`];
//! * answers nothing else: not other addresses, not on other interfaces,
//!   not frames it sent itself, not while inactive.
//!
//! Who answers is decided outside: [`Responder::set_active`]. Static mode
//! sets every responder active; Kubernetes mode makes the holder of one
//! cluster-wide Lease active (the others stay inactive and silent).
//!
//! How: two AF_PACKET sockets bound to the interface (one for ARP, one for
//! IPv6), each with a classic BPF filter so the kernel only wakes the
//! responder for requests, driven by one tokio task. For IPv6 the responder
//! adds the VIP's solicited-node Ethernet group to the interface's multicast
//! filter (`PACKET_ADD_MEMBERSHIP`, visible in `ip maddr`), so the NIC passes
//! solicitations for the VIP up without all-multicast or promiscuous mode.
//!
//! Limits: the interface must be Ethernet-like and untagged frames are
//! answered (use the VLAN device, e.g. `eth0.100`, for a tagged segment);
//! the MAC address is read once at start; solicitations with IPv6 extension
//! headers are ignored (none are sent in practice).

#![warn(missing_docs)]

mod frame;
mod packet_socket;
mod responder;

pub use frame::MacAddr;
pub use responder::{
    BURST_SPACING, DEFAULT_ANNOUNCE_INTERVAL, DEFAULT_TAKEOVER_BURST, InvalidVip, Responder,
    ResponderOptions, VipAnnounceStatus,
};
