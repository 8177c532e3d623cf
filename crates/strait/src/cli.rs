//! The command line: `strait run|check|status|mirror-maker|mm2|failover|switchover|failback|
//! offsets|import|completions|man`.
//!
//! Exit status: see [`crate::exit`] (0 success, 1 runtime error, 2 configuration or usage error,
//! the message on stderr naming the key, ...). clap's own usage errors also exit with 2.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, Environment, Loaded};
use crate::error::Result;
use crate::import::mirrormaker::{self, Mm1Options, Mm2Options};

const EXAMPLES: &str = "\
Examples:
  strait run --config /etc/strait/strait.toml
  strait check --config strait.toml
  STRAIT_SOURCE_BOOTSTRAP_SERVERS=europe:9092 STRAIT_TARGET_BOOTSTRAP_SERVERS=us:9092 strait run
  strait mirror-maker --consumer.config consumer.properties \\
      --producer.config producer.properties --include 'orders|payments.*'
  strait mm2 mm2.properties --clusters us
  strait mm2 mm2.properties --check        # print the equivalent strait.toml
  strait import strimzi kafka-mirror-maker.yaml --output strait.toml
  strait status --url http://localhost:9464
  strait completions bash > /etc/bash_completion.d/strait

Environment: STRAIT_<SECTION>_<KEY> overrides [mirror], [metrics], [tracing] and [log] keys
(STRAIT_MIRROR_GROUP_ID=my-group); STRAIT_SOURCE_<PROPERTY> / STRAIT_TARGET_<PROPERTY> set
Kafka client properties (STRAIT_SOURCE_BOOTSTRAP_SERVERS -> bootstrap.servers). RUST_LOG
overrides log.level. OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_SERVICE_NAME are used when the
configuration does not set tracing.otlp_endpoint / tracing.service_name.
";

/// `strait --version`: the release, the git commit and the build date (`build.rs`).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("STRAIT_GIT_COMMIT"),
    ", built ",
    env!("STRAIT_BUILD_DATE"),
    ")"
);

/// The long help's epilogue: examples, environment and the exit codes of [`crate::exit`].
fn long_help() -> String {
    format!("{EXAMPLES}\n{}", crate::exit::help())
}

/// Strait: a single-binary Kafka cross-cluster mirror, a drop-in replacement for MirrorMaker 1
/// and 2.
#[derive(Debug, Parser)]
#[command(name = "strait", version = VERSION, after_long_help = long_help(), after_help = "Run `strait --help` for examples and exit codes.")]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the mirror described by a strait.toml file (and the environment).
    Run(ConfigArgs),
    /// Validate the configuration, print the effective settings (secrets redacted), connect to
    /// both clusters, check the mirror's permissions and print the plan.
    Check(CheckArgs),
    /// Run from MirrorMaker 1 options and files (drop-in for kafka-mirror-maker.sh).
    #[command(
        name = "mirror-maker",
        after_help = "Example:\n  strait mirror-maker --consumer.config consumer.properties \\\n      --producer.config producer.properties --include 'orders|payments.*'"
    )]
    MirrorMaker(MirrorMakerArgs),
    /// Run from an mm2.properties file (drop-in for connect-mirror-maker.sh); every enabled flow.
    #[command(after_help = "Example:\n  strait mm2 mm2.properties --clusters us")]
    Mm2(Mm2Args),
    /// Site failover: print the translated offsets of the checkpointed groups from the target
    /// alone (the source may be gone); with --apply, commit them to the same groups on the
    /// target (never to a group active there, never backwards).
    #[command(
        after_help = "Example:\n  strait failover --config strait.toml --group orders-app --apply"
    )]
    Failover(FailoverArgs),
    /// Planned switchover of a flow to its target site (both sites up): waits until the groups
    /// stopped on the source, the mirror's lag is 0 and the mirror stopped, then commits the
    /// groups' translated offsets on the target and the reverse flow's start positions.
    #[command(
        after_help = "Example:\n  strait switchover --config strait.toml --write-reverse-config reverse.toml"
    )]
    Switchover(SwitchoverArgs),
    /// After an unplanned failover, with the old source back: decides about the records that
    /// never reached the target (--stranded), then sets up the reverse flow's start positions.
    #[command(
        after_help = "Example:\n  strait failback --config strait.toml --stranded copy --write-reverse-config reverse.toml"
    )]
    Failback(FailbackArgs),
    /// Consumer-group offset tools.
    #[command(subcommand)]
    Offsets(OffsetsCommand),
    /// Convert another tool's configuration into a strait.toml (and Helm values).
    #[command(subcommand)]
    Import(crate::import::ImportCommand),
    /// Show a running instance's readiness and lag (its /readyz and /metrics) as a table.
    #[command(
        after_help = "Exit status: 0 ready, 1 not ready, 4 the instance cannot be reached.\n\n\
                      Example:\n  strait status --url http://localhost:9464"
    )]
    Status(StatusArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(
        after_help = "Example:\n  strait completions bash > /etc/bash_completion.d/strait\n  \
                            strait completions zsh > \"${fpath[1]}/_strait\""
    )]
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of strait; with --dir, write one page per subcommand too.
    #[command(
        after_help = "Example:\n  strait man > /usr/local/share/man/man1/strait.1\n  \
                            strait man --dir /usr/local/share/man/man1"
    )]
    Man {
        /// Write strait.1 and strait-<subcommand>.1 into this directory instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

/// How a command prints its result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// For people.
    #[default]
    Text,
    /// One JSON document on stdout, for scripts (errors still go to stderr).
    Json,
}

