//! `strait`: the Kafka cross-cluster mirror binary.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use strait::cli::{Action, Cli};
use strait::config::{Config, Environment};
use strait::http::{self, Liveness, Readiness};
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
        Action::Import(command) => strait::import::run(&command),
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
            match runtime.block_on(strait::check::check(&loaded.config)) {
                Ok(report) => {
                    print!("{}", report.text);
                    match report.failure() {
                        Some(e) => fail(&e),
                        None => ExitCode::SUCCESS,
                    }
                }
                Err(e) => fail(&e),
            }
        }
        Action::Failover {
            loaded,
            groups,
            apply,
        } => {
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return fail(&Error::Runtime(format!("cannot start the runtime: {e}"))),
            };
            match runtime.block_on(strait::failover::command::failover(
                &loaded.config,
                &groups,
                apply,
            )) {
                Ok(report) => {
                    print!("{}", report.text);
                    for (group, why) in &report.refused {
                        eprintln!("error: {group}: {why}");
                    }
                    if report.refused.is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
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
    tokio::spawn(cancel_on_signal(
        shutdown.clone(),
        config.mirror.drain_timeout + SHUTDOWN_GRACE,
    ));
    let mut metrics = Metrics::new();
    if config.metrics.mm2_compat {
        metrics = metrics.with_mm2_compat(&config.source.alias, &config.target.alias);
    }
    let metrics = Arc::new(metrics);
    let readiness = Readiness::default();
    let server = match config.metrics.listen {
        Some(addr) => {
            let listener = http::bind(addr).await?;
            tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
            Some(http::spawn(
                listener,
                metrics.clone(),
                readiness.clone(),
                Liveness::default(),
                shutdown.clone(),
            )?)
        }
        None => None,
    };
    let otel = strait::otel::init_from_config(&config)?;
    let mut observers: Vec<Arc<dyn Observer>> = vec![metrics.clone()];
    if let Some(h) = &otel {
        observers.push(h.observer());
    }
    // Checkpoints (opt-in, mirror.groups): the offset maps are fed by the forwarder's
    // acknowledgements; persisted history is replayed before the mirror starts.
    let mut checkpointer = None;
    let mut offset_syncs = None;
    if config.mirror.groups.is_some() {
        let maps = Arc::new(strait::failover::OffsetMaps::default());
        let started = tokio::select! {
            c = strait::failover::checkpoint::Checkpointer::start(config.clone(), maps.clone()) => c?,
            _ = shutdown.cancelled() => return Ok(()),
        };
        observers.push(Arc::new(strait::failover::OffsetObserver::new(maps)));
        let stop = CancellationToken::new();
        let started = started.with_metrics(metrics.clone());
        offset_syncs = Some(started.sync_writer());
        checkpointer = Some((tokio::spawn(started.run(stop.clone())), stop));
    }
    // ACL sync and mirror protection (opt-in): a background task that never stops the mirror.
    let acl_sync = strait::acls::spawn(&config, shutdown.child_token());
    let observer: Arc<dyn Observer> = if observers.len() == 1 {
        metrics.clone()
    } else {
        Arc::new(strait::otel::Fanout::new(observers))
    };
    let result = mirror::run(
        config,
        observer,
        metrics.clone(),
        readiness,
        offset_syncs,
        shutdown.clone(),
    )
    .await;
    // After the mirror's final commit: the last round persists what it acknowledged last.
    if let Some((task, stop)) = checkpointer {
        stop.cancel();
        let _ = task.await;
    }
    if let Some(task) = acl_sync {
        task.abort();
    }
    if let Some(h) = otel {
        match h.shutdown().await {
            Ok(stats) => tracing::info!(?stats, "tracing stopped"),
            Err(e) => tracing::warn!(error = %e, "tracing did not shut down cleanly"),
        }
    }
    shutdown.cancel();
    if let Some(server) = server {
        server.stopped().await;
    }
    result
}

/// Exit code when a shutdown did not finish within `mirror.drain_timeout` plus
/// [`SHUTDOWN_GRACE`] (what was not committed is re-sent by the next owner: duplicates, no loss).
const EXIT_SHUTDOWN_DEADLINE: i32 = 3;

/// Time a shutdown may take beyond `mirror.drain_timeout`: the final commit, leaving the group,
/// flushing traces.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Which signal asked for the shutdown, for the exit code of a forced exit (128 + number).
#[derive(Clone, Copy)]
enum Stop {
    Interrupt,
    Terminate,
}

impl Stop {
    fn forced_exit_code(self) -> i32 {
        match self {
            Stop::Interrupt => 128 + 2,
            Stop::Terminate => 128 + 15,
        }
    }
}

/// The next SIGINT (Ctrl-C) or SIGTERM (container stop).
async fn next_signal() -> Stop {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => Stop::Interrupt,
                    _ = term.recv() => Stop::Terminate,
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                Stop::Interrupt
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        Stop::Interrupt
    }
}

/// Cancels `token` on the first SIGINT or SIGTERM. The shutdown that follows is bounded: after
/// `deadline` the process exits with [`EXIT_SHUTDOWN_DEADLINE`] whatever it was waiting for,
/// and a second signal exits at once (128 + the signal's number).
async fn cancel_on_signal(token: CancellationToken, deadline: std::time::Duration) {
    let first = next_signal().await;
    tracing::info!(
        "shutting down: draining in-flight batches for at most {deadline:?}; send the signal \
         again to exit at once"
    );
    token.cancel();
    tokio::select! {
        second = next_signal() => {
            tracing::warn!("second signal: exiting at once; positions not committed yet are \
                re-sent after the restart (duplicates, no loss)");
            std::process::exit(second.forced_exit_code());
        }
        () = tokio::time::sleep(deadline) => {
            tracing::error!("the shutdown did not finish within {deadline:?}; exiting anyway; \
                positions not committed yet are re-sent after the restart (duplicates, no loss)");
            let _ = first;
            std::process::exit(EXIT_SHUTDOWN_DEADLINE);
        }
    }
}
