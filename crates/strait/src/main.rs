//! `strait`: the Kafka cross-cluster mirror binary.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use strait::cli::{Action, Cli};
use strait::config::{Config, Environment};
use strait::http::{self, Readiness};
use strait::metrics::Metrics;
use strait::{Error, Result, logging, mirror};
use strait_forward::observe::Observer;
use tokio_util::sync::CancellationToken;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let env = Environment::from_process();
    let action = match cli.command.load(&env) {
        Ok(action) => action,
        Err(e) => return fail(&e),
    };
    match action {
        Action::Check(loaded) => {
            for w in &loaded.warnings {
                eprintln!("warning: {w}");
            }
            print!("{}", loaded.config.to_toml(true));
            ExitCode::SUCCESS
        }
        Action::CheckConnected(loaded) => {
            for w in &loaded.warnings {
                eprintln!("warning: {w}");
            }
            print!("{}", loaded.config.to_toml(true));
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return fail(&Error::Runtime(format!("cannot start the runtime: {e}"))),
            };
            match runtime.block_on(mirror::check(&loaded.config)) {
                Ok(plan) => {
                    print!("{plan}");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(&e),
            }
        }
        Action::Run(loaded) => {
            if let Err(e) = logging::init(&loaded.config.log) {
                return fail(&e);
            }
            for w in &loaded.warnings {
                tracing::warn!("{w}");
            }
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return fail(&Error::Runtime(format!("cannot start the runtime: {e}"))),
            };
            match runtime.block_on(run(loaded.config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "strait stopped");
                    fail(&e)
                }
            }
        }
    }
}

fn fail(e: &Error) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(e.exit_code())
}

/// Starts the telemetry endpoints and signal handling, runs the mirror, and shuts down cleanly.
async fn run(config: Config) -> Result<()> {
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    let metrics = Arc::new(Metrics::new());
    let readiness = Readiness::default();
    let server = match config.metrics.listen {
        Some(addr) => {
            let listener = http::bind(addr).await?;
            tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
            Some(tokio::spawn(http::serve(
                listener,
                metrics.clone(),
                readiness.clone(),
                shutdown.clone(),
            )))
        }
        None => None,
    };
    let otel = strait::otel::init_from_config(&config)?;
    let observer: Arc<dyn Observer> = match &otel {
        Some(h) => Arc::new(strait::otel::Fanout::new(vec![
            metrics.clone(),
            h.observer(),
        ])),
        None => metrics.clone(),
    };
    let result = mirror::run(config, observer, readiness, shutdown.clone()).await;
    if let Some(h) = otel {
        match h.shutdown().await {
            Ok(stats) => tracing::info!(?stats, "tracing stopped"),
            Err(e) => tracing::warn!(error = %e, "tracing did not shut down cleanly"),
        }
    }
    shutdown.cancel();
    if let Some(server) = server {
        let _ = server.await;
    }
    result
}

/// Cancels `token` on SIGINT (Ctrl-C) or SIGTERM (container stop).
async fn cancel_on_signal(token: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutting down");
    token.cancel();
}