/// `status` arguments.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    /// The instance's metrics address (metrics.listen), as http://host:port.
    #[arg(long, default_value = "http://127.0.0.1:9464")]
    pub url: String,
    /// Text (a table) or JSON.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

/// `strait offsets` subcommands.
#[derive(Debug, Subcommand)]
pub enum OffsetsCommand {
    /// Print the translated offsets of the checkpointed groups from the target alone; never
    /// commits (`strait failover` without --apply).
    #[command(
        after_help = "Example:\n  strait offsets translate --config strait.toml --group orders-app"
    )]
    Translate(TranslateArgs),
}

/// `offsets translate` arguments.
#[derive(Debug, Clone, Args)]
pub struct TranslateArgs {
    /// The configuration (only [source] alias and [target] are used).
    #[command(flatten)]
    pub config: ConfigArgs,
    /// A group to translate (repeat for several); default: every checkpointed group.
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
    /// Text (a tab-separated table) or JSON.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

/// `failover` arguments.
#[derive(Debug, Clone, Args)]
pub struct FailoverArgs {
    /// The configuration (only [source] alias and [target] are used).
    #[command(flatten)]
    pub config: ConfigArgs,
    /// A group to fail over (repeat for several); default: every checkpointed group.
    #[arg(long = "group", value_name = "GROUP")]
    pub groups: Vec<String>,
    /// Commit the translated offsets on the target.
    #[arg(long)]
    pub apply: bool,
    /// Text (a tab-separated table) or JSON.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

/// What `switchover` and `failback` share.
#[derive(Debug, Clone, Args)]
pub struct HandoverArgs {
    /// The configuration of the flow to move.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The flow (`<source alias>-><target alias>`) when the configuration has several.
    #[arg(long, value_name = "NAME")]
    pub flow: Option<String>,
    /// Print the plan (each step and its state) and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// How long a step may wait for the operator (producers, consumers, the mirror to stop).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub timeout: std::time::Duration,
    /// Write the reverse flow's strait.toml here (secrets from references stay references);
    /// without it, the reverse configuration is printed with secrets redacted.
    #[arg(long, value_name = "FILE")]
    pub write_reverse_config: Option<PathBuf>,
}

/// `switchover` arguments.
#[derive(Debug, Clone, Args)]
pub struct SwitchoverArgs {
    /// Shared options.
    #[command(flatten)]
    pub handover: HandoverArgs,
}

/// `failback` arguments.
#[derive(Debug, Clone, Args)]
pub struct FailbackArgs {
    /// Shared options.
    #[command(flatten)]
    pub handover: HandoverArgs,
    /// What to do with records on the old source that never reached the target: `copy`
    /// (append them to the target), `export FILE` (JSON lines) or `drop` (leave them). Required
    /// when there are any.
    #[arg(long, num_args = 1..=2, value_names = ["copy|export|drop", "FILE"])]
    pub stranded: Vec<String>,
    /// When the failover happened (ms since the epoch): records of the old source with a later
    /// timestamp are reported as diverged (written there after the failover), apart from the
    /// stranded ones; the --stranded decision applies to both.
    #[arg(long, value_name = "EPOCH_MS")]
    pub failed_over_at: Option<i64>,
}

impl FailbackArgs {
    /// The decision given with --stranded.
    pub fn choice(&self) -> Result<Option<crate::failover::failback::Stranded>> {
        use crate::failover::failback::Stranded;
        let bad = |got: String| crate::Error::Invalid {
            key: "--stranded".into(),
            expected: "copy, export FILE or drop".into(),
            got,
        };
        match self.stranded.as_slice() {
            [] => Ok(None),
            [c] if c == "copy" => Ok(Some(Stranded::Copy)),
            [c] if c == "drop" => Ok(Some(Stranded::Drop)),
            [c, file] if c == "export" => Ok(Some(Stranded::Export(PathBuf::from(file)))),
            other => Err(bad(format!("{:?}", other.join(" ")))),
        }
    }
}

fn parse_duration(s: &str) -> std::result::Result<std::time::Duration, String> {
    crate::config::value::parse_duration(s)
        .ok_or_else(|| format!("expected a duration like \"90s\" or \"5m\", got {s:?}"))
}

/// `run` / `check` arguments.
#[derive(Debug, Clone, Args)]
pub struct ConfigArgs {
    /// The strait.toml file. Without it, the configuration comes from STRAIT_* variables alone.
    #[arg(long, short, env = "STRAIT_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `check` arguments.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// The configuration.
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Only validate and print the configuration; do not connect.
    #[arg(long)]
    pub offline: bool,
    /// Text or JSON (the effective configuration, rights, plan and exit status as one document).
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

/// `mirror-maker` arguments.
#[derive(Debug, Clone, Args)]
pub struct MirrorMakerArgs {
    /// The MirrorMaker 1 options.
    #[command(flatten)]
    pub options: Mm1Options,
    /// Only validate and print the equivalent strait.toml (secrets redacted), then exit.
    #[arg(long)]
    pub check: bool,
}

/// `mm2` arguments.
#[derive(Debug, Clone, Args)]
pub struct Mm2Args {
    /// The MirrorMaker 2 options.
    #[command(flatten)]
    pub options: Mm2Options,
    /// Only validate and print the equivalent strait.toml (secrets redacted), then exit.
    #[arg(long)]
    pub check: bool,
}

/// What the command asks for once the configuration is loaded.
#[derive(Debug)]
pub enum Action {
    /// Run the mirror.
    Run(Loaded),
    /// Print the effective configuration and exit.
    Check(Loaded, Output),
    /// Print the effective configuration, connect to both clusters and print the plan.
    CheckConnected(Loaded, Output),
    /// `strait failover`.
    Failover {
        /// The configuration.
        loaded: Loaded,
        /// The groups asked for (empty: all).
        groups: Vec<String>,
        /// Commit, not only print.
        apply: bool,
        /// How to print the table.
        output: Output,
    },
    /// `strait switchover` / `strait failback` for one flow.
    Handover {
        /// The flow's configuration.
        config: Box<crate::Config>,
        /// The shared options.
        args: HandoverArgs,
        /// `None`: switchover; `Some(options)`: failback.
        failback: Option<crate::failover::failback::FailbackOptions>,
    },
    /// `strait import`: converts and prints; no configuration to load.
    Import(crate::import::ImportCommand),
    /// `strait status`: no configuration to load.
    Status(StatusArgs),
    /// `strait completions <shell>`.
    Completions(clap_complete::Shell),
    /// `strait man [--dir DIR]`.
    Man(Option<PathBuf>),
}

impl Command {
    /// The configuration files this command reads, for hot reload (`crate::run::reload`) to watch.
    pub fn config_files(&self) -> Vec<PathBuf> {
        match self {
            Command::Run(args) => args.config.iter().cloned().collect(),
            Command::MirrorMaker(args) => vec![
                args.options.consumer_config.clone(),
                args.options.producer_config.clone(),
            ],
            Command::Mm2(args) => vec![args.options.file.clone()],
            _ => Vec::new(),
        }
    }

