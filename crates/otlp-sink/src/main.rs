//! `strait-otlp-sink`: receives OTLP/HTTP spans on loopback and prints, every `--summary-every`,
//! the time spent in each hop of the producer -> mirror -> consumer traces that completed, then
//! p50/p99 per hop over the last `--window` traces.
//!
//! With `--jaeger-query URL` it receives nothing: it reads the traces of `--service` from a real
//! Jaeger's query API (`/api/traces`) instead and prints the same summary from them (what
//! `scripts/demo.sh` does); `--once` prints one summary and exits (status 1 if no trace was
//! complete).
//!
//! ```text
//! strait-otlp-sink --listen 127.0.0.1:4318 --summary-every 10s
//! strait-otlp-sink --jaeger-query http://127.0.0.1:16686 --service hello-world-producer
//! ```
//!
//! Stops on Ctrl-C or SIGTERM after printing a final summary.

use std::collections::HashSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use strait_otlp_sink::Sink;
use strait_otlp_sink::hops::{HopStats, HopTracker, analyse};
use strait_otlp_sink::jaeger::Query;

/// Receive OTLP/HTTP (protobuf) spans and summarise producer -> mirror -> consumer hops.
#[derive(Debug, Parser)]
#[command(name = "strait-otlp-sink", version)]
struct Cli {
    /// Address to listen on (OTLP/HTTP's usual port is 4318).
    #[arg(long, default_value = "127.0.0.1:4318")]
    listen: String,
    /// How often to print the summary, e.g. 10s, 500ms, 1m.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    summary_every: Duration,
    /// At most this many per-trace lines per summary (the rest are counted).
    #[arg(long, default_value_t = 20)]
    max_lines: usize,
    /// Percentiles cover the last N complete traces.
    #[arg(long, default_value_t = 10_000)]
    window: usize,
    /// Give up on a trace whose spans are still incomplete after this long.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    max_wait: Duration,
    /// Read the traces from this Jaeger query API (e.g. http://127.0.0.1:16686) instead of
    /// receiving spans.
    #[arg(long, value_name = "URL")]
    jaeger_query: Option<String>,
    /// With --jaeger-query: the service whose traces are read (the producer's: its traces hold
    /// the mirror's and the consumer's spans too).
    #[arg(long, default_value = "hello-world-producer")]
    service: String,
    /// With --jaeger-query: read at most this many of the most recent traces.
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    /// With --jaeger-query: print one summary and exit (1 if no trace was complete).
    #[arg(long)]
    once: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a duration such as 10s, 500ms or 1m"))?;
    let secs = match unit.trim() {
        "ms" => n / 1e3,
        "s" => n,
        "m" => n * 60.0,
        other => return Err(format!("{s:?}: unknown unit {other:?}; use ms, s or m")),
    };
    if !(secs > 0.0 && secs < 86_400.0) {
        return Err(format!("{s:?}: must be above zero and below a day"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("strait-otlp-sink: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.jaeger_query.clone() {
        Some(url) => {
            let (once, service) = (cli.once, cli.service.clone());
            match runtime.block_on(run_jaeger(cli, url)) {
                Ok(0) if once => {
                    eprintln!(
                        "strait-otlp-sink: no complete producer -> mirror -> consumer trace among \
                         the traces of {service:?} in Jaeger; check that all three export to it"
                    );
                    return ExitCode::FAILURE;
                }
                other => other.map(drop),
            }
        }
        None => runtime.block_on(run(cli)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strait-otlp-sink: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), strait_otlp_sink::Error> {
    // The binary hands spans to the tracker every tick, so the buffer only bridges one tick.
    let sink = Sink::start_with_capacity(&cli.listen, 1_000_000).await?;
    println!(
        "strait-otlp-sink: receiving OTLP/HTTP protobuf on {}/v1/traces; summary every {:?}",
        sink.endpoint(),
        cli.summary_every
    );
    let started = Instant::now();
    let mut tracker = HopTracker::new(cli.max_wait, cli.window);
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + cli.summary_every,
        cli.summary_every,
    );
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        let last = tokio::select! {
            _ = tick.tick() => false,
            _ = &mut stop => true,
        };
        summarise(&sink, &mut tracker, started, cli.max_lines, last);
        if last {
            break;
        }
    }
    sink.stop().await;
    Ok(())
}

fn summarise(
    sink: &Sink,
    tracker: &mut HopTracker,
    started: Instant,
    max_lines: usize,
    last: bool,
) {
    let now = Instant::now();
    tracker.add(sink.take_spans(), now);
    let done = tracker.take_complete(now);
    let stats = sink.stats();
    println!(
        "== [+{}s]{} sink: {} span(s) in {} request(s); {} new complete trace(s), {} total, {} pending, {} abandoned ==",
        started.elapsed().as_secs(),
        if last { " final" } else { "" },
        stats.spans,
        stats.requests,
        done.len(),
        tracker.stats.total(),
        tracker.pending(),
        tracker.abandoned()
    );
    for h in done.iter().take(max_lines) {
        println!("{}", h.line());
    }
    if done.len() > max_lines {
        println!("... and {} more trace(s)", done.len() - max_lines);
    }
    if tracker.stats.total() > 0 {
        print!("{}", tracker.stats.table());
    }
}

/// Summaries from Jaeger's query API: each one reads the most recent traces of the service again
/// (Jaeger keeps them), prints the traces that completed since the last one, and p50/p99 per hop
/// over the complete traces read.
async fn run_jaeger(cli: Cli, url: String) -> Result<usize, strait_otlp_sink::Error> {
    let query = Query::new(&url)?;
    if !cli.once {
        println!(
            "strait-otlp-sink: reading the traces of {:?} from the Jaeger query API {}/api/traces; \
             summary every {:?}",
            cli.service,
            query.url(),
            cli.summary_every
        );
    }
    let started = Instant::now();
    let mut seen = HashSet::new();
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + cli.summary_every,
        cli.summary_every,
    );
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        let last = cli.once
            || tokio::select! {
                _ = tick.tick() => false,
                _ = &mut stop => true,
            };
        let complete = match query.traces(&cli.service, cli.limit).await {
            Ok(spans) => analyse(&spans),
            // Jaeger may be briefly busy on a loaded machine: say so and try again next time.
            Err(e) if !last => {
                eprintln!("strait-otlp-sink: {e}");
                continue;
            }
            Err(e) => return Err(e),
        };
        let new: Vec<_> = complete
            .iter()
            .filter(|h| seen.insert(h.trace_id))
            .collect();
        println!(
            "== [+{}s]{} jaeger: {} new complete trace(s), {} total (of the {} most recent traces of {}) ==",
            started.elapsed().as_secs(),
            if last { " final" } else { "" },
            new.len(),
            complete.len(),
            cli.limit,
            cli.service
        );
        for h in new.iter().take(cli.max_lines) {
            println!("{}", h.line());
        }
        if new.len() > cli.max_lines {
            println!("... and {} more trace(s)", new.len() - cli.max_lines);
        }
        let mut stats = HopStats::new(cli.window);
        complete.iter().for_each(|h| stats.add(h));
        if stats.total() > 0 {
            print!("{}", stats.table());
        }
        if last {
            return Ok(complete.len());
        }
    }
}

/// Resolves on Ctrl-C or SIGTERM.
async fn stop_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5h").is_err());
        assert!(parse_duration("fast").is_err());
    }
}
