//! `strait`: the Kafka cross-cluster mirror binary.

use std::process::ExitCode;

use clap::Parser;
use strait::cli::{Action, Cli};
use strait::config::Environment;
use strait::{Error, Result, logging};
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
            for (i, config) in loaded.all_flows().into_iter().enumerate() {
                if !loaded.flows.is_empty() {
                    let flow = strait::config::flows::flow_name(config);
                    println!("{}# flow {flow}", if i > 0 { "\n" } else { "" });
                }
                print!("{}", config.to_toml(true));
            }
            ExitCode::SUCCESS
        }
        Action::CheckConnected(loaded) => {
            for w in &loaded.warnings {
                eprintln!("warning: {w}");
            }
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return fail(&Error::Runtime(format!("cannot start the runtime: {e}"))),
            };
            // Every flow is checked (its clusters, rights and plan); the first failure decides.
            let mut code: Option<ExitCode> = None;
            for (i, config) in loaded.all_flows().into_iter().enumerate() {
                if !loaded.flows.is_empty() {
                    let flow = strait::config::flows::flow_name(config);
                    println!("{}# flow {flow}", if i > 0 { "\n" } else { "" });
                }
                print!("{}", config.to_toml(true));
                let failed = match runtime.block_on(strait::check::check(config)) {
                    Ok(report) => {
                        print!("{}", report.text);
                        report.failure().map(|e| fail(&e))
                    }
                    Err(e) => Some(fail(&e)),
                };
                code = code.or(failed);
            }
            code.unwrap_or(ExitCode::SUCCESS)
        }
        Action::Failover {
            loaded,
            groups,
            apply,
        } => {
            if !loaded.flows.is_empty() {
                return fail(&Error::Unsupported {
                    what: "strait failover / strait offsets with several flows".into(),
                    hint: "fail over one flow at a time: give it a configuration with [source] \
                           and [target] (the flow's clusters and [mirror] settings)"
                        .into(),
                });
            }
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
        Action::Handover {
            config,
            args,
            failback,
        } => handover(&config, &args, failback),
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
            match runtime.block_on(run(loaded, reload_source(cli.command))) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "strait stopped");
                    fail(&e)
                }
            }
        }
    }
}

/// `strait switchover` (`failback` = `None`) or `strait failback`: drives the plan, printing
/// each step, then prints or writes the reverse flow's configuration.
fn handover(
    config: &strait::Config,
    args: &strait::cli::HandoverArgs,
    failback: Option<strait::failover::failback::FailbackOptions>,
) -> ExitCode {
    use strait::failover::{failback as fb, plan::DriveOptions, reverse, switchover};
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&Error::Runtime(format!("cannot start the runtime: {e}"))),
    };
    let options = DriveOptions {
        dry_run: args.dry_run,
        timeout: args.timeout,
        poll: std::time::Duration::from_secs(1),
    };
    let print = |s: &str| {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", s.trim_end());
        let _ = out.flush();
    };
    let result = runtime.block_on(async {
        match failback {
            None => switchover::run(config, &options, print).await,
            Some(failback) => fb::run(config, failback, &options, print).await,
        }
    });
    if let Err(e) = result {
        return fail(&e);
    }
    if args.dry_run {
        return ExitCode::SUCCESS;
    }
    match &args.write_reverse_config {
        Some(file) => {
            if let Err(e) = reverse::write_reverse(config, file) {
                return fail(&e);
            }
            println!(
                "reverse flow configuration written to {}; stop the original mirror for good, \
                 then start: strait run --config {}",
                file.display(),
                file.display()
            );
        }
        None => {
            println!("reverse flow configuration (secrets redacted):");
            print!("{}", reverse::reverse_toml(config, true));
        }
    }
    ExitCode::SUCCESS
}

fn fail(e: &Error) -> ExitCode {
    eprintln!("error: {e}");
    ExitCode::from(e.exit_code())
}

/// How hot reload (`strait::reload`) loads the configuration again: as at start.
fn reload_source(command: strait::cli::Command) -> strait::reload::Source {
    strait::reload::Source::new(command.config_files(), move || {
        match command.load(&Environment::from_process())? {
            Action::Run(loaded) => Ok(loaded.all_flows().into_iter().cloned().collect()),
            _ => Err(Error::Runtime("the command no longer runs a mirror".into())),
        }
    })
}

/// Handles signals and runs every flow (`strait::flows`) until a signal stops them.
async fn run(loaded: strait::Loaded, reload: strait::reload::Source) -> Result<()> {
    let labelled = !loaded.flows.is_empty();
    let flows: Vec<strait::Config> = match labelled {
        true => loaded.flows,
        false => vec![loaded.config],
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(
        shutdown.clone(),
        strait::flows::drain_timeout(&flows) + SHUTDOWN_GRACE,
    ));
    // SIGHUP and file changes reload what can change while running (strait::reload).
    let reloader = strait::reload::Reloader::new(flows.clone(), reload);
    tokio::spawn(reloader.run(shutdown.child_token()));
    tokio::spawn(strait::memory::return_freed_memory(shutdown.child_token()));
    strait::flows::run(flows, labelled, shutdown).await
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
