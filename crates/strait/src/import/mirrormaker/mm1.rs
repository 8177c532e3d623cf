//! MirrorMaker 1 (`kafka.tools.MirrorMaker`, removed in Kafka 4.0) command line and files.
//!
//! | MirrorMaker 1 | Strait |
//! |---|---|
//! | `--consumer.config` client properties | `[source]` |
//! | `group.id` / `auto.offset.reset` / `isolation.level` | `mirror.group_id` / `mirror.start` / `mirror.isolation` |
//! | `--producer.config` client properties | `[target]` |
//! | `compression.type` / `max.in.flight.requests.per.connection` / `batch.size` | `mirror.compression` / `mirror.max_in_flight` (at most 5) / `mirror.batch_size` |
//! | `--include` (or deprecated `--whitelist`) | `mirror.topics` (commas mean "or", as in MM1) |
//! | topic names | kept (`rename = "identity"`) |
//! | no `auto.offset.reset` | `mirror.start = "latest"` (the Java consumer's default, which MM1 kept) |
//! | `--num.streams`, `--offset.commit.interval.ms`, `--new.consumer` | accepted, ignored with a warning |
//! | `--abort.on.send.failure false` | warning: Strait never skips a record it could not write |
//! | `--message.handler`, `--consumer.rebalance.listener` (+ args) | error: not supported |

use std::path::PathBuf;

use super::{Report, Role, ignored_warning, map_client_setting};
use crate::config::properties::Properties;
use crate::config::providers::{Providers, is_declaration_key};
use crate::config::raw::{Entry, Origin, RawConfig, Section};
use crate::config::{Config, Environment, Loaded};
use crate::error::{Error, Result};

/// The MirrorMaker 1 command-line options, with their original spellings.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Mm1Options {
    /// Consumer properties for the source cluster (bootstrap.servers, group.id, security...).
    #[arg(long = "consumer.config", value_name = "FILE")]
    pub consumer_config: PathBuf,
    /// Producer properties for the target cluster.
    #[arg(long = "producer.config", value_name = "FILE")]
    pub producer_config: PathBuf,
    /// Topics to mirror: a regular expression matched against whole names; `,` means "or".
    #[arg(long, value_name = "REGEX")]
    pub include: Option<String>,
    /// Deprecated alias of --include (--include wins when both are given).
    #[arg(long, value_name = "REGEX")]
    pub whitelist: Option<String>,
    /// Accepted for compatibility and ignored: Strait sizes its own concurrency.
    #[arg(long = "num.streams", value_name = "N")]
    pub num_streams: Option<u32>,
    /// Accepted for compatibility and ignored: Strait commits after target acknowledgements.
    #[arg(long = "offset.commit.interval.ms", value_name = "MS")]
    pub offset_commit_interval_ms: Option<u64>,
    /// Accepted; `false` is not honoured (Strait never skips a record it could not write).
    #[arg(long = "abort.on.send.failure", value_name = "BOOL")]
    pub abort_on_send_failure: Option<bool>,
    /// Not supported: Strait forwards record batches unchanged.
    #[arg(long = "message.handler", value_name = "CLASS")]
    pub message_handler: Option<String>,
    /// Not supported (see --message.handler).
    #[arg(long = "message.handler.args", value_name = "ARGS")]
    pub message_handler_args: Option<String>,
    /// Not supported: there is no Java consumer to attach a listener to.
    #[arg(long = "consumer.rebalance.listener", value_name = "CLASS")]
    pub consumer_rebalance_listener: Option<String>,
    /// Not supported (see --consumer.rebalance.listener).
    #[arg(long = "rebalance.listener.args", value_name = "ARGS")]
    pub rebalance_listener_args: Option<String>,
    /// Deprecated no-op in MirrorMaker 1; accepted and ignored.
    #[arg(long = "new.consumer")]
    pub new_consumer: bool,
}

/// MM1's include-list normalisation: trim, drop spaces and surrounding quotes, `,` -> `|`.
fn normalise_include(raw: &str) -> String {
    raw.trim()
        .replace(' ', "")
        .trim_start_matches(['"', '\''])
        .trim_end_matches(['"', '\''])
        .replace(',', "|")
}

/// Builds the configuration from MirrorMaker 1 options and files, then applies `env`.
pub fn load(opts: &Mm1Options, env: &Environment) -> Result<Loaded> {
    check_options(opts)?;
    let consumer = Properties::load(&opts.consumer_config)?;
    let producer = Properties::load(&opts.producer_config)?;
    from_properties(opts, &consumer, &producer, env)
}