    /// Loads and validates the configuration this command names.
    pub fn load(&self, env: &Environment) -> Result<Action> {
        let from_file = |args: &ConfigArgs| match &args.config {
            Some(path) => Config::load(path, env),
            None => Config::from_toml_str("", std::path::Path::new("(environment)"), env),
        };
        Ok(match self {
            Command::Run(args) => Action::Run(from_file(args)?),
            Command::Check(args) if args.offline => {
                Action::Check(from_file(&args.config)?, args.output)
            }
            Command::Check(args) => Action::CheckConnected(from_file(&args.config)?, args.output),
            Command::MirrorMaker(args) => {
                let loaded = mirrormaker::mm1::load(&args.options, env)?;
                if args.check {
                    Action::Check(loaded, Output::Text)
                } else {
                    Action::Run(loaded)
                }
            }
            Command::Failover(args) => Action::Failover {
                loaded: from_file(&args.config)?,
                groups: args.groups.clone(),
                apply: args.apply,
                output: args.output,
            },
            Command::Offsets(OffsetsCommand::Translate(args)) => Action::Failover {
                loaded: from_file(&args.config)?,
                groups: args.groups.clone(),
                apply: false,
                output: args.output,
            },
            Command::Switchover(args) => Action::Handover {
                config: Box::new(one_flow(from_file(&args.handover.config)?, &args.handover)?),
                args: args.handover.clone(),
                failback: None,
            },
            Command::Failback(args) => Action::Handover {
                config: Box::new(one_flow(from_file(&args.handover.config)?, &args.handover)?),
                args: args.handover.clone(),
                failback: Some(crate::failover::failback::FailbackOptions {
                    choice: args.choice()?,
                    failed_over_at: args.failed_over_at,
                }),
            },
            Command::Import(command) => Action::Import(command.clone()),
            Command::Status(args) => Action::Status(args.clone()),
            Command::Completions { shell } => Action::Completions(*shell),
            Command::Man { dir } => Action::Man(dir.clone()),
            Command::Mm2(args) => {
                let loaded = mirrormaker::mm2::load(&args.options, env)?;
                if args.check {
                    Action::Check(loaded, Output::Text)
                } else {
                    Action::Run(loaded)
                }
            }
        })
    }
}

/// The flow a switchover or failback moves: the configuration's only flow, or the one named
/// with --flow.
fn one_flow(loaded: Loaded, args: &HandoverArgs) -> Result<Config> {
    use crate::config::flows::flow_name;
    if loaded.flows.is_empty() {
        return match &args.flow {
            Some(f) if *f != flow_name(&loaded.config) => Err(crate::Error::Invalid {
                key: "--flow".into(),
                expected: format!("the configuration's flow {}", flow_name(&loaded.config)),
                got: format!("{f:?}"),
            }),
            _ => Ok(loaded.config),
        };
    }
    let names: Vec<String> = loaded.flows.iter().map(flow_name).collect();
    match &args.flow {
        Some(f) => loaded
            .flows
            .into_iter()
            .find(|c| flow_name(c) == *f)
            .ok_or_else(|| crate::Error::Invalid {
                key: "--flow".into(),
                expected: format!("one of {}", names.join(", ")),
                got: format!("{f:?}"),
            }),
        None => Err(crate::Error::Missing {
            key: "--flow".into(),
            hint: format!("the configuration has several flows: {}", names.join(", ")),
        }),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn failback_takes_an_explicit_stranded_choice() {
        use crate::failover::failback::Stranded;
        let parse = |extra: &[&str]| {
            let mut args = vec!["strait", "failback"];
            args.extend_from_slice(extra);
            let cli = Cli::try_parse_from(args).unwrap();
            let Command::Failback(args) = cli.command else {
                panic!("wrong command")
            };
            args.choice()
        };
        assert_eq!(parse(&[]).unwrap(), None);
        assert_eq!(
            parse(&["--stranded", "copy"]).unwrap(),
            Some(Stranded::Copy)
        );
        assert_eq!(
            parse(&["--stranded", "export", "s.jsonl", "--dry-run"]).unwrap(),
            Some(Stranded::Export(PathBuf::from("s.jsonl")))
        );
        assert!(parse(&["--stranded", "keep"]).is_err());
        assert!(parse(&["--stranded", "export"]).is_err());
        let cli = Cli::try_parse_from(["strait", "switchover", "--timeout", "90s"]).unwrap();
        let Command::Switchover(args) = cli.command else {
            panic!("wrong command")
        };
        assert_eq!(args.handover.timeout, std::time::Duration::from_secs(90));
    }

    #[test]
    fn switchover_picks_one_flow_of_several_with_flow() {
        let text = "[clusters.a]\n\"bootstrap.servers\" = \"a:1\"\n\
                    [clusters.b]\n\"bootstrap.servers\" = \"b:1\"\n\
                    [mirror]\ntopics = [\"t\"]\n\
                    [[flows]]\nsource = \"a\"\ntarget = \"b\"\n\
                    [[flows]]\nsource = \"b\"\ntarget = \"a\"\n";
        let load = || {
            Config::from_toml_str(
                text,
                std::path::Path::new("f.toml"),
                &Environment::default(),
            )
            .unwrap()
        };
        let args = |flow: Option<&str>| HandoverArgs {
            config: ConfigArgs { config: None },
            flow: flow.map(str::to_string),
            dry_run: false,
            timeout: std::time::Duration::from_secs(1),
            write_reverse_config: None,
        };
        let picked = one_flow(load(), &args(Some("b->a"))).unwrap();
        assert_eq!(
            (picked.source.alias.as_str(), picked.target.alias.as_str()),
            ("b", "a")
        );
        let err = one_flow(load(), &args(None)).unwrap_err().to_string();
        assert!(
            err.starts_with("--flow: missing") && err.contains("a->b, b->a"),
            "{err}"
        );
        let err = one_flow(load(), &args(Some("a->c")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("one of a->b, b->a"), "{err}");
    }

    #[test]
    fn offsets_translate_is_failover_without_apply() {
        let cli = Cli::try_parse_from([
            "strait",
            "offsets",
            "translate",
            "--group",
            "a",
            "--group",
            "b",
        ])
        .unwrap();
        let Command::Offsets(OffsetsCommand::Translate(args)) = &cli.command else {
            panic!("{cli:?}")
        };
        assert_eq!(args.groups, ["a", "b"]);
        assert!(Cli::try_parse_from(["strait", "offsets", "translate", "--apply"]).is_err());
    }

    #[test]
    fn mirror_maker_options_keep_their_java_spelling() {
        let cli = Cli::try_parse_from([
            "strait",
            "mirror-maker",
            "--consumer.config",
            "c.properties",
            "--producer.config",
            "p.properties",
            "--whitelist",
            "a.*",
            "--num.streams",
            "4",
            "--offset.commit.interval.ms",
            "1000",
            "--abort.on.send.failure",
            "true",
            "--new.consumer",
        ])
        .unwrap();
        let Command::MirrorMaker(args) = cli.command else {
            panic!("wrong command");
        };
        assert_eq!(args.options.consumer_config, PathBuf::from("c.properties"));
        assert_eq!(args.options.whitelist.as_deref(), Some("a.*"));
        assert_eq!(args.options.num_streams, Some(4));
        assert_eq!(args.options.offset_commit_interval_ms, Some(1000));
        assert_eq!(args.options.abort_on_send_failure, Some(true));
        assert!(args.options.new_consumer);
        assert!(!args.check);
    }

    #[test]
    fn mm2_clusters_take_lists() {
        let cli = Cli::try_parse_from([
            "strait",
            "mm2",
            "f.properties",
            "--clusters",
            "B,C",
            "--check",
        ])
        .unwrap();
        let Command::Mm2(args) = cli.command else {
            panic!("wrong command");
        };
        assert_eq!(args.options.clusters, ["B", "C"]);
        assert!(args.check);
        let cli =
            Cli::try_parse_from(["strait", "mm2", "f.properties", "--clusters", "B", "C"]).unwrap();
        let Command::Mm2(args) = cli.command else {
            panic!("wrong command");
        };
        assert_eq!(args.options.clusters, ["B", "C"]);
    }

    #[test]
    fn run_without_a_file_reads_the_environment() {
        let cli = Cli::try_parse_from(["strait", "run"]).unwrap();
        let env = Environment::from_pairs([
            ("STRAIT_SOURCE_BOOTSTRAP_SERVERS", "a:1"),
            ("STRAIT_TARGET_BOOTSTRAP_SERVERS", "b:1"),
        ]);
        let Action::Run(loaded) = cli.command.load(&env).unwrap() else {
            panic!("wrong action");
        };
        assert_eq!(
            loaded.config.source.property("bootstrap.servers"),
            Some("a:1")
        );
        let err = cli.command.load(&Environment::default()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("source.bootstrap.servers: missing"),
            "{err}"
        );
    }
}
