//! `rivoractl`: command-line view of a running rivorad.
//!
//! A thin layer over [`rivora_api::Client`]: parse flags, make one API call,
//! render it (see [`render`]). All logic about what the numbers mean lives
//! in the daemon; this binary only formats.

mod render;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand, ValueEnum};
use rivora_api::{Client, ClientError, DEFAULT_SOCKET};

/// Inspect a running rivorad (Rivora L4 load balancer node daemon).
///
/// Reads the daemon's local API over its root-only Unix socket, so it
/// usually needs root. It only reads state; it never changes it.
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

    /// Output format: `table` for people, `json` (the raw API answer) for scripts.
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Output::Table)]
    output: Output,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Human-readable tables.
    Table,
    /// Pretty-printed JSON, exactly the API's data.
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
    /// daemon log.
    Status,
    /// List VIPs and their backends, to verify the config was applied as intended.
    ///
    /// One row per VIP (frontend, forwarding mode, service id, Maglev table
    /// slice as offset+size, worst load imbalance), then one row per
    /// VIP/backend pair with weight, backend id and state.
    Vips,
    /// List backends, to see what is affected when a backend host goes away.
    ///
    /// One row per backend with its id, state (healthy/draining/down) and the
    /// VIPs it serves.
    Backends,
    /// Show traffic counters and drops, to see whether VIPs get traffic and why packets are lost.
    ///
    /// Per-VIP packets, bytes, new flows, drops and reply traffic (summed over
    /// all CPUs since the programs were loaded), then drop counts by reason.
    Stats,
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
    let text = match runtime.block_on(run(&cli)) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("rivoractl: {e}");
            return ExitCode::FAILURE;
        }
    };
    match io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        // `rivoractl stats | head` is not an error.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rivoractl: cannot write output: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Make the one API call for the command and render its answer.
async fn run(cli: &Cli) -> Result<String, ClientError> {
    let client = Client::new(&cli.socket);
    let json = cli.output == Output::Json;
    Ok(match cli.command {
        Command::Status => {
            let s = client.status().await?;
            if json {
                render::json(&s)
            } else {
                render::status(&s, now_unix())
            }
        }
        Command::Vips => {
            let v = client.vips().await?;
            if json {
                render::json(&v)
            } else {
                render::vips(&v)
            }
        }
        Command::Backends => {
            let b = client.backends().await?;
            if json {
                render::json(&b)
            } else {
                render::backends(&b)
            }
        }
        Command::Stats => {
            let s = client.stats().await?;
            if json {
                render::json(&s)
            } else {
                render::stats(&s)
            }
        }
    })
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
}
