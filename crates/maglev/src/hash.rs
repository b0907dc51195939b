//! The fixed hash that turns a backend's identity into its Maglev permutation.
//!
//! This is SipHash-2-4 (Aumasson & Bernstein, 2012), written out here rather
//! than taken from `std` because the table layout is a persistent, observable
//! property of the load balancer: every flow's backend is derived from these
//! bits. `std`'s hashers make no promise to stay the same across Rust
//! releases, and `std::hash::SipHasher` is deprecated. By owning the
//! implementation we guarantee that the same backends produce the same table
//! on every platform (the algorithm only uses explicit little-endian reads and
//! wrapping `u64` arithmetic) and across Rivora releases.
//!
//! Changing anything in this file (algorithm, keys, which hash feeds offset or
//! skip) reshuffles almost every flow on upgrade. The golden-value tests in
//! this crate exist to make such a change impossible to do by accident.

/// SipHash key for the hash that picks a backend's starting slot (`offset`).
/// The bytes are a readable tag so the constant is obviously deliberate.
const OFFSET_KEY: [u8; 16] = *b"rivora-maglev-h1";
/// SipHash key for the hash that picks a backend's stride (`skip`). A
/// different key makes it independent of [`OFFSET_KEY`]'s hash, as Maglev
/// requires (otherwise offset and skip would be correlated).
const SKIP_KEY: [u8; 16] = *b"rivora-maglev-h2";

/// The two independent 64-bit hashes of a backend key: `(offset_hash,
/// skip_hash)`.
pub(crate) fn permutation_hashes(key: &[u8]) -> (u64, u64) {
    (
        siphash24_keyed(&OFFSET_KEY, key),
        siphash24_keyed(&SKIP_KEY, key),
    )
}

/// Seed of the slot scramble (see [`slot_scramble`]). Readable tag, like the
/// SipHash keys.
const SCRAMBLE_SEED: u64 = u64::from_le_bytes(*b"rvr-scrm");

/// A fixed pseudo-random permutation of `0..size` that depends only on
/// `size`: Fisher–Yates driven by splitmix64 from [`SCRAMBLE_SEED`], with
/// the bounded draw done by a 64x64->128-bit multiply (Lemire's reduction;
/// its bias is below 2^-32 and, more importantly, it is exact integer
/// arithmetic and so identical on every platform).
///
/// Why it exists: a backend's Maglev preference list `offset + j * skip` is
/// an arithmetic progression, and for many skips a small multiple `k * skip`
/// is congruent to +/-1, so the backend sweeps through *consecutive* slots
/// and the table contains long runs of one backend (we measured runs of 20 to
/// 80 slots and up to half of all 4-slot windows held by one backend with 3
/// backends). The dataplane's fallback probes the slots following an
/// unhealthy backend's slot, so such runs defeat it. Relabelling the slots by
/// a fixed non-linear permutation after population makes neighbouring slots
/// behave like independent draws, while changing nothing else: counts,
/// order independence and disruption on backend changes are those of plain
/// Maglev because the same relabelling is applied to every table of that
/// size.
pub(crate) fn slot_scramble(size: u32) -> Vec<u32> {
    let mut perm: Vec<u32> = (0..size).collect();
    let mut state = SCRAMBLE_SEED;
    for i in (1..perm.len()).rev() {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        // Uniform-enough index in 0..=i.
        let j = ((u128::from(z) * (i as u128 + 1)) >> 64) as usize;
        perm.swap(i, j);
    }
    perm
}

fn siphash24_keyed(key: &[u8; 16], msg: &[u8]) -> u64 {
    let k0 = u64::from_le_bytes(key[0..8].try_into().expect("8 bytes"));
    let k1 = u64::from_le_bytes(key[8..16].try_into().expect("8 bytes"));
    siphash24(k0, k1, msg)
}

