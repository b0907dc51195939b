//! Who holds an interface's XDP hook, and what to tell an operator whose
//! attach was refused because of it.
//!
//! The kernel answers a second XDP program on an interface with EBUSY (a
//! program or bpf_link is already there in that mode) or EEXIST (one is
//! there in the other mode: native and generic cannot be active at once).
//! Its errno alone ("Device or resource busy") names neither the holder nor
//! the way out, so both rivorad and rivora-decap ask the kernel which
//! program is attached (rtnetlink `IFLA_XDP`, the same attributes `ip link`
//! prints), whether a bpf_link holds it (then `ip link set ... off` cannot
//! remove it), and which TCX programs sit on the interface, and phrase the
//! remedy for that holder.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use aya::programs::links::LinkType;
use aya::programs::tc::TcAttachType;
use aya::programs::{ProgramError, SchedClassifier};

/// Mode an attached XDP program runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookMode {
    /// In the driver (native).
    Native,
    /// In the generic skb path.
    Generic,
    /// Offloaded to the NIC.
    Offload,
}

impl HookMode {
    /// The `ip link set dev IF <keyword> off` keyword for this mode.
    pub fn ip_keyword(self) -> &'static str {
        match self {
            HookMode::Native => "xdpdrv",
            HookMode::Generic => "xdpgeneric",
            HookMode::Offload => "xdpoffload",
        }
    }

    /// Name as rivorad prints modes.
    pub fn as_str(self) -> &'static str {
        match self {
            HookMode::Native => "native",
            HookMode::Generic => "generic",
            HookMode::Offload => "offload",
        }
    }
}

/// One XDP program attached to an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XdpHolder {
    /// Program ID.
    pub program_id: u32,
    /// Program name ("" if the program cannot be read).
    pub name: String,
    /// Mode it runs in.
    pub mode: HookMode,
    /// The bpf_link holding it, if any (None: attached with netlink, as
    /// `ip link set ... xdp obj` does).
    pub link_id: Option<u32>,
}

/// One TCX program on an interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcxProgram {
    /// "ingress" or "egress".
    pub direction: &'static str,
    /// Program ID.
    pub program_id: u32,
    /// Program name.
    pub name: String,
}

const IFLA_XDP: u16 = 43;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const IFLA_XDP_SKB_PROG_ID: u16 = 6;
const IFLA_XDP_HW_PROG_ID: u16 = 7;
const NLA_TYPE_MASK: u16 = 0x3fff;

/// The XDP programs attached to interface `ifindex` in the calling
/// thread's network namespace, with their names and links.
pub fn xdp_holders(ifindex: u32) -> io::Result<Vec<XdpHolder>> {
    let ids = xdp_program_ids(ifindex)?;
    let links: Vec<(u32, u32)> = aya::programs::loaded_links()
        .filter_map(Result::ok)
        .filter(|l| l.link_type().ok() == Some(LinkType::Xdp))
        .map(|l| (l.program_id(), l.id()))
        .collect();
    Ok(ids
        .into_iter()
        .map(|(mode, program_id)| XdpHolder {
            program_id,
            name: program_name(program_id),
            mode,
            link_id: links
                .iter()
                .find(|(p, _)| *p == program_id)
                .map(|(_, l)| *l),
        })
        .collect())
}

/// The TCX programs on `interface` (both directions); empty if TCX is not
/// available or the query fails.
pub fn tcx_programs(interface: &str) -> Vec<TcxProgram> {
    let mut out = Vec::new();
    for (direction, t) in [
        ("ingress", TcAttachType::Ingress),
        ("egress", TcAttachType::Egress),
    ] {
        if let Ok((_, progs)) = SchedClassifier::query_tcx(interface, t) {
            out.extend(progs.into_iter().map(|p| TcxProgram {
                direction,
                program_id: p.id(),
                name: p.name_as_str().unwrap_or("").to_string(),
            }));
        }
    }
    out
}

