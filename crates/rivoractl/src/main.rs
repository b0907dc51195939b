//! `rivoractl`: command-line view of a running rivorad, and the switch for
//! draining backends.
//!
//! A thin layer over [`rivora_api::Client`]: parse flags, make the API
//! calls, render the answers (see [`render`]; rates from two samples in
//! [`rates`]). All logic about what the numbers mean lives in the daemon;
//! this binary only samples and formats.

mod keys;
mod rates;
mod render;
mod summary;

use std::io::{self, IsTerminal, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand, ValueEnum};
use rivora_api::{Client, ClientError, DEFAULT_SOCKET};
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::MissedTickBehavior;

use crate::rates::WatchFrame;

/// Inspect a running rivorad (Rivora L4 load balancer node daemon), and
/// drain backends for maintenance.
///
/// Talks to the daemon's local API over its root-only Unix socket, so it
/// usually needs root. Only `drain` and `undrain` change anything; every
/// other command only reads.
#[derive(Debug, Parser)]
#[command(name = "rivoractl", version)]
struct Cli {
    /// Path of rivorad's API socket (use when rivorad runs with a non-default socket).
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        env = "RIVORA_SOCKET",
        default_value = DEFAULT_SOCKET
    )]
    socket: PathBuf,

    /// Seconds to wait for rivorad to answer when nothing answers on the socket yet (rivorad
    /// starting after a restart, or not up yet); 0 tries once. For scripts that restart
    /// rivorad and query it right after: the socket answers once the datapath is programmed.
    #[arg(
        long,
        global = true,
        value_name = "SECONDS",
        env = "RIVORA_WAIT",
        default_value_t = 0
    )]
    wait: u64,

    /// Output format: `table` for people, `json` for scripts.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Table)]
    output: Output,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Human-readable tables.
    Table,
    /// JSON: the API's data (plus computed rates for `stats` and `watch`).
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show daemon health; check this first when traffic is not flowing.
    ///
    /// Shows the interface and the XDP mode actually in effect (next to the
    /// requested one, so a fallback to slow generic mode is visible), the
    /// attached BPF programs with their kernel ids, the config generation and
    /// the result of the last reload, whose errors are otherwise only in the
    /// daemon log; with a classifier, how many of its VIPs can forward.
    Status,
    /// List VIPs and their backends, to verify the config was applied as intended.
    ///
    /// One row per VIP (frontend, forwarding mode, service id, Maglev table
    /// slice as offset+size, worst load imbalance), then one row per
    /// VIP/backend pair with weight, backend id and state. With a
    /// classifier, its VIPs follow: whether each can forward, its rules in
    /// evaluation order and its counters (`-o json` lists the other VIPs
    /// only; `rivoractl rules -o json` has the classifier's).
    Vips,
    /// List backends and why each is in its state: drain, retirement, health probe.
    ///
    /// One row per backend: id, state (healthy/draining/down, marked
    /// `(drained)` when an operator drained it and `(retiring)` when it left
    /// the config and is finishing its flows), the packets, bytes and new
    /// flows the datapath sent it (every VIP that lists it) and when its last
    /// packet was, its health probe and the probe's last result (`ok 0.4
    /// ms`, `fail: <reason>`, `pending`), when the state last changed, and
    /// the VIPs it serves.
    Backends,
    /// Show traffic rates, counters, drops and flow-table usage.
    ///
    /// Takes two samples INTERVAL apart and shows, per VIP, packets/s,
    /// bytes/s and new flows/s next to the totals since the programs were
    /// loaded (summed over all CPUs); the same per backend, with its last
    /// packet (at most 50 backends: those not healthy first, then the
    /// busiest; one line sums up the rest); then drops by reason, then how
    /// full the flow tables are (`!` marks 90% or more: a full LRU table
    /// evicts live flows). With `-o json`: the second sample plus
    /// `interval_secs`, per-VIP `rates` and per-backend `backend_rates`.
    Stats {
        /// Seconds between the two samples; 0 shows totals only, without waiting.
        #[arg(long, value_name = "SECS", default_value = "1", value_parser = parse_interval)]
        interval: Duration,
    },
    /// Show the BGP sessions and the VIP routes announced to them.
    ///
    /// One row per peer (address, AS, session state, uptime, prefixes sent,
    /// last error: a wrong TCP-MD5 password shows as a connect timeout with
    /// an MD5 hint), then the announced host routes with their communities
    /// and the VIPs behind them. A VIP is announced while `advertise` is on
    /// and it has at least one healthy backend.
    Bgp,
    /// Show the ARP/NDP responder: interface, MAC, VIPs answered, announcements.
    Speaker,
    /// List the classifier's rules (Meridio-2's L34Routes) and what they matched.
    ///
    /// One row per rule, highest priority first (the order the datapath
    /// tries a VIP's rules; equal priorities by name): its group, VIPs,
    /// protocols, source prefixes and ports, destination ports and byte
    /// matches (a column most rules leave empty is shown only when one
    /// uses it), then what the rule matched: packets and bytes forwarded,
    /// packets dropped because its group had no target of their family
    /// (they never fall through to a lower rule), and other drops (no route
    /// or neighbour to the target). Then each classifier VIP: whether it
    /// can forward (some rule leads to a group with a target of its family:
    /// only then is it announced), its rules in evaluation order and its
    /// counters, whose other drops are mostly packets that matched no rule.
    /// Last, the classifier's events by name (`no_rule`, `no_target`,
    /// `no_neighbour`, ...). With `-o json`: the whole `GET /v1/classifier`
    /// answer (`vips`, `rules`, `groups`, `events`).
    Rules,
    /// List the classifier's distribution groups, their targets and what they forwarded.
    ///
    /// One row per group: its slots (maxEndpoints), the Maglev table length
    /// per family (the largest prime <= 100 x slots, whatever the number of
    /// targets), how SCTP is hashed, the targets in its IPv4 and IPv6
    /// tables, the rules that lead to it, and the packets and bytes
    /// forwarded to its targets, drops for want of a target of the packet's
    /// family, and other drops. Then every group's targets by slot, with
    /// their IPv4 and IPv6 next hops. With `-o json`: the whole `GET
    /// /v1/classifier` answer, as for `rules`.
    Groups,
    /// Drain backends: established flows finish, no new flow goes to them.
    ///
    /// Use before maintenance of a backend host: draining lets the flows
    /// already established with the backend finish (existing connections are
    /// not broken) while no new flow is sent to it; watch them wind down with
    /// `rivoractl watch`, whose DRAIN column shows `active` while packets
    /// still reach the backend and `quiet for 12s` once none has (the drain
    /// is over when that exceeds the clients' idle time). A drain does not keep a broken backend in service:
    /// a failed health probe still turns it down. The drain is kept by
    /// rivorad and survives a rivorad restart, until `rivoractl undrain`.
    ///
    /// Prints the affected backends (JSON list with `-o json`).
    Drain {
        /// Which backends: ADDR:PORT ([IPV6]:PORT), a bare ADDR for every backend on that address, or a numeric backend id (see `rivoractl backends`). An unbracketed IPV6:PORT such as fd77:2::11:8080 is also a valid IPv6 address: it is taken as address and port only when no backend has it as its address and a backend has that address and port.
        #[arg(value_name = "BACKEND", value_parser = parse_backend)]
        backend: String,
    },
    /// End a drain: the backends get new flows again.
    ///
    /// Undoes `rivoractl drain` for the matching backends. A backend whose
    /// health probe fails stays down, and one that has left the config keeps
    /// draining until it is retired.
    ///
    /// Prints the affected backends (JSON list with `-o json`).
    Undrain {
        /// Which backends: ADDR:PORT ([IPV6]:PORT), a bare ADDR for every backend on that address, or a numeric backend id (see `rivoractl backends`). An unbracketed IPV6:PORT such as fd77:2::11:8080 is also a valid IPv6 address: it is taken as address and port only when no backend has it as its address and a backend has that address and port.
        #[arg(value_name = "BACKEND", value_parser = parse_backend)]
        backend: String,
    },
    /// Live view of per-VIP and per-backend rates, flow tables, backend states and drains.
    ///
    /// Every INTERVAL, reads counters and backends and redraws the screen
    /// (when stdout is a terminal; otherwise prints each view after a
    /// separator line). Rates are over the last interval. Per backend (at
    /// most 20: those not healthy first, then the busiest): packets/s,
    /// bytes/s, new flows/s, its last packet, and for a draining backend
    /// the DRAIN column: `active` while packets still reach it, `quiet for
    /// 12s` once none has during the interval. Stops on `q`, Ctrl-C or
    /// after COUNT refreshes (`q` is read from stdin, also when it is a
    /// pipe). With `-o json`: one JSON object per line per
    /// refresh, `{"stats": <stats -o json>, "backends": [...]}`.
    Watch {
        /// Seconds between refreshes.
        #[arg(long, value_name = "SECS", default_value = "1", value_parser = parse_refresh)]
        interval: Duration,
        /// Stop after this many refreshes (default: run until Ctrl-C).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        count: Option<u64>,
    },
}