/// Rejects the options whose behaviour Strait cannot provide.
fn check_options(opts: &Mm1Options) -> Result<()> {
    for (flag, value, why) in [
        (
            "--message.handler",
            &opts.message_handler,
            "Strait forwards record batches unchanged and has no per-record hook; \
             transform records in a separate consumer/producer",
        ),
        (
            "--message.handler.args",
            &opts.message_handler_args,
            "see --message.handler",
        ),
        (
            "--consumer.rebalance.listener",
            &opts.consumer_rebalance_listener,
            "Strait manages its own partition assignment; remove the option",
        ),
        (
            "--rebalance.listener.args",
            &opts.rebalance_listener_args,
            "see --consumer.rebalance.listener",
        ),
    ] {
        if let Some(v) = value {
            return Err(Error::Unsupported {
                what: format!("{flag} {v}"),
                hint: why.to_string(),
            });
        }
    }
    Ok(())
}

/// [`load`] with the consumer and producer properties already read (`strait import strimzi`
/// builds them from a `KafkaMirrorMaker` resource; `path` of each names where they came from).
pub(crate) fn from_properties(
    opts: &Mm1Options,
    consumer: &Properties,
    producer: &Properties,
    env: &Environment,
) -> Result<Loaded> {
    check_options(opts)?;
    let mut warnings = Vec::new();
    let include = command_line(opts, &mut warnings)?;
    let mut raw = command_line_settings(opts, include);
    for (props, role, what, why) in [
        (
            consumer,
            Role::Source,
            "consumer.config",
            "Strait reads raw record batches and commits its own positions",
        ),
        (
            producer,
            Role::Target,
            "producer.config",
            "Strait writes the source batches with its own idempotent producer",
        ),
    ] {
        client_file(&mut raw, props, role, (what, why), &mut warnings)?;
    }
    Ok(Loaded::single(Config::from_raw(raw, env)?, warnings))
}

/// The topics pattern of the command line (`--include`, or the deprecated `--whitelist`), with
/// warnings for the options Strait does not need.
fn command_line<'a>(opts: &'a Mm1Options, warnings: &mut Vec<String>) -> Result<&'a str> {
    let mut options_ignored = Vec::new();
    let include = match (&opts.include, &opts.whitelist) {
        (Some(i), Some(_)) => {
            options_ignored.push("--whitelist (--include wins)".to_string());
            i
        }
        (Some(i), None) => i,
        (None, Some(w)) => {
            warnings.push("--whitelist is deprecated; use --include".to_string());
            w
        }
        (None, None) => {
            return Err(Error::Missing {
                key: "--include".into(),
                hint: "give the topics to mirror as a regular expression, e.g. --include 'orders|payments.*'"
                    .into(),
            });
        }
    };
    if let Some(n) = opts.num_streams {
        options_ignored.push(format!("--num.streams {n}"));
    }
    if opts.new_consumer {
        options_ignored.push("--new.consumer".into());
    }
    if opts.abort_on_send_failure == Some(false) {
        warnings.push(
            "--abort.on.send.failure false is not honoured: a partition whose records cannot be \
             written stops and is reported (metrics, logs) instead of skipping records"
                .into(),
        );
    }
    if let Some(w) = ignored_warning(
        "command line",
        &options_ignored,
        "Strait sizes its own concurrency and commits positions after the target acknowledges",
    ) {
        warnings.push(w);
    }
    Ok(include)
}

/// The `[mirror]` settings the command line gives: topics, MirrorMaker 1 naming, commit interval.
fn command_line_settings(opts: &Mm1Options, include: &str) -> RawConfig {
    let mut raw = RawConfig::default();
    raw.set(
        Section::Mirror,
        "topics",
        Entry::text(
            format!("[{}]", toml::Value::String(normalise_include(include))),
            Origin::Compat("--include".into()),
        ),
    );
    raw.set(
        Section::Mirror,
        "rename",
        Entry::text("identity", Origin::Compat("MirrorMaker 1 naming".into())),
    );
    if let Some(ms) = opts.offset_commit_interval_ms {
        raw.set(
            Section::Mirror,
            "commit_interval",
            Entry::text(
                format!("{ms}ms"),
                Origin::Compat("--offset.commit.interval.ms".into()),
            ),
        );
    }
    raw
}

