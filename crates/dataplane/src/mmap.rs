//! A BPF array map (created with `BPF_F_MMAPABLE`) mapped into our address
//! space: the Maglev table and the flow filter are written with plain or
//! atomic stores instead of one syscall per element.

use std::os::fd::{AsFd, AsRawFd};

use aya::maps::MapData;

use crate::Error;

/// The mapping of one map, unmapped on drop. It holds the map's fd too, so
/// the map lives as long as the mapping.
pub struct MappedMap {
    _map: MapData,
    ptr: *mut u8,
    bytes: usize,
}

// SAFETY: the mapping is owned by this value; its users only reach it
// through the owners' &self/&mut self methods, and the kernel side reading
// and writing it concurrently is the point of the mapping.
unsafe impl Send for MappedMap {}
unsafe impl Sync for MappedMap {}

impl MappedMap {
    /// Maps the first `bytes` bytes (rounded up to pages) of `data`, shared
    /// and writable. `name` names the map in the error.
    pub fn new(data: MapData, bytes: usize, name: &str) -> Result<Self, Error> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let bytes = bytes.div_ceil(page) * page;
        // SAFETY: a fresh shared mapping of the map's fd; checked below.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                data.fd().as_fd().as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::Io {
                what: format!("mmap of {name} (was it created without BPF_F_MMAPABLE?)"),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(Self {
            _map: data,
            ptr: ptr.cast(),
            bytes,
        })
    }

    /// The start of the mapping.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length of the mapping in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.bytes
    }

    /// Whether nothing is mapped (never: mmap refuses a zero length).
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}

impl Drop for MappedMap {
    fn drop(&mut self) {
        // SAFETY: the mapping made in new(), unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.bytes) };
    }
}