fn program_name(id: u32) -> String {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .find(|p| p.id() == id)
        .and_then(|p| p.name_as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Asks rtnetlink for the link's `IFLA_XDP` attributes: one (mode, program
/// ID) per attached program.
fn xdp_program_ids(ifindex: u32) -> io::Result<Vec<(HookMode, u32)>> {
    // SAFETY: plain socket(2); the fd is owned right away.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // nlmsghdr (16) + ifinfomsg (16)
    let mut req = [0u8; 32];
    req[0..4].copy_from_slice(&32u32.to_ne_bytes());
    req[4..6].copy_from_slice(&libc::RTM_GETLINK.to_ne_bytes());
    req[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes()); // sequence
    req[16] = libc::AF_UNSPEC as u8;
    req[20..24].copy_from_slice(&(ifindex as i32).to_ne_bytes());
    // SAFETY: req is a valid buffer of its length.
    let sent = unsafe { libc::send(sock.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 65536];
    // SAFETY: buf is a valid writable buffer of its length.
    let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    parse_getlink_answer(&buf[..n as usize])
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Walks netlink attributes in `b`: (type, payload).
fn attributes(b: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    while let (Some(len), Some(kind)) = (u16_at(b, at), u16_at(b, at + 2)) {
        let len = len as usize;
        if len < 4 || at + len > b.len() {
            break;
        }
        out.push((kind & NLA_TYPE_MASK, &b[at + 4..at + len]));
        at += (len + 3) & !3;
    }
    out
}

fn parse_getlink_answer(msg: &[u8]) -> io::Result<Vec<(HookMode, u32)>> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "short rtnetlink answer");
    let len = u32_at(msg, 0).ok_or_else(bad)? as usize;
    let kind = u16_at(msg, 4).ok_or_else(bad)?;
    if kind == libc::NLMSG_ERROR as u16 {
        let errno = u32_at(msg, 16).ok_or_else(bad)? as i32;
        return Err(io::Error::from_raw_os_error(-errno));
    }
    if kind != libc::RTM_NEWLINK || len > msg.len() || len < 32 {
        return Err(bad());
    }
    let mut out = Vec::new();
    for (t, payload) in attributes(&msg[32..len]) {
        if t != IFLA_XDP {
            continue;
        }
        for (x, v) in attributes(payload) {
            let mode = match x {
                IFLA_XDP_DRV_PROG_ID => HookMode::Native,
                IFLA_XDP_SKB_PROG_ID => HookMode::Generic,
                IFLA_XDP_HW_PROG_ID => HookMode::Offload,
                _ => continue,
            };
            if let Some(id) = u32_at(v, 0).filter(|&id| id != 0) {
                out.push((mode, id));
            }
        }
    }
    Ok(out)
}

/// The errno at the bottom of `e`'s cause chain, if any.
pub fn errno_of(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(io) = c.downcast_ref::<io::Error>() {
            return io.raw_os_error();
        }
        cur = c.source();
    }
    None
}

/// `e` and its causes in one line, each text once: aya's transparent
/// wrappers repeat their inner error's text, which printed as
/// "bpf_link_create failed: bpf_link_create failed: ...".
pub fn flatten(e: &ProgramError) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        let text = c.to_string().replace('`', "");
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        cur = c.source();
    }
    parts.join(": ")
}

/// Who tried to attach, which decides part of the advice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attacher {
    /// rivorad (xdp_ingress).
    Rivorad,
    /// rivora-decap (rv_decap).
    Decap,
}

