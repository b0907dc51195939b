//! The stage array (bpf/stages.h) across restarts, on a real interface of
//! a namespace of the test's own: after a persistent datapath's loader has
//! gone (every fd closed, only pins left), the attached xdp_ingress still
//! reaches its stages (the kernel empties an unpinned program array when
//! its loader goes); a hot upgrade leaves exactly one array pinned once
//! the grace period is over; and a program whose array was removed hands
//! its rare packets to the kernel, counted as `passed_stage_missing`.

mod common;

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use std::os::fd::{AsFd, AsRawFd};

use aya::programs::{ProgramFd, loaded_programs};
use common::raw::*;
use common::*;
use rivora_abi as abi;
use rivora_dataplane::{AttachOptions, XdpModeRequest, proto, stages};
use rivora_lab::Netns;

const VIP4: &str = "10.203.100.1";
const CLIENT4: &str = "10.203.0.7";
const ROUTER4: &str = "10.203.9.1";
const BACKEND4: &str = "10.203.1.11";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Removes every pin of the test's directory, whatever happened.
struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = rivora_dataplane::remove_pins(&self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The loaded program of kernel ID `id` (held by a link): an fd of it.
fn program_by_id(id: u32) -> ProgramFd {
    loaded_programs()
        .flatten()
        .find(|p| p.id() == id)
        .unwrap_or_else(|| panic!("program {id} is no longer loaded"))
        .fd()
        .unwrap()
}

/// BPF_PROG_TEST_RUN of the program `prog` (not one aya loaded, so by
/// the raw syscall): the verdict and the frame it left.
fn run_prog(prog: &ProgramFd, frame: &[u8]) -> (u32, Vec<u8>) {
    #[repr(C)]
    #[derive(Default)]
    struct TestAttr {
        prog_fd: u32,
        retval: u32,
        data_size_in: u32,
        data_size_out: u32,
        data_in: u64,
        data_out: u64,
        repeat: u32,
        duration: u32,
        ctx_size_in: u32,
        ctx_size_out: u32,
        ctx_in: u64,
        ctx_out: u64,
        flags: u32,
        cpu: u32,
        batch_size: u32,
        _pad: u32,
    }
    const BPF_PROG_TEST_RUN: libc::c_long = 10;
    let mut out = vec![0u8; frame.len() + 512];
    let mut attr = TestAttr {
        prog_fd: prog.as_fd().as_raw_fd() as u32,
        data_size_in: frame.len() as u32,
        data_size_out: out.len() as u32,
        data_in: frame.as_ptr() as u64,
        data_out: out.as_mut_ptr() as u64,
        repeat: 1,
        ..Default::default()
    };
    // SAFETY: the bpf syscall with an attr of its declared size whose
    // pointers address live buffers of the sizes given.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            &mut attr as *mut TestAttr,
            std::mem::size_of::<TestAttr>(),
        )
    };
    assert_eq!(
        rc,
        0,
        "BPF_PROG_TEST_RUN: {}",
        std::io::Error::last_os_error()
    );
    out.truncate(attr.data_size_out as usize);
    (attr.retval, out)
}

/// The IPv4 destination of an untagged frame.
fn dst4(frame: &[u8]) -> IpAddr {
    IpAddr::from(<[u8; 4]>::try_from(&frame[30..34]).unwrap())
}

/// An ICMP "fragmentation needed" from a router about the reply
/// VIP:80 -> client:40200 of the test's TCP flow.
fn icmp_error() -> Vec<u8> {
    let (c, v) = (ip(CLIENT4), ip(VIP4));
    let reply = tcp(v, c, 80, 40200, 0x18, &[7; 16]);
    let mut quoted = ipv4(v, c, TCP, 3, false, 0, &[], reply.len());
    quoted.extend_from_slice(&reply[..8]);
    let msg = icmp4(3, 4, [0, 0, 5, 0x28], &quoted);
    frame(ip(ROUTER4), v, ICMP, &[], &msg)
}

/// The first and a later fragment of one UDP datagram client -> VIP:53.
fn fragments() -> (Vec<u8>, Vec<u8>) {
    let (c, v) = (ip(CLIENT4), ip(VIP4));
    let first_l4 = udp(c, v, 40201, 53, &[7; 64]);
    let mut first = ipv4(c, v, UDP, 77, true, 0, &[], first_l4.len());
    first.extend_from_slice(&first_l4);
    let mut later = ipv4(c, v, UDP, 77, false, (first_l4.len() / 8) as u16, &[], 8);
    later.extend_from_slice(&[9; 8]);
    (eth(0x0800, &[], &first), eth(0x0800, &[], &later))
}

fn attach_opts() -> AttachOptions {
    AttachOptions {
        interface: "v0".into(),
        xdp_mode: XdpModeRequest::Generic,
        persist: true,
        egress: false,
    }
}