/// Standard SipHash-2-4 of `msg` under the 128-bit key `(k0, k1)`.
pub(crate) fn siphash24(k0: u64, k1: u64, msg: &[u8]) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];

    let mut chunks = msg.chunks_exact(8);
    for chunk in &mut chunks {
        let m = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        v[3] ^= m;
        sip_round(&mut v);
        sip_round(&mut v);
        v[0] ^= m;
    }

    // Final block: remaining bytes little-endian, message length (mod 256) in
    // the top byte.
    let mut last = (msg.len() as u64 & 0xff) << 56;
    for (i, &byte) in chunks.remainder().iter().enumerate() {
        last |= u64::from(byte) << (8 * i);
    }
    v[3] ^= last;
    sip_round(&mut v);
    sip_round(&mut v);
    v[0] ^= last;

    v[2] ^= 0xff;
    for _ in 0..4 {
        sip_round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[inline(always)]
fn sip_round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13);
    v[1] ^= v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16);
    v[3] ^= v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21);
    v[3] ^= v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17);
    v[1] ^= v[2];
    v[2] = v[2].rotate_left(32);
}

#[cfg(test)]
mod tests {
    use super::*;

    const REF_K0: u64 = 0x0706_0504_0302_0100;
    const REF_K1: u64 = 0x0f0e_0d0c_0b0a_0908;

    /// Vectors from the SipHash paper / reference implementation (key
    /// 00 01 .. 0f, message 00 01 .. (len-1)).
    #[test]
    fn reference_vectors() {
        let msg: Vec<u8> = (0u8..64).collect();
        assert_eq!(siphash24(REF_K0, REF_K1, &msg[..0]), 0x726f_db47_dd0e_0e31);
        assert_eq!(siphash24(REF_K0, REF_K1, &msg[..15]), 0xa129_ca61_49be_45e5);
    }

    /// Cross-check every length 0..=64 (all tail lengths, several blocks)
    /// against std's deprecated but still present SipHash-2-4.
    #[test]
    #[allow(deprecated)]
    fn matches_std_siphasher() {
        use std::hash::Hasher;
        let msg: Vec<u8> = (0..64u32).map(|i| (i * 37 + 11) as u8).collect();
        for keys in [(REF_K0, REF_K1), (0, 0), (u64::MAX, 0x1234_5678_9abc_def0)] {
            for len in 0..=msg.len() {
                let mut h = std::hash::SipHasher::new_with_keys(keys.0, keys.1);
                h.write(&msg[..len]);
                assert_eq!(
                    siphash24(keys.0, keys.1, &msg[..len]),
                    h.finish(),
                    "len {len}"
                );
            }
        }
    }

    /// Golden values: if this test fails, the permutation of every backend
    /// changed and an upgrade would reshuffle nearly all flows. Do not update
    /// the constants unless that is intended and announced.
    #[test]
    fn golden_permutation_hashes() {
        assert_eq!(
            permutation_hashes(b"10.0.0.1:8080"),
            (GOLDEN_A.0, GOLDEN_A.1),
            "permutation hash of 10.0.0.1:8080 changed"
        );
        assert_eq!(
            permutation_hashes(b""),
            (GOLDEN_EMPTY.0, GOLDEN_EMPTY.1),
            "permutation hash of empty key changed"
        );
    }

    /// Golden values for the slot scramble (same reasoning as above).
    #[test]
    fn golden_slot_scramble() {
        let p = slot_scramble(31);
        eprintln!("scramble(31) = {p:?}");
        assert_eq!(p, GOLDEN_SCRAMBLE_31);
        let mut sorted = slot_scramble(65_537);
        sorted.sort_unstable();
        assert!(sorted.iter().copied().eq(0..65_537));
        assert_eq!(slot_scramble(2).len(), 2);
        assert!(slot_scramble(0).is_empty());
    }

    const GOLDEN_SCRAMBLE_31: [u32; 31] = [
        29, 11, 13, 24, 14, 0, 10, 30, 1, 5, 9, 27, 8, 21, 20, 4, 2, 25, 22, 6, 17, 18, 28, 16, 15,
        23, 3, 26, 19, 7, 12,
    ];

    const GOLDEN_A: (u64, u64) = (0xe9a2_c823_3fd5_a62c, 0x9c8e_002a_999b_f376);
    const GOLDEN_EMPTY: (u64, u64) = (0xfce8_d426_01b4_d0b6, 0x3793_e842_a98f_9e95);
}