/// Longest accepted interval; longer ones are almost certainly a typo
/// (milliseconds given as seconds).
const MAX_INTERVAL_SECS: f64 = 3600.0;

/// `--interval` of `stats`: seconds, 0 allowed.
fn parse_interval(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(0.0..=MAX_INTERVAL_SECS).contains(&secs) {
        return Err(format!("must be between 0 and {MAX_INTERVAL_SECS} seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `--interval` of `watch`: seconds, more than 0.
fn parse_refresh(s: &str) -> Result<Duration, String> {
    let d = parse_interval(s)?;
    if d < Duration::from_millis(10) {
        return Err("must be at least 0.01 seconds".into());
    }
    Ok(d)
}

/// A drain selector, checked (and IPv4 forms normalized) before it is
/// sent, so typos fail here with a clear message instead of as "no such
/// backend".
fn parse_backend(s: &str) -> Result<String, String> {
    let s = s.trim();
    if let Ok(id) = s.parse::<u32>() {
        return Ok(id.to_string());
    }
    // IPv6 addresses go as written: whether `fd77:2::11:8080` is an
    // address or an address and port, and whether brackets were used, is
    // decided by the daemon against its backends (rivora_api::selector).
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(if ip.is_ipv4() {
            ip.to_string()
        } else {
            s.into()
        });
    }
    if s.strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .is_some_and(|r| r.parse::<Ipv6Addr>().is_ok())
    {
        return Ok(s.into());
    }
    if let Ok(sa) = s.parse::<SocketAddr>() {
        return Ok(sa.to_string());
    }
    Err(format!(
        "{s:?} is not ADDR:PORT, [IPV6]:PORT, ADDR or a numeric backend id"
    ))
}

/// A drain the daemon refused for its selector (HTTP 400 or 404) is the
/// operator's mistake, and the daemon's message already says which
/// selector and which forms it accepts: print that, not an HTTP status.
fn selector_failure(e: ClientError) -> Failure {
    match e {
        ClientError::Api { status, message } if status == 400 || status == 404 => {
            Failure::Other(message)
        }
        other => Failure::Api(other),
    }
}

/// The classifier for the summaries of `status` and `vips`, which must
/// not fail for its sake: absent from a rivorad without one (HTTP 501) or
/// older than the endpoint (404), the reason when it cannot be read.
async fn classifier_view(client: &Client) -> render::ClassifierView {
    match client.classifier().await {
        Ok(c) => Ok(Some(c)),
        Err(ClientError::Api { status, .. }) if status == 501 || status == 404 => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Why a command failed.
enum Failure {
    /// The API call failed; the message is the client's.
    Api(ClientError),
    /// Writing to stdout failed.
    Output(io::Error),
    /// Anything else, already phrased for the operator.
    Other(String),
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        Failure::Api(e)
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Self {
        Failure::Output(e)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rivoractl: cannot start async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = io::stdout().lock();
    match runtime.block_on(run(&cli, &mut stdout)) {
        Ok(()) => ExitCode::SUCCESS,
        // `rivoractl stats | head` is not an error.
        Err(Failure::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Output(e)) => {
            eprintln!("rivoractl: cannot write output: {e}");
            ExitCode::FAILURE
        }
        Err(Failure::Api(e)) => {
            eprintln!("rivoractl: {e}");
            ExitCode::FAILURE
        }
        Err(Failure::Other(e)) => {
            eprintln!("rivoractl: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Make the API calls for the command and write the rendered answers.
///
/// Everything but `watch` renders completely before writing, so a failed
/// call leaves stdout empty.
async fn run(cli: &Cli, out: &mut impl Write) -> Result<(), Failure> {
    let client = Client::new(&cli.socket).with_wait(Duration::from_secs(cli.wait));
    let json = cli.output == Output::Json;
    let text = match cli.command {
        Command::Status => {
            let s = client.status().await?;
            if json {
                render::json(&s)
            } else {
                let cls = classifier_view(&client).await;
                render::status_with(&s, render::classifier_row(&cls), now_unix())
            }
        }
        Command::Vips => {
            let v = client.vips().await?;
            if json {
                render::json(&v)
            } else {
                render::vips_with_classifier(&v, &classifier_view(&client).await)
            }
        }
        Command::Rules | Command::Groups => {
            let c = client.classifier().await?;
            if json {
                render::json(&c)
            } else if matches!(cli.command, Command::Rules) {
                render::rules(&c)
            } else {
                render::groups(&c)
            }
        }
        Command::Backends => {
            let b = client.backends().await?;
            if json {
                render::json(&b)
            } else {
                render::backends(&b, now_unix())
            }
        }
        Command::Bgp => {
            let b = client.bgp().await?;
            if json {
                render::json(&b)
            } else {
                let k8s = client.status().await?.kubernetes;
                render::bgp(&b, k8s.as_ref())
            }
        }
        Command::Speaker => {
            let sp = client.speaker().await?;
            if json {
                render::json(&sp)
            } else {
                let k8s = client.status().await?.kubernetes;
                render::speaker(&sp, k8s.as_ref(), now_unix())
            }
        }
        Command::Stats { interval } => {
            let first = client.stats().await?;
            let report = if interval.is_zero() {
                rates::totals_only(first)
            } else {
                let since = Instant::now();
                tokio::time::sleep(interval).await;
                let second = client.stats().await?;
                rates::with_rates(&first, second, since.elapsed())
            };
            if json {
                render::json(&report)
            } else {
                render::stats(&report)
            }
        }
        Command::Drain { ref backend } | Command::Undrain { ref backend } => {
            let drain = matches!(cli.command, Command::Drain { .. });
            let hit = if drain {
                client.drain(backend).await
            } else {
                client.undrain(backend).await
            }
            .map_err(selector_failure)?;
            if json {
                render::json(&hit)
            } else {
                render::drain_result(&hit, drain, now_unix())
            }
        }
        Command::Watch { interval, count } => {
            return watch(&client, interval, count, json, out).await;
        }
    };
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// `rivoractl watch`: refresh every `interval` until `q`, Ctrl-C or
/// `count` refreshes. Both keys are a normal way to stop, so they exit
/// successfully; the terminal's mode is restored either way (see [`keys`]).
async fn watch(
    client: &Client,
    interval: Duration,
    count: Option<u64>,
    json: bool,
    out: &mut impl Write,
) -> Result<(), Failure> {
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|e| Failure::Other(format!("cannot watch for Ctrl-C: {e}")))?;
    let redraw = !json && io::stdout().is_terminal();
    let mut keys = keys::KeyReader::start();
    let refreshes = async {
        let mut ticker = tokio::time::interval(interval);
        // A slow daemon delays the next refresh rather than causing a burst.
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticker.tick().await; // the first tick is immediate
        let mut prev = client.stats().await?;
        let mut prev_at = Instant::now();
        let mut done = 0u64;
        loop {
            ticker.tick().await;
            let (stats, backends) = tokio::try_join!(client.stats(), client.backends())?;
            let at = Instant::now();
            let frame = WatchFrame {
                stats: rates::with_rates(&prev, stats.clone(), at - prev_at),
                backends,
            };
            let text = if json {
                let mut line = serde_json::to_string(&frame).expect("API types always serialize");
                line.push('\n');
                line
            } else {
                let view = render::watch(&frame, now_unix());
                if redraw {
                    format!("\x1b[2J\x1b[H{view}")
                } else if done > 0 {
                    format!("{}\n{view}", "=".repeat(72))
                } else {
                    view
                }
            };
            out.write_all(text.as_bytes())?;
            out.flush()?;
            done += 1;
            if count.is_some_and(|n| done >= n) {
                return Ok(());
            }
            (prev, prev_at) = (stats, at);
        }
    };
    tokio::select! {
        r = refreshes => r,
        _ = interrupt.recv() => Ok(()),
        _ = keys.quit() => Ok(()),
    }
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn global_flags_anywhere() {
        let cli =
            Cli::try_parse_from(["rivoractl", "vips", "-o", "json", "--socket", "/tmp/x.sock"])
                .unwrap();
        assert_eq!(cli.output, Output::Json);
        assert_eq!(cli.socket, PathBuf::from("/tmp/x.sock"));
        assert!(matches!(cli.command, Command::Vips));
    }

    #[test]
    fn defaults() {
        // Only meaningful when the environment does not override the socket.
        if std::env::var_os("RIVORA_SOCKET").is_none() {
            let cli = Cli::try_parse_from(["rivoractl", "status"]).unwrap();
            assert_eq!(cli.socket, PathBuf::from(DEFAULT_SOCKET));
            assert_eq!(cli.output, Output::Table);
        }
        assert!(Cli::try_parse_from(["rivoractl", "stats", "-o", "yaml"]).is_err());
        assert!(Cli::try_parse_from(["rivoractl"]).is_err());
    }

    #[test]
    fn backend_selectors() {
        assert_eq!(parse_backend("10.0.0.1:8080").unwrap(), "10.0.0.1:8080");
        assert_eq!(parse_backend(" 10.0.0.1 ").unwrap(), "10.0.0.1");
        assert_eq!(parse_backend("42").unwrap(), "42");
        assert_eq!(parse_backend("007").unwrap(), "7");
        // IPv6 with a port is normalized; a bare IPv6 address goes as
        // written (brackets kept), since `2001:db8::10:80` may be meant as
        // address and port and the daemon decides against its backends.
        assert_eq!(
            parse_backend("[2001:DB8:0::10]:80").unwrap(),
            "[2001:db8::10]:80"
        );
        assert_eq!(parse_backend("2001:db8::10").unwrap(), "2001:db8::10");
        assert_eq!(parse_backend("2001:db8::10:80").unwrap(), "2001:db8::10:80");
        assert_eq!(parse_backend("[2001:db8::10]").unwrap(), "[2001:db8::10]");
        for bad in [
            "",
            "web",
            "10.0.0.1:http",
            "10.0.0:80",
            "2001:db8::10:80:x",
            "-1",
        ] {
            let e = parse_backend(bad).unwrap_err();
            assert!(e.contains("is not ADDR:PORT"), "{bad}: {e}");
        }
    }

    #[test]
    fn subcommand_flags() {
        let cli = Cli::try_parse_from(["rivoractl", "drain", "[::1]:80", "-o", "json"]).unwrap();
        assert!(matches!(cli.command, Command::Drain { ref backend } if backend == "[::1]:80"));
        let cli = Cli::try_parse_from(["rivoractl", "undrain", "3"]).unwrap();
        assert!(matches!(cli.command, Command::Undrain { ref backend } if backend == "3"));
        assert!(Cli::try_parse_from(["rivoractl", "drain"]).is_err());
        assert!(Cli::try_parse_from(["rivoractl", "drain", "nope"]).is_err());

        let cli = Cli::try_parse_from(["rivoractl", "stats"]).unwrap();
        assert!(
            matches!(cli.command, Command::Stats { interval } if interval == Duration::from_secs(1))
        );
        let cli = Cli::try_parse_from(["rivoractl", "stats", "--interval", "0"]).unwrap();
        assert!(matches!(cli.command, Command::Stats { interval } if interval.is_zero()));
        let cli = Cli::try_parse_from(["rivoractl", "stats", "--interval", "0.25"]).unwrap();
        assert!(
            matches!(cli.command, Command::Stats { interval } if interval == Duration::from_millis(250))
        );
        for bad in ["-1", "x", "NaN", "inf", "3601"] {
            assert!(
                Cli::try_parse_from(["rivoractl", "stats", "--interval", bad]).is_err(),
                "{bad}"
            );
        }

        let cli = Cli::try_parse_from(["rivoractl", "rules", "-o", "json"]).unwrap();
        assert!(matches!(cli.command, Command::Rules) && cli.output == Output::Json);
        let cli = Cli::try_parse_from(["rivoractl", "groups"]).unwrap();
        assert!(matches!(cli.command, Command::Groups));
        assert!(Cli::try_parse_from(["rivoractl", "groups", "dg-a"]).is_err());

        let cli = Cli::try_parse_from(["rivoractl", "watch"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Watch { interval, count: None } if interval == Duration::from_secs(1)
        ));
        let cli = Cli::try_parse_from(["rivoractl", "watch", "--interval", "0.5", "--count", "3"])
            .unwrap();
        assert!(matches!(
            cli.command,
            Command::Watch { interval, count: Some(3) } if interval == Duration::from_millis(500)
        ));
        assert!(Cli::try_parse_from(["rivoractl", "watch", "--interval", "0"]).is_err());
        assert!(Cli::try_parse_from(["rivoractl", "watch", "--count", "0"]).is_err());
    }
}
