//! `rivora-decap`: attach, detach and inspect the backends' decapsulation
//! program for Rivora's L3 DSR modes.

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use rivora_decap::{AttachMode, DEFAULT_PIN_ROOT};

/// Decapsulation for Rivora's L3 DSR backends (dsr-ipip, dsr-gre).
///
/// Attaches an XDP program to an interface that removes the outer header of
/// IP-in-IP (IPv4 outer: protocol 4 or 41), IPv6-in-IPv6 (IPv6 outer: next
/// header 41 or 4) and GRE (over IPv4 or IPv6, with optional checksum, key
/// and sequence fields, carrying IPv4 or IPv6) packets addressed to one of
/// the listed local tunnel endpoint addresses, and hands the inner packet to
/// this host's stack as if it had arrived on that interface. Every other
/// packet passes untouched. Needs no ipip, gre or ip6_tunnel kernel module.
/// The attachment is pinned under the pin root and stays after the command
/// exits. Run as root.
#[derive(Parser, Debug)]
#[command(name = "rivora-decap", version)]
struct Cli {
    /// bpffs directory holding one pin directory per interface (link and
    /// maps). Hosts or network namespaces that reuse an interface name on
    /// the same bpffs need different roots.
    #[arg(long, global = true, default_value = DEFAULT_PIN_ROOT, value_name = "DIR")]
    pin_root: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Attach to an interface (or, when already attached, replace its
    /// endpoint addresses). Mounts bpffs at /sys/fs/bpf if missing.
    Attach {
        /// Interface the tunnel packets arrive on.
        #[arg(long, short = 'i', value_name = "IF")]
        interface: String,
        /// Local tunnel endpoint address (the outer destination the balancer
        /// sends to: the backend address in its config); repeatable. Without
        /// it, the interface's current addresses (IPv6 link-local excluded).
        #[arg(long, short = 'a', value_name = "IP")]
        address: Vec<IpAddr>,
        /// XDP mode: driver (native) or skb (generic); auto tries driver and
        /// falls back to skb when the driver refuses.
        #[arg(long, value_enum, default_value_t = ModeArg::Auto)]
        mode: ModeArg,
    },
    /// Detach from an interface and remove its pins.
    Detach {
        /// Interface to detach from.
        #[arg(long, short = 'i', value_name = "IF")]
        interface: String,
    },
    /// Show attachments: interface, link and program IDs, mode, endpoint
    /// addresses and per-kind counters (decapsulated, passed to the stack
    /// untouched, malformed, outer fragments).
    Status {
        /// Only this interface (default: every interface under the pin root).
        #[arg(long, short = 'i', value_name = "IF")]
        interface: Option<String>,
    },
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum ModeArg {
    /// Driver mode, falling back to skb mode.
    Auto,
    /// Generic (skb) mode.
    Skb,
    /// Driver (native) mode only.
    Driver,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rivora-decap: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    if unsafe { libc::geteuid() } != 0 {
        anyhow::bail!("must run as root (it loads BPF programs and pins them in bpffs)");
    }
    match cli.command {
        Command::Attach {
            interface,
            address,
            mode,
        } => {
            let mode = match mode {
                ModeArg::Auto => AttachMode::Auto,
                ModeArg::Skb => AttachMode::Skb,
                ModeArg::Driver => AttachMode::Driver,
            };
            let r = rivora_decap::attach(&cli.pin_root, &interface, &address, mode)?;
            let addrs: Vec<String> = r.addresses.iter().map(|a| a.to_string()).collect();
            println!(
                "{} {} ({} mode), pinned in {}; endpoints: {}",
                if r.newly_attached {
                    "attached to"
                } else {
                    "updated endpoints on"
                },
                r.interface,
                r.mode.as_str(),
                r.pin_dir.display(),
                addrs.join(", ")
            );
        }
        Command::Detach { interface } => {
            if rivora_decap::detach(&cli.pin_root, &interface)? {
                println!("detached from {interface}");
            } else {
                println!("{interface}: was not attached");
            }
        }
        Command::Status { interface } => {
            let all = rivora_decap::status(&cli.pin_root, interface.as_deref())?;
            if all.is_empty() {
                println!("no attachments under {}", cli.pin_root.display());
            }
            for s in all {
                match (s.attached, s.link_id, s.program_id) {
                    (true, Some(l), Some(p)) => println!(
                        "{}: attached, ifindex {}, {} mode, link {l}, program {p}",
                        s.interface,
                        s.ifindex,
                        s.mode.as_str()
                    ),
                    _ => println!("{}: not attached (maps pinned, no link)", s.interface),
                }
                let addrs: Vec<String> = s.addresses.iter().map(|a| a.to_string()).collect();
                println!("  endpoints: {}", addrs.join(", "));
                println!(
                    "  {:<8} {:>14} {:>12} {:>10} {:>10}",
                    "kind", "decapsulated", "passed", "malformed", "fragments"
                );
                for c in &s.counters {
                    println!(
                        "  {:<8} {:>14} {:>12} {:>10} {:>10}",
                        c.kind, c.decapsulated, c.passed, c.malformed, c.fragments
                    );
                }
            }
        }
    }
    Ok(())
}
