//! The kernel's jiffies clock, as user space can read it, so the
//! last-packet times the datapath records (`rv_backend_stats.last_jiffies`,
//! an inlined `bpf_jiffies64` load on the hot path instead of a clock helper
//! call) can be turned into an age.
//!
//! User space has no system call for jiffies. `/proc/timer_list` (root only,
//! as is everything else rivorad reads) prints the current value; the tick
//! rate (`CONFIG_HZ`) comes from the kernel's config file when it is
//! installed, otherwise it is measured once from two readings of
//! `/proc/timer_list` 200 ms apart and rounded to the nearest rate a kernel
//! can be built with.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Tick rates `CONFIG_HZ` offers (kernel/Kconfig.hz).
const HZ_CHOICES: [u32; 4] = [100, 250, 300, 1000];

/// The current jiffies, or None when `/proc/timer_list` cannot be read or
/// has no `jiffies:` line.
pub fn now() -> Option<u64> {
    use std::io::BufRead;
    // The line comes after the first CPU's timers: stop reading there
    // rather than have the kernel format every CPU's (large on big hosts).
    let file = std::fs::File::open("/proc/timer_list").ok()?;
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| parse_timer_list(&l))
}

/// The first `jiffies: N` value of a `/proc/timer_list` text.
pub fn parse_timer_list(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("jiffies:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The kernel's tick rate, found once per process (None if neither the
/// config nor a measurement gives it).
pub fn hz() -> Option<u32> {
    static HZ: OnceLock<Option<u32>> = OnceLock::new();
    *HZ.get_or_init(|| config_hz().or_else(measure_hz))
}

/// The kernel's clock read once, to turn many recorded jiffies into ages
/// (reading `/proc/timer_list` per backend would cost a file read each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    /// Jiffies when it was read.
    pub now: u64,
    /// Ticks per second.
    pub hz: u32,
}

impl Clock {
    /// Reads the current jiffies (and, once per process, the tick rate);
    /// None when either is unavailable.
    pub fn read() -> Option<Clock> {
        Some(Clock {
            now: now()?,
            hz: hz()?,
        })
    }

    /// How long before this reading `last` (a jiffies value the datapath
    /// recorded) was, at the resolution of one tick; None when `last` is 0
    /// (nothing recorded). A value a little ahead of the reading (another
    /// CPU's later packet) is an age of zero.
    pub fn age_of(&self, last: u64) -> Option<Duration> {
        (last != 0).then(|| ticks_to_duration(self.now.saturating_sub(last), self.hz))
    }
}

/// The datapath's ticks (jiffies >> `NAT_CHECK_JIFFIES_SHIFT`) for a hold
/// of at least `d` at `hz`: the programs compare `now - last >= ticks` on
/// tick numbers, which can be up to one tick short of the real time, so
/// one more than the rounded-up count (never 0, at most u32::MAX).
pub fn ticks_at_least(d: Duration, hz: u32) -> u32 {
    let jiffies = d.as_nanos() * u128::from(hz.max(1)) / 1_000_000_000;
    let tick = 1u128 << rivora_abi::NAT_CHECK_JIFFIES_SHIFT;
    u32::try_from(jiffies.div_ceil(tick) + 1).unwrap_or(u32::MAX)
}

/// `ticks` jiffies at `hz` ticks per second.
pub fn ticks_to_duration(ticks: u64, hz: u32) -> Duration {
    let hz = u64::from(hz.max(1));
    Duration::from_secs(ticks / hz) + Duration::from_nanos((ticks % hz) * 1_000_000_000 / hz)
}

/// `CONFIG_HZ=N` from `/boot/config-$(uname -r)`.
fn config_hz() -> Option<u32> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let text = std::fs::read_to_string(format!("/boot/config-{}", release.trim())).ok()?;
    parse_config_hz(&text)
}

/// The `CONFIG_HZ=` value of a kernel config text.
pub fn parse_config_hz(text: &str) -> Option<u32> {
    text.lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ="))
        .and_then(|v| v.trim().parse().ok())
        .filter(|hz| *hz > 0)
}

/// Two readings 200 ms apart: 20, 50, 60 or 200 ticks, far enough apart for
/// the one-tick uncertainty of each reading.
fn measure_hz() -> Option<u32> {
    let (t0, j0) = (Instant::now(), now()?);
    std::thread::sleep(Duration::from_millis(200));
    let (t1, j1) = (Instant::now(), now()?);
    nearest_hz(j1.saturating_sub(j0), t1 - t0)
}

/// The tick rate in [`HZ_CHOICES`] closest to `ticks` per `elapsed`.
pub fn nearest_hz(ticks: u64, elapsed: Duration) -> Option<u32> {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 || ticks == 0 {
        return None;
    }
    let rate = ticks as f64 / secs;
    HZ_CHOICES.into_iter().min_by(|a, b| {
        let da = (f64::from(*a) - rate).abs();
        let db = (f64::from(*b) - rate).abs();
        da.total_cmp(&db)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_texts() {
        let tl = "Timer List Version: v0.10\nnow at 351957062070 nsecs\n\ncpu: 0\n  .idle_jiffies   : 4294955355\njiffies: 4294980228\n\njiffies: 4294980229\n";
        assert_eq!(parse_timer_list(tl), Some(4_294_980_228));
        assert_eq!(parse_timer_list("now at 1 nsecs\n"), None);
        assert_eq!(
            parse_config_hz("# CONFIG_HZ_100 is not set\nCONFIG_HZ_250=y\nCONFIG_HZ=250\n"),
            Some(250)
        );
        assert_eq!(parse_config_hz("CONFIG_HZ_250=y\n"), None);
    }

    #[test]
    fn measured_rates_round_to_a_kernel_choice() {
        let ms = Duration::from_millis;
        assert_eq!(nearest_hz(51, ms(201)), Some(250));
        assert_eq!(nearest_hz(59, ms(200)), Some(300));
        assert_eq!(nearest_hz(21, ms(203)), Some(100));
        assert_eq!(nearest_hz(199, ms(200)), Some(1000));
        assert_eq!(nearest_hz(0, ms(200)), None);
    }

    #[test]
    fn ages_are_counted_back_from_the_reading() {
        let c = Clock {
            now: 10_000,
            hz: 250,
        };
        assert_eq!(c.age_of(0), None, "nothing recorded");
        assert_eq!(c.age_of(9_750), Some(Duration::from_secs(1)));
        assert_eq!(c.age_of(10_002), Some(Duration::ZERO));
    }

    #[test]
    fn ticks_become_durations() {
        assert_eq!(ticks_to_duration(500, 250), Duration::from_secs(2));
        assert_eq!(ticks_to_duration(1, 250), Duration::from_millis(4));
        assert_eq!(
            ticks_to_duration(301, 300),
            Duration::from_nanos(1_003_333_333)
        );
    }
}
