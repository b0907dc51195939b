//! The new-flow guard's setting (bpf/guard.h): a node-wide rate of state
//! entries per second that flows without state may create, turned into the
//! per-CPU budget per window the datapath enforces.

use rivora_abi::FlowGuardConfig;

/// Default node-wide rate, entries per second. Far above what a node's
/// legitimate clients open (a connection creates one entry, with its
/// handshake's ACK; a SYN or a one-packet UDP flow none), far below what a
/// flood sends; beyond it, flows are forwarded by Maglev alone.
pub const DEFAULT_RATE: u64 = 100_000;

/// Window over which each CPU counts, in milliseconds: short, so the guard
/// reacts within a tenth of a second, and long enough for a budget of
/// several entries per CPU at modest rates.
pub const WINDOW_MS: u64 = 100;

/// The datapath's config for `rate` entries/s over `cpus` CPUs with the
/// kernel ticking at `hz`: each CPU gets `rate / cpus` per second, counted
/// per window of [`WINDOW_MS`] (at least one jiffy), rounded up so the
/// node-wide figure is never undercut. `rate` 0 turns the guard off.
pub fn config(rate: u64, hz: u32, cpus: u32) -> FlowGuardConfig {
    if rate == 0 {
        return FlowGuardConfig::default();
    }
    let hz = u64::from(hz.max(1));
    let cpus = u64::from(cpus.max(1));
    let window_jiffies = (hz * WINDOW_MS / 1000).max(1);
    // entries per CPU per window = rate * (window_jiffies / hz) / cpus
    let limit = (rate * window_jiffies).div_ceil(hz * cpus).max(1);
    FlowGuardConfig {
        limit: limit.min(u64::from(u32::MAX)) as u32,
        window_jiffies: window_jiffies as u32,
        rate,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_the_node_rate_over_cpus_and_windows() {
        let c = config(100_000, 250, 2);
        assert_eq!(c.window_jiffies, 25);
        // 100,000/s over 2 CPUs, 0.1 s windows: 5,000 per CPU per window.
        assert_eq!(c.limit, 5_000);
        assert_eq!(c.rate, 100_000);
        let c = config(100_000, 1000, 8);
        assert_eq!((c.window_jiffies, c.limit), (100, 1_250));
    }

    #[test]
    fn small_rates_keep_a_budget_and_zero_turns_it_off() {
        assert_eq!(config(1, 100, 64).limit, 1);
        assert_eq!(config(0, 250, 2), FlowGuardConfig::default());
    }

    #[test]
    fn a_coarse_tick_still_gives_a_window() {
        let c = config(10_000, 5, 1);
        assert_eq!(c.window_jiffies, 1);
        assert_eq!(c.limit, 2_000);
    }
}
