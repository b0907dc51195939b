//! Primality helpers for choosing slice sizes.
//!
//! Maglev needs a prime table size so that every `skip` in `1..size` is
//! coprime with the size, which makes each backend's preference list a full
//! permutation of the slots. These helpers are exact for every `u32`, so the
//! control plane can size slices anywhere in the configured shared table
//! without a precomputed prime list.

/// Reports whether `n` is prime. Exact for all `u32` (deterministic
/// Miller–Rabin with the bases 2, 7 and 61, which are proven sufficient below
/// 4,759,123,141), so callers can validate user-supplied table sizes cheaply.
pub fn is_prime(n: u32) -> bool {
    if n < 2 {
        return false;
    }
    for p in [
        2u32, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61,
    ] {
        if n == p {
            return true;
        }
        if n.is_multiple_of(p) {
            return false;
        }
    }
    // n is odd, > 61 and has no factor <= 61.
    let n = u64::from(n);
    let mut d = n - 1;
    let mut s = 0;
    while d.is_multiple_of(2) {
        d /= 2;
        s += 1;
    }
    'witness: for a in [2u64, 7, 61] {
        let mut x = pow_mod(a, d, n);
        if x == 1 || x == n - 1 {
            continue;
        }
        for _ in 1..s {
            x = x * x % n;
            if x == n - 1 {
                continue 'witness;
            }
        }
        return false;
    }
    true
}

/// `base^exp mod m` for `m < 2^32`, so every product fits in a `u64`.
fn pow_mod(mut base: u64, mut exp: u64, m: u64) -> u64 {
    let mut result = 1u64;
    base %= m;
    while exp > 0 {
        if exp & 1 == 1 {
            result = result * base % m;
        }
        base = base * base % m;
        exp >>= 1;
    }
    result
}

/// The smallest prime `>= n`, used to round a desired slice size up so that
/// the "at least this many slots" intent is kept. `None` only when no such
/// prime fits in a `u32` (`n > 4,294,967,291`).
pub fn prime_at_least(n: u32) -> Option<u32> {
    let mut c = n.max(2);
    loop {
        if is_prime(c) {
            return Some(c);
        }
        c = c.checked_add(1)?;
    }
}

/// The largest prime `<= n`, used to shrink a slice to fit the space that is
/// actually free in the shared table. `None` when `n < 2`.
pub fn prime_at_most(n: u32) -> Option<u32> {
    let mut c = n;
    while c >= 2 {
        if is_prime(c) {
            return Some(c);
        }
        c -= 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: usize = 100_000;

    fn sieve(limit: usize) -> Vec<bool> {
        let mut is = vec![true; limit];
        is[0] = false;
        is[1] = false;
        let mut i = 2;
        while i * i < limit {
            if is[i] {
                let mut j = i * i;
                while j < limit {
                    is[j] = false;
                    j += i;
                }
            }
            i += 1;
        }
        is
    }

    #[test]
    fn is_prime_matches_sieve_below_100000() {
        let s = sieve(LIMIT);
        for (n, &expected) in s.iter().enumerate() {
            assert_eq!(is_prime(n as u32), expected, "is_prime({n})");
        }
    }

    #[test]
    fn prime_at_least_and_at_most_match_sieve() {
        let s = sieve(LIMIT + 200);
        for n in 0..LIMIT {
            let up = (n.max(2)..).find(|&c| s[c]).map(|c| c as u32);
            assert_eq!(prime_at_least(n as u32), up, "prime_at_least({n})");
            let down = (2..=n).rev().find(|&c| s[c]).map(|c| c as u32);
            assert_eq!(prime_at_most(n as u32), down, "prime_at_most({n})");
        }
    }

    #[test]
    fn large_values() {
        // Known primes and composites near the interesting sizes and the u32
        // boundary (strong pseudoprimes to single bases included).
        for p in [
            65_537u32,
            100_003,
            1_048_573,
            4_194_301,
            2_147_483_647,
            4_294_967_291,
        ] {
            assert!(is_prime(p), "{p} is prime");
        }
        for c in [
            65_535u32,
            100_001,
            2_047,         // strong pseudoprime base 2
            3_215_031_751, // strong pseudoprime to bases 2, 3, 5, 7
            4_294_967_295,
            4_294_967_293,
            65_537 * 65_521,
        ] {
            assert!(!is_prime(c), "{c} is composite");
        }
        assert_eq!(prime_at_least(4_294_967_291), Some(4_294_967_291));
        assert_eq!(prime_at_least(4_294_967_292), None);
        assert_eq!(prime_at_least(u32::MAX), None);
        assert_eq!(prime_at_most(u32::MAX), Some(4_294_967_291));
        assert_eq!(prime_at_most(65_536), Some(65_521));
        assert_eq!(prime_at_least(65_536), Some(65_537));
        assert_eq!(prime_at_most(1), None);
        assert_eq!(prime_at_most(0), None);
        assert_eq!(prime_at_least(0), Some(2));
    }

    /// Cross-check Miller–Rabin against trial division on a window of large
    /// numbers where the sieve test cannot reach.
    #[test]
    fn matches_trial_division_on_large_window() {
        fn trial(n: u32) -> bool {
            if n < 2 {
                return false;
            }
            let n = u64::from(n);
            let mut d = 2u64;
            while d * d <= n {
                if n % d == 0 {
                    return false;
                }
                d += 1;
            }
            true
        }
        for n in (4_294_967_295u32 - 2_000)..=4_294_967_295 {
            assert_eq!(is_prime(n), trial(n), "{n}");
        }
        for n in 2_147_483_000u32..2_147_484_000 {
            assert_eq!(is_prime(n), trial(n), "{n}");
        }
    }
}
