//! `strait-delay-proxy`: the test kit's delay proxy ([`strait_testkit::DelayProxy`]) as a process, for the
//! benchmark harness and for humans: TCP forwarding with a fixed one-way delay (and an optional bandwidth cap) in
//! each direction, until Ctrl-C or SIGTERM.
//!
//! ```text
//! strait-delay-proxy --listen 127.0.0.1:19092 --upstream 127.0.0.1:9092 --delay-ms 25
//! strait-delay-proxy --listen 127.0.0.1:19092 --upstream 127.0.0.1:9092 \
//!     --listen 127.0.0.1:19093 --upstream 127.0.0.1:9093 --delay-ms 50 --bandwidth-mbit 1000
//! ```
//!
//! `--listen`/`--upstream` pair up in order (one route per broker). It prints one `route LISTEN -> UPSTREAM` line
//! per route, then `READY`, and on exit the connections and bytes each route carried. With `--stats-ms N` it also
//! prints `stats <unix ms> <bytes up> <bytes down>` (all routes together) every N ms, so that a benchmark can tell
//! how full the link was over a window of its own.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use strait_testkit::{DelayProxy, Link};

#[derive(Parser, Debug)]
#[command(
    name = "strait-delay-proxy",
    about = "TCP proxy adding a fixed one-way delay (and optional bandwidth cap) in each direction, until Ctrl-C"
)]
struct Cli {
    /// Address to listen on (repeat for several routes; port 0 picks a free one).
    #[arg(long = "listen", value_name = "HOST:PORT", required = true)]
    listen: Vec<SocketAddr>,
    /// Where the listen address of the same position forwards to.
    #[arg(long = "upstream", value_name = "HOST:PORT", required = true)]
    upstream: Vec<String>,
    /// One-way delay in milliseconds, in each direction (the round trip costs twice this).
    #[arg(long = "delay-ms", default_value_t = 25)]
    delay_ms: u64,
    /// Bandwidth per direction in Mbit/s, shared by the connections of a route (default: unlimited).
    #[arg(long = "bandwidth-mbit")]
    bandwidth_mbit: Option<u64>,
    /// Print the bytes carried so far every this many milliseconds (default: only at exit).
    #[arg(long = "stats-ms")]
    stats_ms: Option<u64>,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("strait-delay-proxy: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), String> {
    if cli.listen.len() != cli.upstream.len() {
        return Err(format!(
            "{} --listen but {} --upstream: give one --upstream per --listen, in the same order",
            cli.listen.len(),
            cli.upstream.len()
        ));
    }
    let mut link = Link::delay(Duration::from_millis(cli.delay_ms));
    if let Some(mbit) = cli.bandwidth_mbit {
        link = link.bandwidth(mbit.saturating_mul(1_000_000) / 8);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the signal runtime: {e}"))?;
    // Listen for signals before starting, so a SIGTERM right after start still stops the proxies cleanly.
    let (mut sigterm, mut sigint) = runtime
        .block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            Ok::<_, std::io::Error>((
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
            ))
        })
        .map_err(|e| format!("cannot listen for signals: {e}"))?;
    let mut proxies = Vec::new();
    for (listen, upstream) in cli.listen.iter().zip(&cli.upstream) {
        let proxy = DelayProxy::start_on(*listen, upstream, link).map_err(|e| e.to_string())?;
        println!("route {} -> {upstream}", proxy.addr());
        proxies.push(proxy);
    }
    println!(
        "READY delay {} ms each way, bandwidth {} (Ctrl-C or SIGTERM stops)",
        cli.delay_ms,
        cli.bandwidth_mbit
            .map_or_else(|| "unlimited".to_string(), |m| format!("{m} Mbit/s"))
    );
    let stats_every = cli.stats_ms.filter(|ms| *ms > 0).map(Duration::from_millis);
    runtime.block_on(async {
        // Without --stats-ms the ticks are an hour apart and print nothing.
        let mut ticks = tokio::time::interval(stats_every.unwrap_or(Duration::from_secs(3600)));
        loop {
            tokio::select! {
                _ = sigterm.recv() => break,
                _ = sigint.recv() => break,
                _ = ticks.tick() => {
                    if stats_every.is_some() {
                        print_totals(&proxies);
                    }
                }
            }
        }
    });
    for proxy in &proxies {
        let s = proxy.stats();
        println!(
            "route {} -> {}: {} connections, {} bytes up, {} bytes down",
            proxy.addr(),
            proxy.upstream(),
            s.connections,
            s.bytes_up,
            s.bytes_down
        );
    }
    drop(proxies);
    Ok(())
}

/// One `stats` line: the bytes every route carried so far, by direction.
fn print_totals(proxies: &[DelayProxy]) {
    let (up, down) = proxies.iter().fold((0u64, 0u64), |(u, d), p| {
        let s = p.stats();
        (u + s.bytes_up, d + s.bytes_down)
    });
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    println!("stats {ms} {up} {down}");
}
