//! Raw bpf(2) calls: a one-entry array map, and a two-instruction XDP
//! program (`r0 = XDP_PASS; exit`) loaded and test-run. Raw rather than
//! through aya so that the probe needs no object file and shows the
//! kernel's own errno.

use std::os::fd::{FromRawFd, OwnedFd};

use crate::facts::{BpfResult, TestRunFacts};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_MAP_TYPE_ARRAY: u32 = 2;
const BPF_PROG_TYPE_XDP: u32 = 6;

/// `union bpf_attr`, big enough for the three commands (the kernel accepts
/// a shorter attr than its own and checks that the tail it does not know
/// is zero).
#[repr(C, align(8))]
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Self {
        Attr([0; 128])
    }

    fn put_u32(&mut self, at: usize, v: u32) {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }

    fn put_u64(&mut self, at: usize, v: u64) {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    }

    fn u32_at(&self, at: usize) -> u32 {
        u32::from_ne_bytes(self.0[at..at + 4].try_into().expect("4 bytes"))
    }
}

fn bpf(cmd: libc::c_long, attr: &mut Attr) -> Result<i64, i32> {
    // SAFETY: bpf(2) with a live, correctly sized attr buffer; every
    // pointer in it points to memory that outlives the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr.0.as_mut_ptr(),
            attr.0.len() as libc::c_uint,
        )
    };
    if rc < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(rc)
    }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// BPF_MAP_CREATE of an array map of one 4-byte entry, closed at once.
pub fn map_create() -> BpfResult<()> {
    let mut a = Attr::new();
    a.put_u32(0, BPF_MAP_TYPE_ARRAY);
    a.put_u32(4, 4); // key_size
    a.put_u32(8, 4); // value_size
    a.put_u32(12, 1); // max_entries
    bpf(BPF_MAP_CREATE, &mut a).map(|fd| drop(owned(fd)))
}

/// Loads `r0 = 2 (XDP_PASS); exit` as an XDP program named `rv_doctor`
/// and runs it once on a 64-byte frame with BPF_PROG_TEST_RUN.
pub fn xdp_test_run() -> TestRunFacts {
    // struct bpf_insn: code, dst_reg:4 | src_reg:4, off (s16), imm (s32).
    let insns: [u8; 16] = [
        0xb7, 0x00, 0, 0, 2, 0, 0, 0, // BPF_ALU64 | BPF_MOV | BPF_K: r0 = 2
        0x95, 0x00, 0, 0, 0, 0, 0, 0, // BPF_JMP | BPF_EXIT
    ];
    let license = b"GPL\0";
    let mut log = vec![0u8; 4096];
    let mut a = Attr::new();
    a.put_u32(0, BPF_PROG_TYPE_XDP);
    a.put_u32(4, 2); // insn_cnt
    a.put_u64(8, insns.as_ptr() as u64);
    a.put_u64(16, license.as_ptr() as u64);
    a.put_u32(24, 1); // log_level
    a.put_u32(28, log.len() as u32);
    a.put_u64(32, log.as_mut_ptr() as u64);
    a.0[48..57].copy_from_slice(b"rv_doctor");
    let prog = match bpf(BPF_PROG_LOAD, &mut a) {
        Ok(fd) => owned(fd),
        Err(e) => {
            let end = log.iter().position(|&c| c == 0).unwrap_or(log.len());
            return TestRunFacts {
                load: Err((e, String::from_utf8_lossy(&log[..end]).into_owned())),
                jited: None,
                run: None,
            };
        }
    };
    use std::os::fd::AsRawFd;
    // struct bpf_prog_info: type, id, tag[8], jited_prog_len at 16.
    let mut info = [0u8; 64];
    let mut i = Attr::new();
    i.put_u32(0, prog.as_raw_fd() as u32);
    i.put_u32(4, info.len() as u32);
    i.put_u64(8, info.as_mut_ptr() as u64);
    let jited = bpf(BPF_OBJ_GET_INFO_BY_FD, &mut i)
        .ok()
        .map(|_| u32::from_ne_bytes([info[16], info[17], info[18], info[19]]) != 0);
    // An Ethernet frame: broadcast destination, an IPv4 EtherType, zeros.
    let mut frame = [0u8; 64];
    frame[..6].fill(0xff);
    frame[12] = 0x08;
    let mut out = [0u8; 64 + 256];
    let mut t = Attr::new();
    t.put_u32(0, prog.as_raw_fd() as u32);
    t.put_u32(8, frame.len() as u32); // data_size_in
    t.put_u32(12, out.len() as u32); // data_size_out
    t.put_u64(16, frame.as_ptr() as u64);
    t.put_u64(24, out.as_mut_ptr() as u64);
    t.put_u32(32, 1); // repeat
    let run = bpf(BPF_PROG_TEST_RUN, &mut t).map(|_| t.u32_at(4));
    TestRunFacts {
        load: Ok(()),
        jited,
        run: Some(run),
    }
}