/// The explanation of a refused XDP attach on `interface`: who holds the
/// hook and how to free it. `errno` is the kernel's answer; `wanted` the
/// mode that was asked for. Returns None when the errno is not about an
/// occupied hook (then the plain error says enough).
pub fn explain_busy(
    interface: &str,
    ifindex: u32,
    errno: Option<i32>,
    wanted: HookMode,
    who: Attacher,
) -> Option<String> {
    if errno != Some(libc::EBUSY) && errno != Some(libc::EEXIST) {
        return None;
    }
    let holders = xdp_holders(ifindex).unwrap_or_default();
    let mut text = String::new();
    if holders.is_empty() {
        text.push_str(&format!(
            "another XDP program holds {interface} (the kernel did not say which)"
        ));
    }
    for (i, h) in holders.iter().enumerate() {
        if i > 0 {
            text.push_str("; ");
        }
        let name = if h.name.is_empty() {
            "(unnamed)".to_string()
        } else {
            format!("\"{}\"", h.name)
        };
        text.push_str(&format!(
            "{interface} already has XDP program {name} (id {}) in {} mode, {}",
            h.program_id,
            h.mode.as_str(),
            match h.link_id {
                Some(l) => format!("held by bpf_link {l}"),
                None => "attached with netlink (no bpf_link)".into(),
            }
        ));
    }
    if holders.iter().any(|h| h.mode != wanted) {
        text.push_str(&format!(
            "; native and generic XDP cannot be active on one interface at once, and {} \
             was asked for",
            wanted.as_str()
        ));
    }
    let tcx = tcx_programs(interface);
    if !tcx.is_empty() {
        let list: Vec<String> = tcx
            .iter()
            .map(|t| format!("{} \"{}\" (id {})", t.direction, t.name, t.program_id))
            .collect();
        text.push_str(&format!(
            "; TCX programs on {interface}: {}",
            list.join(", ")
        ));
    }
    // The way out, per holder.
    let mut fixes: Vec<String> = Vec::new();
    for h in &holders {
        match (h.name.as_str(), h.link_id) {
            ("xdp_ingress", _) => fixes.push(
                "it is Rivora's xdp_ingress: another rivorad runs on this interface (stop it), \
                 or a --persist-datapath installation under another --pin-dir holds it \
                 (`rivorad --uninstall --pin-dir DIR` removes that one)"
                    .into(),
            ),
            ("rv_decap", _) => fixes.push(format!(
                "it is rivora-decap: `rivora-decap status` shows it, \
                 `rivora-decap detach --interface {interface}` removes it (give the \
                 --pin-root it was attached with)"
            )),
            (_, None) => fixes.push(format!(
                "if it is a stray program, remove it with `ip link set dev {interface} {} off`",
                h.mode.ip_keyword()
            )),
            (_, Some(l)) => fixes.push(format!(
                "a bpf_link cannot be removed with `ip link`: stop the process that owns \
                 link {l} or delete its bpffs pin (`bpftool link show id {l}`)"
            )),
        }
    }
    if who == Attacher::Rivorad {
        fixes.push(
            "--xdp-mode picks native or generic for rivorad but does not let two programs \
             share the hook"
                .into(),
        );
    }
    if !fixes.is_empty() {
        let all = fixes.join("; ");
        let mut chars = all.chars();
        text.push_str(". ");
        if let Some(first) = chars.next() {
            text.extend(first.to_uppercase());
            text.push_str(chars.as_str());
        }
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&((payload.len() + 4) as u16).to_ne_bytes());
        v.extend_from_slice(&kind.to_ne_bytes());
        v.extend_from_slice(payload);
        while v.len() % 4 != 0 {
            v.push(0);
        }
        v
    }

    #[test]
    fn getlink_answers_give_each_attached_program_with_its_mode() {
        let mut xdp = attr(2, &[4]); // IFLA_XDP_ATTACHED: multi
        xdp.extend(attr(IFLA_XDP_SKB_PROG_ID, &77u32.to_ne_bytes()));
        xdp.extend(attr(IFLA_XDP_DRV_PROG_ID, &78u32.to_ne_bytes()));
        let mut body = attr(3, b"veth0\0"); // IFLA_IFNAME
        body.extend(attr(IFLA_XDP | 0x8000, &xdp)); // NLA_F_NESTED
        let mut msg = vec![0u8; 32];
        let len = (32 + body.len()) as u32;
        msg[0..4].copy_from_slice(&len.to_ne_bytes());
        msg[4..6].copy_from_slice(&libc::RTM_NEWLINK.to_ne_bytes());
        msg.extend(body);
        assert_eq!(
            parse_getlink_answer(&msg).unwrap(),
            [(HookMode::Generic, 77), (HookMode::Native, 78)]
        );
        // An error answer carries the errno.
        let mut err = vec![0u8; 36];
        err[0..4].copy_from_slice(&36u32.to_ne_bytes());
        err[4..6].copy_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
        err[16..20].copy_from_slice(&(-libc::ENODEV).to_ne_bytes());
        assert_eq!(
            parse_getlink_answer(&err).unwrap_err().raw_os_error(),
            Some(libc::ENODEV)
        );
    }

    #[test]
    fn other_errnos_need_no_explanation() {
        assert_eq!(
            explain_busy(
                "lo",
                1,
                Some(libc::EPERM),
                HookMode::Generic,
                Attacher::Rivorad
            ),
            None
        );
        assert_eq!(
            explain_busy("lo", 1, None, HookMode::Generic, Attacher::Decap),
            None
        );
    }
}
