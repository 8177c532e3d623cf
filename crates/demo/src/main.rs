//! `strait-demo`: the traced producer and consumer of Strait's tracing walkthrough (the
//! `hello-world-producer` / `hello-world-consumer` of the MirrorMaker + Jaeger blog post), built
//! on strait-wire and strait-forward.
//!
//! ```text
//! strait-demo produce --props europe-user.properties --topic my-topic --rate 1
//! strait-demo consume --props us-user.properties --topic my-topic --group my-group
//! ```
//!
//! Client properties come from `--props FILE` (Java `key=value` lines, as `scripts/kafka.sh`
//! writes them), then `--prop key=value`, then `--bootstrap`; mTLS is
//! `security.protocol=SSL` with `ssl.ca.location`, `ssl.certificate.location` and
//! `ssl.key.location`. Spans go to `--otlp-endpoint` (default `http://127.0.0.1:4318`, or
//! `OTEL_EXPORTER_OTLP_ENDPOINT`; an empty value turns export off).
//!
//! Owns: the two demo clients and their output format. Does not own: the Kafka protocol
//! (strait-wire), batch parsing (strait-forward) or the mirror.

use strait_demo::{consume, error, produce, props, telemetry};

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::error::Result;
use crate::props::Properties;
use crate::telemetry::Telemetry;

/// Traced demo producer and consumer for Strait.
#[derive(Debug, Parser)]
#[command(name = "strait-demo", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Send "Hello world - N" (N from 1) with a traceparent header, one record per batch.
    Produce(ProduceCmd),
    /// Join a consumer group, print each record and commit.
    Consume(ConsumeCmd),
}

#[derive(Debug, Args)]
struct Common {
    /// bootstrap.servers (overrides the properties).
    #[arg(long)]
    bootstrap: Option<String>,
    /// A Java-style client properties file.
    #[arg(long, value_name = "FILE")]
    props: Option<PathBuf>,
    /// A client property KEY=VALUE (repeatable), e.g. --prop security.protocol=SSL.
    #[arg(long = "prop", value_name = "KEY=VALUE")]
    prop: Vec<String>,
    /// The topic.
    #[arg(long, default_value = "my-topic")]
    topic: String,
    /// OTLP/HTTP base endpoint for spans; empty = no export.
    #[arg(
        long,
        env = "OTEL_EXPORTER_OTLP_ENDPOINT",
        default_value = "http://127.0.0.1:4318"
    )]
    otlp_endpoint: String,
    /// service.name of the spans (defaults: hello-world-producer / hello-world-consumer).
    #[arg(long)]
    service_name: Option<String>,
    /// Stop after this many records (0 = run until Ctrl-C / SIGTERM).
    #[arg(long, default_value_t = 0)]
    count: u64,
}

impl Common {
    fn client_config(&self, client_id: &str) -> Result<strait_wire::ClientConfig> {
        let mut p = Properties::default();
        p.set("client.id", client_id);
        if let Some(f) = &self.props {
            p.load_file(f)?;
        }
        for arg in &self.prop {
            p.set_arg(arg)?;
        }
        if let Some(b) = &self.bootstrap {
            p.set("bootstrap.servers", b);
        }
        p.client_config()
    }

    fn telemetry(&self, default_service: &str) -> Result<Telemetry> {
        let endpoint = Some(self.otlp_endpoint.trim()).filter(|e| !e.is_empty());
        Telemetry::init(
            endpoint,
            self.service_name.as_deref().unwrap_or(default_service),
        )
    }
}

#[derive(Debug, Args)]
struct ProduceCmd {
    #[command(flatten)]
    common: Common,
    /// Records per second.
    #[arg(long, default_value_t = 1.0)]
    rate: f64,
}

#[derive(Debug, Args)]
struct ConsumeCmd {
    #[command(flatten)]
    common: Common,
    /// The consumer group.
    #[arg(long, default_value = "my-group")]
    group: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("strait-demo: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strait-demo: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Produce(cmd) => {
            let telemetry = cmd.common.telemetry("hello-world-producer")?;
            let client =
                strait_wire::Client::connect(cmd.common.client_config("hello-world-producer")?)
                    .await?;
            let args = produce::ProduceArgs {
                topic: cmd.common.topic.clone(),
                rate: cmd.rate,
                count: cmd.common.count,
            };
            let result = produce::run(&client, &telemetry, &args, stop_signal()).await;
            let (exported, failed) = telemetry.shutdown().await;
            report("produce", "acknowledged", &result, exported, failed);
            result.map(|_| ())
        }
        Command::Consume(cmd) => {
            let telemetry = cmd.common.telemetry("hello-world-consumer")?;
            let client =
                strait_wire::Client::connect(cmd.common.client_config("hello-world-consumer")?)
                    .await?;
            let args = consume::ConsumeArgs {
                topic: cmd.common.topic.clone(),
                group: cmd.group.clone(),
                count: cmd.common.count,
            };
            let result = consume::run(&client, &telemetry, &args, stop_signal()).await;
            let (exported, failed) = telemetry.shutdown().await;
            report("consume", "printed", &result, exported, failed);
            result.map(|_| ())
        }
    }
}

fn report(what: &str, verb: &str, result: &Result<u64>, exported: u64, failed: u64) {
    if let Ok(n) = result {
        eprintln!(
            "strait-demo {what}: {n} record(s) {verb}; {exported} span(s) exported, {failed} lost in failed exports"
        );
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
