//! `rivora-lab`: command-line front end of the lab.
//!
//! Why a binary: the README demo (`rivora-lab demo --rivorad PATH`) must be
//! one command, and developers want a lab to poke at by hand (`up`) and a
//! way to clean up after a killed test run (`cleanup`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};
use rivora_lab::demo::{self, DemoOptions};
use rivora_lab::topology::{self, Topology};
use rivora_lab::{IdentityServer, Netns};

/// Network-namespace lab for the Rivora load balancer (needs root).
#[derive(Parser)]
#[command(name = "rivora-lab", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Build the lab, run rivorad in it, send traffic to the demo VIPs and
    /// print how connections spread over the backends.
    Demo {
        /// Path to the rivorad binary.
        #[arg(long)]
        rivorad: PathBuf,
        /// Path to rivoractl: also show what the daemon reports about the traffic.
        #[arg(long)]
        rivoractl: Option<PathBuf>,
        /// Keep the lab up after the traffic until Enter or Ctrl-C.
        #[arg(long)]
        keep: bool,
        /// TCP connections per TCP VIP.
        #[arg(long, default_value_t = 600)]
        tcp: usize,
        /// UDP exchanges per UDP VIP.
        #[arg(long, default_value_t = 600)]
        udp: usize,
        /// Concurrent flows.
        #[arg(long, default_value_t = 16)]
        parallel: usize,
    },
    /// Build the lab with identity servers on port 8080 and wait for Enter
    /// or Ctrl-C (no rivorad).
    Up {
        /// Number of backends.
        #[arg(long, default_value_t = topology::DEFAULT_BACKENDS)]
        backends: usize,
    },
    /// Delete lab namespaces left behind by killed processes.
    Cleanup,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = rivora_lab::require_root() {
        eprintln!("rivora-lab: {e:#}");
        return ExitCode::FAILURE;
    }
    rivora_lab::install_interrupt_handler();
    match run(cli.cmd) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rivora-lab: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cmd: Cmd) -> Result<ExitCode> {
    match cmd {
        Cmd::Demo {
            rivorad,
            rivoractl,
            keep,
            tcp,
            udp,
            parallel,
        } => {
            let mut opts = DemoOptions::new(rivorad);
            opts.keep = keep;
            opts.rivoractl = rivoractl;
            opts.tcp_count = tcp;
            opts.udp_count = udp;
            opts.parallel = parallel;
            let report = demo::run(&opts)?;
            if !keep {
                println!("{report}");
            }
            Ok(if report.all_ok() {
                ExitCode::SUCCESS
            } else {
                eprintln!("rivora-lab demo: some flows failed");
                ExitCode::FAILURE
            })
        }
        Cmd::Up { backends } => {
            let topo = Topology::build_with("up", backends)?;
            let mut servers = Vec::new();
            for (idx, ns) in topo.backends.iter().enumerate() {
                let i = idx + 1;
                let addrs = [
                    SocketAddr::new(IpAddr::V4(topology::backend_v4(i)), demo::BACKEND_PORT),
                    SocketAddr::new(IpAddr::V6(topology::backend_v6(i)), demo::BACKEND_PORT),
                ];
                servers.push(IdentityServer::start(
                    ns,
                    &Topology::backend_name(i),
                    &addrs,
                )?);
            }
            println!("Lab is up (enter with `nsenter --net=/run/netns/NAME`):");
            println!(
                "  client {}  {} {}",
                topo.client.name(),
                topo.client_v4,
                topo.client_v6
            );
            println!("  lb     {}  eth0 + br0", topo.lb.name());
            for (i, b) in topo.backends.iter().enumerate() {
                println!(
                    "  b{}     {}  {} {}  (identity server on :{})",
                    i + 1,
                    b.name(),
                    topo.backend_v4[i],
                    topo.backend_v6[i],
                    demo::BACKEND_PORT
                );
            }
            let r = rivora_lab::tcp_round(
                &topo.client,
                SocketAddr::new(IpAddr::V4(topo.backend_v4[0]), demo::BACKEND_PORT),
                3,
                1,
                Duration::from_secs(2),
            );
            print!("{r}");
            println!("Press Enter (or Ctrl-C) to tear down.");
            rivora_lab::wait_for_enter_or_interrupt();
            drop(servers);
            drop(topo);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Cleanup => {
            let removed = Netns::reap_stale()?;
            if removed.is_empty() {
                println!("nothing to clean up");
            }
            for n in removed {
                println!("deleted stale netns {n}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}