/// Maps one client properties file (`consumer.config` for the source, `producer.config` for the
/// target); `what` names the file's option, `why` says why unmapped keys do not matter.
fn client_file(
    raw: &mut RawConfig,
    props: &Properties,
    role: Role,
    (what, why): (&str, &str),
    warnings: &mut Vec<String>,
) -> Result<()> {
    let path = &props.path;
    let mut report = Report::default();
    // Each file declares the config providers its own client properties use, as a Java
    // client's config does.
    let providers = Providers::declared_in(props).map_err(|source| Error::Providers {
        path: path.clone(),
        source,
    })?;
    match role {
        Role::Source => raw.source.providers = providers,
        Role::Target => raw.target.providers = providers,
    }
    for p in props.entries.iter().filter(|p| !is_declaration_key(&p.key)) {
        let origin = Origin::Compat(format!("{what} {}", props.describe(p)));
        map_client_setting(raw, role, &p.key, &p.value, &p.key, origin, &mut report)?;
    }
    warnings.extend(report.notes);
    if let Some(w) = ignored_warning(&format!("{what} {}", path.display()), &report.ignored, why) {
        warnings.push(w);
    }
    if role == Role::Source && props.get("auto.offset.reset").is_none() {
        raw.set(
            Section::Mirror,
            "start",
            Entry::text(
                "latest",
                Origin::Compat("the Java consumer's default auto.offset.reset".into()),
            ),
        );
        warnings.push(format!(
            "{what} {} has no auto.offset.reset: partitions without a committed position \
             start at the end of the log (latest), as MirrorMaker 1 did; set \
             auto.offset.reset=earliest to copy the retained data",
            path.display()
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::config::{Compression, Isolation, Rename, StartPosition};
    use std::path::Path;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn opts(dir: &Path, consumer: &str, producer: &str) -> Mm1Options {
        Mm1Options {
            consumer_config: write(dir, "consumer.properties", consumer),
            producer_config: write(dir, "producer.properties", producer),
            include: Some("perf.*".into()),
            ..Default::default()
        }
    }

    /// The reference files from the MirrorMaker notes (kafka-reference/mm1-*.properties).
    const REF_CONSUMER: &str = "bootstrap.servers=127.0.0.1:9092\ngroup.id=mm1\n# MM1 does not set this; the consumer default is latest, which skips data produced before MM1 joined\nauto.offset.reset=earliest\n";
    const REF_PRODUCER: &str = "bootstrap.servers=127.0.0.1:9192\n";

    #[test]
    fn reference_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(dir.path(), REF_CONSUMER, REF_PRODUCER);
        o.num_streams = Some(2);
        let loaded = load(&o, &Environment::default()).unwrap();
        let c = &loaded.config;
        assert_eq!(
            c.source.property("bootstrap.servers"),
            Some("127.0.0.1:9092")
        );
        assert_eq!(
            c.target.property("bootstrap.servers"),
            Some("127.0.0.1:9192")
        );
        assert_eq!(c.source.properties.len(), 1);
        assert_eq!(c.mirror.group_id, "mm1");
        assert_eq!(c.mirror.start, StartPosition::Earliest);
        assert_eq!(c.mirror.rename, Rename::Identity);
        assert_eq!(c.mirror.topics.include(), ["perf.*"]);
        assert!(c.selects("perf-test"));
        assert!(!c.selects("other"));
        assert_eq!(c.target_topic("perf-test"), "perf-test");
        assert_eq!(loaded.warnings.len(), 1, "{:?}", loaded.warnings);
        assert!(loaded.warnings[0].contains("--num.streams 2"));
    }

    #[test]
    fn realistic_files_with_security_and_client_only_keys() {
        let consumer = "\
bootstrap.servers=europe-1:9093,europe-2:9093
group.id=mirror-eu-us
security.protocol=SSL
ssl.truststore.type=PEM
ssl.truststore.location=/pki/ca.pem
ssl.keystore.type=PEM
ssl.keystore.location=/pki/mm.pem
enable.auto.commit=false
key.deserializer=org.apache.kafka.common.serialization.ByteArrayDeserializer
max.poll.records=500
isolation.level=read_committed
";
        let producer = "\
bootstrap.servers=us-1:9093
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"mm\" password=\"s3cret\";
acks=all
compression.type=zstd
linger.ms=50
batch.size=1048576
";
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(dir.path(), consumer, producer);
        o.include = Some("'orders, payments.*'".into());
        let loaded = load(&o, &Environment::default()).unwrap();
        let c = &loaded.config;
        assert_eq!(c.mirror.topics.include(), ["orders|payments.*"]);
        assert!(c.selects("orders") && c.selects("payments-eu") && !c.selects("orders2"));
        assert_eq!(c.mirror.group_id, "mirror-eu-us");
        assert_eq!(c.mirror.start, StartPosition::Latest);
        assert_eq!(c.mirror.isolation, Isolation::ReadCommitted);
        assert_eq!(c.mirror.compression, Compression::Zstd);
        assert_eq!(
            c.source.property("ssl.keystore.location"),
            Some("/pki/mm.pem")
        );
        assert!(
            c.target
                .property("sasl.jaas.config")
                .unwrap()
                .contains("ScramLoginModule")
        );
        let w = loaded.warnings.join("\n");
        assert!(w.contains("ignoring 3 settings strait does not use: enable.auto.commit, key.deserializer, max.poll.records"), "{w}");
        assert!(
            w.contains("ignoring 1 setting strait does not use: linger.ms"),
            "{w}"
        );
        assert_eq!(c.mirror.batch_size.bytes(), 1 << 20);
        assert!(w.contains("has no auto.offset.reset"), "{w}");
        // The secret is in the config but never in the printed form.
        assert!(!c.to_toml(true).contains("s3cret"));
    }

    #[test]
    fn unsupported_options_and_missing_include() {
        let dir = tempfile::tempdir().unwrap();
        let mut o = opts(dir.path(), REF_CONSUMER, REF_PRODUCER);
        o.message_handler = Some("com.example.Handler".into());
        let err = load(&o, &Environment::default()).unwrap_err().to_string();
        assert!(
            err.starts_with("not supported: --message.handler com.example.Handler"),
            "{err}"
        );

        let mut o = opts(dir.path(), REF_CONSUMER, REF_PRODUCER);
        o.include = None;
        let err = load(&o, &Environment::default()).unwrap_err().to_string();
        assert!(err.starts_with("--include: missing"), "{err}");

        o.whitelist = Some("a,b".into());
        let loaded = load(&o, &Environment::default()).unwrap();
        assert_eq!(loaded.config.mirror.topics.include(), ["a|b"]);
        assert!(
            loaded
                .warnings
                .iter()
                .any(|w| w.contains("--whitelist is deprecated"))
        );
    }

    #[test]
    fn bad_values_name_the_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(
            dir.path(),
            "bootstrap.servers=a:1\nauto.offset.reset=smallest\n",
            REF_PRODUCER,
        );
        let err = load(&o, &Environment::default()).unwrap_err().to_string();
        assert_eq!(
            err,
            "mirror.start (from consumer.config consumer.properties:2 auto.offset.reset): \
             expected \"earliest\" or \"latest\", got \"smallest\""
        );
        let o = opts(
            dir.path(),
            REF_CONSUMER,
            "bootstrap.servers=b:1\ncompression.type=brotli\n",
        );
        let err = load(&o, &Environment::default()).unwrap_err().to_string();
        assert!(
            err.starts_with(
                "mirror.compression (from producer.config producer.properties:2 compression.type)"
            ),
            "{err}"
        );
        let mut o = opts(dir.path(), REF_CONSUMER, REF_PRODUCER);
        o.include = Some("(".into());
        let err = load(&o, &Environment::default()).unwrap_err().to_string();
        assert!(
            err.starts_with("mirror.topics (from --include): invalid regular expression"),
            "{err}"
        );
    }

    /// Each file declares the config providers its own properties use (issue 32 item 2).
    #[test]
    fn config_providers_are_declared_per_file() {
        let dir = tempfile::tempdir().unwrap();
        let env_provider = "config.providers=env\n\
            config.providers.env.class=org.apache.kafka.common.config.provider.EnvVarConfigProvider\n";
        let consumer = format!(
            "bootstrap.servers=a:9092\ngroup.id=g\nauto.offset.reset=earliest\n{env_provider}\
             security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=u\n\
             sasl.password=${{env:MM1_PW}}\n"
        );
        let producer = "bootstrap.servers=b:9092\nclient.id=${env:MM1_PW}\n";
        let o = opts(dir.path(), &consumer, producer);
        let env = Environment::from_pairs([("MM1_PW", "mm1-secret")]);
        // The producer file declares no provider, so its reference is an error.
        let e = load(&o, &env).unwrap_err().to_string();
        assert!(
            e.starts_with("target.client.id (from producer.config")
                && e.contains("${env:MM1_PW}: config provider \"env\" is not declared"),
            "{e}"
        );
        let o = opts(dir.path(), &consumer, "bootstrap.servers=b:9092\n");
        let loaded = load(&o, &env).unwrap();
        assert_eq!(
            loaded.config.source.property("sasl.password"),
            Some("mm1-secret")
        );
        assert!(
            loaded
                .warnings
                .iter()
                .all(|w| !w.contains("config.providers")),
            "{:?}",
            loaded.warnings
        );
    }

    #[test]
    fn missing_files_are_named() {
        let o = Mm1Options {
            consumer_config: "/nonexistent/c.properties".into(),
            producer_config: "/nonexistent/p.properties".into(),
            include: Some(".*".into()),
            ..Default::default()
        };
        let err = load(&o, &Environment::default()).unwrap_err().to_string();
        assert!(
            err.starts_with("cannot read /nonexistent/c.properties"),
            "{err}"
        );
    }
}