/// Polls `f` until it returns Some, or panics after `secs` with what it
/// last saw.
fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        match f() {
            Ok(v) => return v,
            Err(last) if Instant::now() > deadline => {
                panic!("{what}: not within {secs} s; last seen: {last}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[test]
fn stages_outlive_the_loader_and_a_hot_upgrade_retires_the_old_array() {
    let ns = Netns::new("stagepins").unwrap();
    for cmd in [
        "ip link add v0 type veth peer name v1",
        "ip link set v0 up",
        "ip link set v1 up",
    ] {
        ns.run(&cmd.split(' ').collect::<Vec<_>>()).unwrap();
    }
    let mut r1 = rig("stagepins");
    let cleanup = Cleanup(r1.pin_dir.clone());
    let dir = r1.pin_dir.clone();
    r1.dataplane
        .apply(&[
            vip("t4", VIP4, 80, proto::TCP, vec![backend(BACKEND4, 8080, 1)]),
            vip("u4", VIP4, 53, proto::UDP, vec![backend(BACKEND4, 5353, 1)]),
        ])
        .unwrap();
    let id1 = ns
        .within(|| r1.datapath.attach(&attach_opts()).map(|a| a.xdp_program_id))
        .unwrap()
        .unwrap();
    assert_eq!(stages::pinned(&dir), vec![stages::pin_name(id1)]);

    // Establish the TCP flow and the fragment's first half through the
    // attached program.
    let syn = frame(
        ip(CLIENT4),
        ip(VIP4),
        TCP,
        &[],
        &tcp(ip(CLIENT4), ip(VIP4), 40200, 80, 2, b""),
    );
    let (verdict, out) = r1.datapath.run_xdp(&syn).unwrap();
    assert_eq!((verdict, dst4(&out)), (XDP_PASS, ip(BACKEND4)));
    let (first, later) = fragments();
    let (verdict, out) = r1.datapath.run_xdp(&first).unwrap();
    assert_eq!((verdict, dst4(&out)), (XDP_PASS, ip(BACKEND4)));

    // The daemon exits with the datapath attached: only the pins are left.
    r1.keep_pins = true;
    drop(r1);
    let old = program_by_id(id1);
    let (verdict, out) = run_prog(&old, &icmp_error());
    assert_eq!(
        (verdict, dst4(&out)),
        (XDP_PASS, ip(BACKEND4)),
        "with the loader gone, the ICMP error still takes its stage to the flow's backend"
    );
    let (verdict, out) = run_prog(&old, &later);
    assert_eq!(
        (verdict, dst4(&out)),
        (XDP_PASS, ip(BACKEND4)),
        "with the loader gone, the later fragment still takes its stage"
    );

    // Hot upgrade over the same pins and link.
    let (mut r2, outcome, _) = rig_at(&dir);
    assert_eq!(outcome, rivora_dataplane::LoadOutcome::Reused);
    let missing = |r: &Rig| {
        r.dataplane.drop_counters().unwrap()[abi::drop_reason::PASS_STAGE_MISSING as usize]
    };
    assert_eq!(missing(&r2), 0, "no stage was ever missing so far");
    let (id2, replaced) = ns
        .within(|| {
            r2.datapath
                .attach(&attach_opts())
                .map(|a| (a.xdp_program_id, a.replaced_pinned_links))
        })
        .unwrap()
        .unwrap();
    let swapped_at = Instant::now();
    assert!(replaced, "the new program went onto the pinned link");
    assert_ne!(id2, id1);
    let now = stages::pinned(&dir);
    assert!(now.contains(&stages::pin_name(id2)), "{now:?}");
    if swapped_at.elapsed() < stages::RETIRE_DELAY / 2 {
        assert!(
            now.contains(&stages::pin_name(id1)),
            "the old program's array stays pinned for the grace period: {now:?}"
        );
    }
    let want = vec![stages::pin_name(id2)];
    wait_for(10, "exactly the new program's stage array pinned", || {
        let now = stages::pinned(&dir);
        if now == want {
            Ok(())
        } else {
            Err(format!("{now:?}"))
        }
    });

    // The new program reaches its stages.
    let (verdict, out) = r2.datapath.run_xdp(&icmp_error()).unwrap();
    assert_eq!((verdict, dst4(&out)), (XDP_PASS, ip(BACKEND4)));
    // The old one, no longer attached and its array unpinned: the kernel
    // empties the array, the packet goes to the kernel untouched, counted.
    let icmp = icmp_error();
    wait_for(10, "the retired program's stage counted as missing", || {
        let before = missing(&r2);
        let (verdict, out) = run_prog(&old, &icmp);
        let after = missing(&r2);
        if verdict == XDP_PASS && out == icmp && after == before + 1 {
            Ok(())
        } else {
            Err(format!(
                "verdict {verdict}, frame {}, passed_stage_missing {before} -> {after}",
                if out == icmp {
                    "untouched"
                } else {
                    "rewritten"
                }
            ))
        }
    });
    drop(old);
    drop(r2);
    drop(cleanup);
    assert!(
        !dir.exists(),
        "remove_pins removed every pin, stage arrays included"
    );
}
