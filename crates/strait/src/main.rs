//! `strait`: the Kafka cross-cluster mirror binary.

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use strait::cli::{Action, Cli, Output, StatusArgs};
use strait::config::Environment;
use strait::observe::logging;
use strait::{Error, Result};
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
        Action::Check(loaded, output) => check_offline(&loaded, output),
        Action::CheckConnected(loaded, output) => check_connected(&loaded, output),
        Action::Failover {
            loaded,
            groups,
            apply,
            output,
        } => failover(&loaded, &groups, apply, output),
        Action::Status(args) => status(&args),
        Action::Completions(shell) => {
            let mut command = Cli::command();
            clap_complete::generate(shell, &mut command, "strait", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Action::Man(dir) => man(dir.as_deref()),
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
            let runtime = match run_runtime(&loaded.config.runtime) {
                Ok(rt) => rt,
                Err(e) => return fail(&e),
            };
            tracing::info!(
                worker_threads = runtime.metrics().num_workers(),
                "runtime started"
            );
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
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
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

/// The runtime of `strait run`: `[runtime] worker_threads` workers, or one per CPU.
fn run_runtime(config: &strait::config::RuntimeConfig) -> Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = config.worker_threads {
        builder.worker_threads(n.get());
    }
    builder
        .enable_all()
        .build()
        .map_err(|e| Error::Runtime(format!("cannot start the runtime: {e}")))
}

/// The runtime of the other commands: one worker per CPU.
fn runtime() -> Result<tokio::runtime::Runtime> {
    run_runtime(&strait::config::RuntimeConfig::default())
}

/// `# flow <name>` before each flow's part of the text output, when there are several.
fn flow_header(loaded: &strait::Loaded, i: usize, config: &strait::Config) {
    if !loaded.flows.is_empty() {
        let flow = strait::config::flows::flow_name(config);
        println!("{}# flow {flow}", if i > 0 { "\n" } else { "" });
    }
}

/// A flow's effective configuration (secrets redacted) as JSON, for `--output json`.
fn config_json(config: &strait::Config) -> serde_json::Value {
    let toml = config.to_toml(true);
    match toml::from_str::<toml::Value>(&toml) {
        Ok(v) => serde_json::to_value(v).unwrap_or(serde_json::Value::Null),
        Err(_) => serde_json::Value::String(toml),
    }
}

/// The `--output json` document of `strait check`: the status the exit code says, and per
/// flow its configuration and findings.
fn check_json(code: u8, flows: Vec<serde_json::Value>) -> String {
    let status = match code {
        strait::exit::SUCCESS => "ok",
        strait::exit::RIGHTS_MISSING => "rights_missing",
        strait::exit::UNREACHABLE => "unreachable",
        strait::exit::CONFIG => "config_error",
        _ => "error",
    };
    let doc = serde_json::json!({ "status": status, "exit_code": code, "flows": flows });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

fn flow_json(loaded: &strait::Loaded, config: &strait::Config) -> serde_json::Value {
    serde_json::json!({
        "flow": (!loaded.flows.is_empty()).then(|| strait::config::flows::flow_name(config)),
        "source": config.source.alias,
        "target": config.target.alias,
        "config": config_json(config),
    })
}

/// `strait check --offline` (and `mirror-maker|mm2 --check`): the effective configuration.
fn check_offline(loaded: &strait::Loaded, output: Output) -> ExitCode {
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    let flows = loaded.all_flows();
    match output {
        Output::Text => {
            for (i, config) in flows.into_iter().enumerate() {
                flow_header(loaded, i, config);
                print!("{}", config.to_toml(true));
            }
        }
        Output::Json => {
            let flows = flows.into_iter().map(|c| flow_json(loaded, c)).collect();
            println!("{}", check_json(strait::exit::SUCCESS, flows));
        }
    }
    ExitCode::SUCCESS
}

/// `strait check`: every flow is checked (its clusters, rights and plan); the first failure
/// decides the exit code (a cluster that cannot be reached: 4, missing rights: 5).
fn check_connected(loaded: &strait::Loaded, output: Output) -> ExitCode {
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    let mut code: Option<u8> = None;
    let mut flows = Vec::new();
    for (i, config) in loaded.all_flows().into_iter().enumerate() {
        if output == Output::Text {
            flow_header(loaded, i, config);
            print!("{}", config.to_toml(true));
        }
        let mut json = flow_json(loaded, config);
        let error = match runtime.block_on(strait::check::check(config)) {
            Ok(report) => {
                if output == Output::Text {
                    print!("{}", report.text);
                }
                if let (Some(obj), serde_json::Value::Object(details)) =
                    (json.as_object_mut(), report.details.clone())
                {
                    obj.extend(details);
                }
                report.failure()
            }
            Err(e) => Some(e),
        };
        if let Some(e) = error {
            eprintln!("error: {e}");
            json["error"] = serde_json::Value::String(e.to_string());
            code = code.or(Some(e.exit_code()));
        }
        flows.push(json);
    }
    let code = code.unwrap_or(strait::exit::SUCCESS);
    if output == Output::Json {
        println!("{}", check_json(code, flows));
    }
    ExitCode::from(code)
}

/// `strait failover` / `strait offsets translate`.
fn failover(loaded: &strait::Loaded, groups: &[String], apply: bool, output: Output) -> ExitCode {
    if !loaded.flows.is_empty() {
        return fail(&Error::Unsupported {
            what: "strait failover / strait offsets with several flows".into(),
            hint: "fail over one flow at a time: give it a configuration with [source] \
                   and [target] (the flow's clusters and [mirror] settings)"
                .into(),
        });
    }
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    match runtime.block_on(strait::failover::command::failover(
        &loaded.config,
        groups,
        apply,
    )) {
        Ok(report) => {
            match output {
                Output::Text => print!("{}", report.text),
                Output::Json => {
                    let refused: Vec<serde_json::Value> = report
                        .refused
                        .iter()
                        .map(|(group, why)| serde_json::json!({"group": group, "reason": why}))
                        .collect();
                    let doc = serde_json::json!({
                        "applied": apply,
                        "partitions": report.rows,
                        "refused": refused,
                    });
                    println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
                }
            }
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

/// `strait status`: 0 ready, 1 not ready, 4 the instance cannot be reached.
fn status(args: &StatusArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&Error::Runtime(format!("cannot start the runtime: {e}"))),
    };
    match runtime.block_on(strait::status::fetch(&args.url)) {
        Ok(s) => {
            match args.output {
                Output::Text => print!("{}", s.table()),
                Output::Json => {
                    println!("{}", serde_json::to_string_pretty(&s).unwrap_or_default());
                }
            }
            if s.ready {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(strait::exit::RUNTIME)
            }
        }
        Err(e) => fail(&Error::from(e)),
    }
}

/// `strait man`: strait(1) on stdout, or every page into `dir`.
fn man(dir: Option<&std::path::Path>) -> ExitCode {
    let command = Cli::command();
    let written = match dir {
        Some(dir) => clap_mangen::generate_to(command, dir)
            .map_err(|e| format!("cannot write the man pages into {}: {e}", dir.display())),
        None => clap_mangen::Man::new(command)
            .render(&mut std::io::stdout())
            .map_err(|e| format!("cannot write the man page: {e}")),
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&Error::Runtime(e)),
    }
}

/// How hot reload (`strait::run::reload`) loads the configuration again: as at start.
fn reload_source(command: strait::cli::Command) -> strait::run::reload::Source {
    strait::run::reload::Source::new(command.config_files(), move || {
        match command.load(&Environment::from_process())? {
            Action::Run(loaded) => Ok(loaded.all_flows().into_iter().cloned().collect()),
            _ => Err(Error::Runtime("the command no longer runs a mirror".into())),
        }
    })
}

/// Handles signals and runs every flow (`strait::run::flows`) until a signal stops them.
async fn run(loaded: strait::Loaded, reload: strait::run::reload::Source) -> Result<()> {
    let labelled = !loaded.flows.is_empty();
    let flows: Vec<strait::Config> = match labelled {
        true => loaded.flows,
        false => vec![loaded.config],
    };
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(
        shutdown.clone(),
        strait::run::flows::drain_timeout(&flows) + SHUTDOWN_GRACE,
    ));
    // SIGHUP and file changes reload what can change while running (strait::run::reload).
    let reloader = strait::run::reload::Reloader::new(flows.clone(), reload);
    tokio::spawn(reloader.run(shutdown.child_token()));
    tokio::spawn(strait::run::memory::return_freed_memory(
        shutdown.child_token(),
    ));
    strait::run::flows::run(flows, labelled, shutdown).await
}

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
        i32::from(match self {
            Stop::Interrupt => strait::exit::INTERRUPTED,
            Stop::Terminate => strait::exit::TERMINATED,
        })
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
/// `deadline` the process exits with [`strait::exit::SHUTDOWN_DEADLINE`] whatever it was waiting for,
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
            std::process::exit(i32::from(strait::exit::SHUTDOWN_DEADLINE));
        }
    }
}
