//! Weighted Maglev consistent hashing (Eisenbud et al., "Maglev: A Fast and
//! Reliable Software Network Load Balancer", NSDI 2016) for Rivora.
//!
//! # Where the tables go
//!
//! The dataplane has one shared BPF array, `maglev_table` (65,537 `u32` slots
//! by default; the size is a setting). Each VIP owns a contiguous slice of it
//! whose length is prime. For a packet the BPF program computes
//! `slot = hash(flow) % slice_size` and reads the backend ID at
//! `offset + slot`; if that backend is unhealthy it probes the following
//! slots within a bounded window. This crate computes the contents of one
//! slice ([`build`]) and how long a slice should be ([`preferred_slice_size`],
//! [`fit_slice_size`]).
//!
//! [`build`] is a pure function of the set of backend keys and their weights:
//! input order and internal backend IDs do not matter, so a restarted control
//! plane writes the same slots and established flows keep their backend.
//! Removing one of N backends moves roughly 1/N of the slots (its own plus a
//! small amount of collateral, as in the paper).
//!
//! Neighbouring slots must belong to different backends about as often as
//! independent draws would, because the dataplane's fallback probes the slots
//! *after* an unhealthy backend's slot. Plain Maglev does not guarantee this:
//! a backend's preference list `offset + j * skip` is an arithmetic
//! progression, and for some skips it sweeps through consecutive slots,
//! leaving runs of 20-80 slots of one backend. [`build`] therefore relabels
//! the slots of the finished table with a fixed pseudo-random permutation
//! that depends only on the slice size. This changes no Maglev property
//! (balance, order independence, disruption), only which slot numbers are
//! adjacent.
//!
//! # Slice-size rule
//!
//! Maglev gives each backend its weight share of the slots rounded to a whole
//! number (here within about half a slot; see [`build`]). The relative error
//! of a backend's load is therefore about `1 / (slots it expects)`, and the
//! paper's ~1% imbalance figure holds only with at least ~100 slots per
//! backend. With weights the binding backend is the *least*-weighted one,
//! which expects `size * min_weight / total_weight` slots, so the preferred
//! size is
//!
//! ```text
//! target    = max(MIN_SLICE_SIZE,                                   // 251
//!                 SLOTS_PER_BACKEND * backend_count,                 // 100 * n
//!                 ceil(SLOTS_PER_BACKEND * total_weight / min_weight))
//! preferred = smallest prime >= min(target, MAX_PREFERRED_SLICE_SIZE) // cap 4,194,301
//! ```
//!
//! The floor keeps one- and two-backend VIPs on a sensible prime slice with
//! room to grow; the cap bounds what pathological weight ratios can ask for.
//!
//! The shared table is finite: 65,537 slots across up to 4,096 VIPs is only
//! ~16 slots per VIP at full capacity, far below 100 per backend. So the
//! caller asks [`fit_slice_size`] for the largest prime that fits the free
//! space (and still gives every backend a slot), builds the table at that
//! size, and reports [`worst_imbalance`] when the slice had to shrink. Raising
//! the table-size setting restores the preferred sizes.
//!
//! Changing a VIP's slice size remaps `hash % size` for *all* of its flows,
//! so callers should keep a slice's size when backends change as long as it
//! still fits and is reasonably close to the preferred size, rather than
//! resizing on every change.
//!
//! # Stability
//!
//! The permutation of a backend comes from two fixed SipHash-2-4 hashes of
//! its key, implemented in this crate and pinned by golden-value tests.
//! Changing the hash, its keys, or the population order would reshuffle
//! almost every flow on upgrade, so such a change must be deliberate and
//! announced.

#![warn(missing_docs)]

mod hash;
mod prime;
mod slice;
mod table;

pub use prime::{is_prime, prime_at_least, prime_at_most};
pub use slice::{
    MAX_PREFERRED_SLICE_SIZE, MIN_SLICE_SIZE, SLOTS_PER_BACKEND, fit_slice_size,
    preferred_slice_size, preferred_slice_size_for,
};
pub use table::{MaglevBackend, MaglevError, build, slot_counts, worst_imbalance};
