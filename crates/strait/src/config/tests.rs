use std::path::Path;
use std::time::Duration;

use super::*;

const FULL: &str = r#"
[source]
alias = "europe"
"bootstrap.servers" = "europe-kafka:9093"
security.protocol = "SSL"
"ssl.ca.location" = "/pki/ca.pem"
ssl.certificate.location = "/pki/my-europe-user.crt"
"ssl.key.location" = "/pki/my-europe-user.key"
"request.timeout.ms" = 30000

[target]
alias = "us"
"bootstrap.servers" = "us-kafka:9093"
"security.protocol" = "SASL_SSL"
"sasl.mechanism" = "SCRAM-SHA-512"
"sasl.username" = "my-us-user"
"sasl.password" = "hunter2"

[mirror]
topics = ["orders", "payments-.*"]
topics_exclude = ["payments-test"]
rename = "prefix"
separator = "_"
start = "latest"
group_id = "my-group"
memory_budget = "1GiB"
max_decompressed_batch_bytes = "128MiB"
refresh_interval = "500ms"
replication_factor = 3
create_topics = false
sync_topic_configs = false
sync_topic_configs_interval = "30s"
topic_configs_exclude = ["retention\\..*"]
isolation = "read_uncommitted"
compression = "zstd"
on_offset_out_of_range = "earliest"
max_in_flight = 2
produce_connections = 3
batch_size = "64KiB"

[metrics]
listen = "0.0.0.0:9464"

[tracing]
otlp_endpoint = "http://jaeger:4318"
mode = "records"
sample_ratio = 0.25
records_per_second = 50
service_name = "mirror-eu-us"

[log]
format = "json"
level = "strait=debug,info"
"#;

fn parse(text: &str) -> Result<Config> {
    parse_env(text, &[])
}

fn parse_env(text: &str, env: &[(&str, &str)]) -> Result<Config> {
    Config::from_toml_str(
        text,
        Path::new("strait.toml"),
        &Environment::from_pairs(env.iter().copied()),
    )
    .map(|l| l.config)
}

fn err(text: &str) -> String {
    parse(text).unwrap_err().to_string()
}

const MINIMAL: &str = r#"
[source]
"bootstrap.servers" = "a:9092"
[target]
"bootstrap.servers" = "b:9092"
"#;

#[test]
fn every_key_is_read() {
    let c = parse(FULL).unwrap();
    assert_eq!(c.source.alias, "europe");
    assert_eq!(
        c.source.properties,
        [
            ("bootstrap.servers", "europe-kafka:9093"),
            ("security.protocol", "SSL"),
            ("ssl.ca.location", "/pki/ca.pem"),
            ("ssl.certificate.location", "/pki/my-europe-user.crt"),
            ("ssl.key.location", "/pki/my-europe-user.key"),
            ("request.timeout.ms", "30000"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
    );
    assert_eq!(c.target.property("sasl.username"), Some("my-us-user"));
    let wire = c.target.client_config().unwrap();
    assert_eq!(wire.bootstrap_servers(), ["us-kafka:9093"]);
    assert_eq!(wire.sasl().unwrap().username, "my-us-user");
    let m = &c.mirror;
    assert_eq!(m.topics.include(), ["orders", "payments-.*"]);
    assert_eq!(m.topics.exclude(), ["payments-test"]);
    assert_eq!(
        m.rename,
        Rename::Prefix {
            separator: "_".into()
        }
    );
    assert_eq!(m.start, StartPosition::Latest);
    assert_eq!(m.group_id, "my-group");
    assert_eq!(m.memory_budget, ByteSize(1 << 30));
    assert_eq!(m.max_decompressed_batch_bytes, ByteSize(128 << 20));
    assert_eq!(m.refresh_interval, Duration::from_millis(500));
    assert_eq!(m.replication_factor, 3);
    assert!(!m.replication_factor_from_source);
    assert!(!m.create_topics);
    assert!(!m.sync_topic_configs);
    assert_eq!(m.sync_topic_configs_interval, Duration::from_secs(30));
    assert_eq!(m.topic_configs_exclude.patterns(), [r"retention\..*"]);
    assert!(m.topic_configs_exclude.excludes("retention.ms"));
    assert!(!m.topic_configs_exclude.excludes("min.insync.replicas"));
    assert_eq!(m.isolation, Isolation::ReadUncommitted);
    assert_eq!(m.compression, Compression::Zstd);
    assert_eq!(m.on_offset_out_of_range, OffsetOutOfRange::Earliest);
    assert_eq!(m.max_in_flight, 2);
    assert_eq!(m.produce_connections, 3);
    assert_eq!(m.batch_size, ByteSize(64 << 10));
    assert_eq!(c.metrics.listen, Some("0.0.0.0:9464".parse().unwrap()));
    assert_eq!(
        c.tracing.otlp_endpoint.as_deref(),
        Some("http://jaeger:4318")
    );
    assert_eq!(c.tracing.mode, TracingMode::Records);
    assert_eq!(c.tracing.sample_ratio, 0.25);
    assert_eq!(c.tracing.records_per_second, 50);
    assert_eq!(c.tracing.service_name, "mirror-eu-us");
    assert!(c.tracing.exporting());
    assert_eq!(c.log.format, LogFormat::Json);
    assert_eq!(c.log.level, "strait=debug,info");
    assert_eq!(c.target_topic("orders"), "europe_orders");
    assert!(c.selects("orders"));
    assert!(!c.selects("orders-eu"));
    assert!(!c.selects("payments-test"));
    assert!(c.selects("payments-eu"));
}

#[test]
fn defaults() {
    let c = parse(MINIMAL).unwrap();
    assert_eq!(c.source.alias, "source");
    assert_eq!(c.target.alias, "target");
    let m = &c.mirror;
    assert_eq!(m.topics.include(), [".*"]);
    assert_eq!(m.topics.exclude(), DEFAULT_EXCLUDE);
    assert_eq!(m.rename, Rename::Identity);
    assert_eq!(m.start, StartPosition::Earliest);
    assert_eq!(m.group_id, "strait");
    assert_eq!(m.memory_budget, ByteSize(256 << 20));
    assert_eq!(m.max_decompressed_batch_bytes, ByteSize(64 << 20));
    assert_eq!(m.refresh_interval, Duration::from_secs(10));
    assert_eq!(m.replication_factor, -1);
    assert!(m.replication_factor_from_source);
    assert!(m.create_topics && m.sync_topic_configs);
    assert_eq!(m.sync_topic_configs_interval, Duration::from_secs(600));
    assert_eq!(
        m.topic_configs_exclude.patterns(),
        crate::config::DEFAULT_CONFIGS_EXCLUDE
    );
    assert!(
        m.topic_configs_exclude
            .excludes("unclean.leader.election.enable")
    );
    assert!(!m.topic_configs_exclude.excludes("min.insync.replicas"));
    let explicit_default =
        parse(&format!("{MINIMAL}\n[mirror]\nreplication_factor = -1\n")).unwrap();
    assert!(!explicit_default.mirror.replication_factor_from_source);
    let source = parse(&format!(
        "{MINIMAL}\n[mirror]\nreplication_factor = \"source\"\n"
    ))
    .unwrap();
    assert!(source.mirror.replication_factor_from_source);
    assert_eq!(m.isolation, Isolation::ReadCommitted);
    assert_eq!(m.compression, Compression::Keep);
    assert_eq!(m.on_offset_out_of_range, OffsetOutOfRange::Fail);
    assert_eq!(m.max_in_flight, 5);
    assert_eq!(m.produce_connections, 1);
    assert_eq!(m.batch_size, ByteSize(256 << 10));
    assert_eq!(c.metrics.listen, Some("127.0.0.1:9464".parse().unwrap()));
    assert_eq!(c.tracing.otlp_endpoint, None);
    assert!(!c.tracing.exporting());
    assert_eq!(c.tracing.mode, TracingMode::Batch);
    assert_eq!(c.tracing.service_name, "strait");
    assert_eq!(c.log.format, LogFormat::Text);
    assert_eq!(c.log.level, "info");
    assert_eq!(c.target_topic("orders"), "orders");
    assert!(c.selects("my-topic"));
    assert!(!c.selects("__consumer_offsets"));
}

#[test]
fn bad_values_name_the_key_and_the_expected_form() {
    let cases = [
        (
            "[mirror]\nstart = \"begin\"",
            "mirror.start: expected \"earliest\" or \"latest\", got \"begin\"",
        ),
        (
            "[mirror]\nisolation = \"serializable\"",
            "mirror.isolation: expected \"read_committed\" or \"read_uncommitted\", got \"serializable\"",
        ),
        (
            "[mirror]\ncompression = \"brotli\"",
            "mirror.compression: expected one of \"keep\", \"none\", \"gzip\", \"snappy\", \"lz4\", \"zstd\", got \"brotli\"",
        ),
        (
            "[mirror]\nbatch_size = \"1GiB\"",
            "mirror.batch_size: expected a size from 0 (never merge) to 64MiB",
        ),
        (
            "[mirror]\nmax_in_flight = 6",
            "mirror.max_in_flight: expected an integer from 1 to 5",
        ),
        (
            "[mirror]\nmax_in_flight = \"x\"",
            "mirror.max_in_flight: expected an integer from 1 to 5",
        ),
        (
            "[mirror]\nproduce_connections = 9",
            "mirror.produce_connections: expected an integer from 1 to 8",
        ),
        (
            "[mirror]\nproduce_connections = 0",
            "mirror.produce_connections: expected an integer from 1 to 8",
        ),
        (
            "[mirror]\nreplication_factor = 0",
            "mirror.replication_factor: expected \"source\"",
        ),
        (
            "[mirror]\nmemory_budget = \"lots\"",
            "mirror.memory_budget: expected a size",
        ),
        (
            "[mirror]\nrefresh_interval = 10",
            "mirror.refresh_interval: expected a duration",
        ),
        (
            "[mirror]\nrefresh_interval = \"10 minutes\"",
            "mirror.refresh_interval: expected a duration",
        ),
        (
            "[mirror]\ncreate_topics = \"yes\"",
            "mirror.create_topics: expected true or false",
        ),
        (
            "[mirror]\ngroup_id = \"\"",
            "mirror.group_id: expected a non-empty string",
        ),
        (
            "[mirror]\ntopics = \"orders\"",
            "mirror.topics: expected a list of strings",
        ),
        (
            "[mirror]\ntopics = [\"(\"]",
            "mirror.topics: invalid regular expression \"(\"",
        ),
        (
            "[mirror]\ntopics_exclude = [\"a[\"]",
            "mirror.topics_exclude: invalid regular expression \"a[\"",
        ),
        (
            "[mirror]\nrename = \"suffix\"",
            "mirror.rename: expected \"identity\" or \"prefix\"",
        ),
        (
            "[mirror]\non_offset_out_of_range = \"skip\"",
            "mirror.on_offset_out_of_range: expected one of \"fail\", \"earliest\", \"latest\"",
        ),
        (
            "[metrics]\nlisten = \"localhost\"",
            "metrics.listen: expected an IP address and port",
        ),
        (
            "[tracing]\notlp_endpoint = \"jaeger:4318\"",
            "tracing.otlp_endpoint: expected an http:// or https:// URL",
        ),
        (
            "[tracing]\nsample_ratio = 1.5",
            "tracing.sample_ratio: expected a number from 0 to 1",
        ),
        (
            "[tracing]\nmode = \"all\"",
            "tracing.mode: expected one of \"batch\", \"records\", \"off\"",
        ),
        (
            "[tracing]\nrecords_per_second = -1",
            "tracing.records_per_second: expected a non-negative integer",
        ),
        (
            "[log]\nformat = \"xml\"",
            "log.format: expected \"text\" or \"json\", got \"xml\"",
        ),
        (
            "[log]\nlevel = \"strait=loud\"",
            "log.level: expected a log filter",
        ),
        (
            "[runtime]\nworker_threads = 0",
            "runtime.worker_threads: expected an integer from 1 to 256",
        ),
        (
            "[runtime]\nworker_threads = \"two\"",
            "runtime.worker_threads: expected an integer from 1 to 256",
        ),
        (
            "[source]\nalias = \"eu rope\"",
            "source.alias: expected a cluster alias",
        ),
    ];
    for (section, want) in cases {
        let text = format!("{MINIMAL}\n{section}\n");
        // [source] twice is a TOML error; patch the alias case in.
        let text = if section.starts_with("[source]") {
            MINIMAL.replace("[source]\n", "[source]\nalias = \"eu rope\"\n")
        } else {
            text
        };
        let got = err(&text);
        assert!(got.starts_with(want), "\n got: {got}\nwant: {want}");
    }
}

#[test]
fn unknown_keys_get_suggestions() {
    let got = err(&format!("{MINIMAL}\n[mirror]\ngroupid = \"x\"\n"));
    assert_eq!(
        got,
        "mirror.groupid: unknown key; did you mean \"group_id\"?"
    );
    let got = err(&format!("{MINIMAL}\n[metric]\nlisten = \"\"\n"));
    assert_eq!(got, "[metric]: unknown key; did you mean \"metrics\"?");
    let got = err(&format!("{MINIMAL}\n[log]\nwhatever = 1\n"));
    assert!(got.contains("valid keys: format, level"), "{got}");
    let got = err(&format!("group_id = \"x\"\n{MINIMAL}"));
    assert!(
        got.starts_with("group_id: unknown key; keys belong in a section"),
        "{got}"
    );
}

#[test]
fn missing_bootstrap_servers_is_named() {
    let got = err("[source]\nalias = \"a\"\n[target]\n\"bootstrap.servers\" = \"b:1\"\n");
    assert!(
        got.starts_with("source.bootstrap.servers: missing;"),
        "{got}"
    );
    assert!(got.contains("STRAIT_SOURCE_BOOTSTRAP_SERVERS"), "{got}");
}

#[test]
fn toml_syntax_errors_name_the_file() {
    let got = err("[source\n");
    assert!(got.starts_with("strait.toml: not valid TOML"), "{got}");
}

#[test]
fn toml_syntax_errors_do_not_quote_the_line() {
    // toml's own message quotes the offending line: here, a password.
    let got = err("[source]\n\"sasl.password\" = \"hunter2-secret\n");
    assert!(!got.contains("hunter2"), "{got}");
    assert!(
        got.starts_with("strait.toml: not valid TOML: line 2, column "),
        "{got}"
    );
    let got = err("[source]\n\"sasl.password\" = hunter2-secret\n");
    assert!(!got.contains("hunter2"), "{got}");
}

#[test]
fn environment_overrides_the_file() {
    let c = parse_env(
        FULL,
        &[
            ("STRAIT_MIRROR_GROUP_ID", "from-env"),
            ("STRAIT_MIRROR_TOPICS", "a,b.*"),
            ("STRAIT_MIRROR_CREATE_TOPICS", "true"),
            ("STRAIT_MIRROR_MAX_IN_FLIGHT", "1"),
            ("STRAIT_METRICS_LISTEN", ""),
            ("STRAIT_SOURCE_BOOTSTRAP_SERVERS", "env-kafka:9093"),
            ("STRAIT_TARGET_SASL_PASSWORD", "from-secret"),
            ("STRAIT_SOURCE_CLIENT_ID", "strait-eu"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
        ],
    )
    .unwrap();
    assert_eq!(c.mirror.group_id, "from-env");
    assert_eq!(c.mirror.topics.include(), ["a", "b.*"]);
    assert!(c.mirror.create_topics);
    assert_eq!(c.mirror.max_in_flight, 1);
    assert_eq!(c.metrics.listen, None);
    assert_eq!(
        c.source.property("bootstrap.servers"),
        Some("env-kafka:9093")
    );
    // Replaced in place, new ones appended.
    assert_eq!(c.source.properties[0].0, "bootstrap.servers");
    assert_eq!(c.source.properties.last().unwrap().0, "client.id");
    assert_eq!(c.target.property("sasl.password"), Some("from-secret"));
    assert_eq!(
        c.tracing.otlp_endpoint.as_deref(),
        Some("http://jaeger:4318")
    );

    let c = parse_env(
        MINIMAL,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318")],
    )
    .unwrap();
    assert_eq!(c.tracing.otlp_endpoint.as_deref(), Some("http://otel:4318"));
}

#[test]
fn environment_errors_name_the_variable() {
    let got = parse_env(MINIMAL, &[("STRAIT_MIRROR_START", "begin")])
        .unwrap_err()
        .to_string();
    assert_eq!(
        got,
        "mirror.start (from STRAIT_MIRROR_START): expected \"earliest\" or \"latest\", got \"begin\""
    );
    let got = parse_env(
        "",
        &[
            ("STRAIT_SOURCE_BOOTSTRAP_SERVERS", "a:1"),
            ("STRAIT_TARGET_BOOTSTRAP_SERVERS", "b:1"),
            ("STRAIT_MIRROR_TOPICS", "("),
        ],
    )
    .unwrap_err()
    .to_string();
    assert!(
        got.starts_with("mirror.topics (from STRAIT_MIRROR_TOPICS): invalid regular expression"),
        "{got}"
    );
}

#[test]
fn a_config_from_the_environment_alone() {
    let c = parse_env(
        "",
        &[
            ("STRAIT_SOURCE_BOOTSTRAP_SERVERS", "a:1"),
            ("STRAIT_TARGET_BOOTSTRAP_SERVERS", "b:1"),
            ("STRAIT_SOURCE_ALIAS", "europe"),
        ],
    )
    .unwrap();
    assert_eq!(c.source.alias, "europe");
}

#[test]
fn prefix_renaming_rejects_aliases_containing_the_separator() {
    let text = MINIMAL.replace("[source]\n", "[source]\nalias = \"eu.west\"\n")
        + "[mirror]\nrename = \"prefix\"\n";
    let got = err(&text);
    assert!(
        got.starts_with("mirror.rename: expected cluster aliases without the separator"),
        "{got}"
    );
}

#[test]
fn prefix_renaming_skips_topics_from_the_target() {
    let text = MINIMAL.replace("[target]\n", "[target]\nalias = \"us\"\n")
        + "[mirror]\nrename = \"prefix\"\n";
    let c = parse(&text).unwrap();
    assert!(!c.selects("us.orders"));
    assert!(c.selects("orders"));
}

#[test]
fn effective_config_round_trips_and_redacts_secrets() {
    let c = parse(FULL).unwrap();
    let printed = c.to_toml(true);
    assert!(
        printed.contains("\"sasl.password\" = \"<redacted>\""),
        "{printed}"
    );
    assert!(!printed.contains("hunter2"));
    // Everything but the secret survives a round trip.
    let again = parse(&printed.replace("<redacted>", "hunter2")).unwrap();
    assert_eq!(again.to_toml(false), c.to_toml(false));
    assert!(c.to_toml(false).contains("hunter2"));

    let defaults = parse(MINIMAL).unwrap().to_toml(true);
    assert!(
        defaults.contains("memory_budget = \"256MiB\""),
        "{defaults}"
    );
    assert!(
        defaults.contains("refresh_interval = \"10s\""),
        "{defaults}"
    );
    let again = parse(&defaults).unwrap();
    assert_eq!(again.to_toml(true), defaults);
}

#[test]
fn secret_property_names() {
    for k in [
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "sasl.jaas.config",
        "ssl.keystore.key",
        "ssl.key.pem",
        "sasl.oauthbearer.client.secret",
    ] {
        assert!(is_secret_property(k), "{k}");
    }
    for k in [
        "sasl.username",
        "ssl.key.location",
        "bootstrap.servers",
        "ssl.ca.location",
    ] {
        assert!(!is_secret_property(k), "{k}");
    }
}

#[test]
fn client_properties_are_validated_by_the_wire_crate() {
    let got = err(&MINIMAL.replace("[target]\n", "[target]\n\"securty.protocol\" = \"SSL\"\n"));
    assert!(
        got.starts_with("target.securty.protocol: unknown property"),
        "{got}"
    );
    let got = err(&MINIMAL.replace("[source]\n", "[source]\n\"security.protocol\" = \"TLS\"\n"));
    assert!(
        got.starts_with("source.security.protocol: `TLS` is not one of"),
        "{got}"
    );
    let got = parse_env(MINIMAL, &[("STRAIT_SOURCE_SSL_CA_LOCATION", "/ca.pem")])
        .unwrap_err()
        .to_string();
    assert!(
        got.starts_with("source.ssl.ca.location (from STRAIT_SOURCE_SSL_CA_LOCATION): is set but security.protocol is PLAINTEXT"),
        "{got}"
    );
}

#[test]
fn shipped_examples_are_valid() {
    for (name, text) in [
        (
            "examples/strait.toml",
            include_str!("../../../../examples/strait.toml"),
        ),
        (
            "examples/docker/strait.toml",
            include_str!("../../../../examples/docker/strait.toml"),
        ),
    ] {
        let c = Config::from_toml_str(text, Path::new(name), &Environment::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .config;
        assert_eq!(c.source.alias, "europe", "{name}");
        assert_eq!(c.target.alias, "us", "{name}");
        assert_eq!(c.mirror.group_id, "my-group", "{name}");
        assert_eq!(c.target_topic("my-topic"), "my-topic", "{name}");
        assert!(c.selects("my-topic"), "{name}");
    }
    let docker = Config::from_toml_str(
        include_str!("../../../../examples/docker/strait.toml"),
        Path::new("docker"),
        &Environment::default(),
    )
    .unwrap()
    .config;
    assert_eq!(docker.metrics.listen, Some("0.0.0.0:9464".parse().unwrap()));
    assert_eq!(
        docker.tracing.otlp_endpoint.as_deref(),
        Some("http://jaeger:4318")
    );
    assert!(docker.tracing.exporting());
}

#[test]
fn partition_assignment_strategy_defaults_to_roundrobin_then_range() {
    let c = parse(MINIMAL).unwrap();
    assert_eq!(
        c.mirror.partition_assignment_strategy,
        [Assignor::RoundRobin, Assignor::Range]
    );
    for (value, want) in [
        ("[\"range\"]", vec![Assignor::Range]),
        (
            "\"range, roundrobin\"",
            vec![Assignor::Range, Assignor::RoundRobin],
        ),
        ("\"RoundRobin\"", vec![Assignor::RoundRobin]),
        (
            "[\"org.apache.kafka.clients.consumer.RangeAssignor\", \"roundrobin\", \"range\"]",
            vec![Assignor::Range, Assignor::RoundRobin],
        ),
    ] {
        let c = parse(&format!(
            "{MINIMAL}[mirror]\npartition_assignment_strategy = {value}\n"
        ))
        .unwrap();
        assert_eq!(c.mirror.partition_assignment_strategy, want, "{value}");
        // The effective configuration prints it back in the same order.
        let again = parse(&c.to_toml(false)).unwrap();
        assert_eq!(again.mirror.partition_assignment_strategy, want);
    }
    let c = parse_env(
        MINIMAL,
        &[(
            "STRAIT_MIRROR_PARTITION_ASSIGNMENT_STRATEGY",
            "range,roundrobin",
        )],
    )
    .unwrap();
    assert_eq!(
        c.mirror.partition_assignment_strategy,
        [Assignor::Range, Assignor::RoundRobin]
    );
    let c = parse(&format!(
        "{MINIMAL}[mirror]\npartition_assignment_strategy = \"cooperative-sticky\"\n"
    ))
    .unwrap();
    assert_eq!(
        c.mirror.partition_assignment_strategy,
        [Assignor::CooperativeSticky]
    );
    for bad in ["\"sticky\"", "[]", "\"\"", "3"] {
        let e = err(&format!(
            "{MINIMAL}[mirror]\npartition_assignment_strategy = {bad}\n"
        ));
        assert!(
            e.starts_with("mirror.partition_assignment_strategy: expected a list of assignors"),
            "{bad}: {e}"
        );
    }
}

#[test]
fn exactly_once_settings_are_read_and_checked() {
    assert!(parse(MINIMAL).unwrap().mirror.exactly_once.is_none());
    let c = parse(&format!(
        "{MINIMAL}[mirror]\nexactly_once = true\ntransaction_interval = \"1s\"\ntransaction_timeout = \"30s\"\ntransaction_max_bytes = \"4MiB\"\n"
    ))
    .unwrap();
    let eos = c.mirror.exactly_once.unwrap();
    assert_eq!(eos.transaction_interval, Duration::from_secs(1));
    assert_eq!(eos.transaction_timeout, Duration::from_secs(30));
    assert_eq!(eos.transaction_max_bytes.0, 4 << 20);
    let dflt = parse(&format!("{MINIMAL}[mirror]\nexactly_once = true\n"))
        .unwrap()
        .mirror
        .exactly_once
        .unwrap();
    assert_eq!(dflt.transaction_max_bytes.0, 16 << 20);
    assert_eq!(dflt.position_refresh_interval, Duration::from_secs(3600));
    let refresh = parse(&format!(
        "{MINIMAL}[mirror]\nexactly_once = true\nposition_refresh_interval = \"10s\"\n"
    ))
    .unwrap();
    assert_eq!(
        refresh
            .mirror
            .exactly_once
            .unwrap()
            .position_refresh_interval,
        Duration::from_secs(10)
    );
    let e = err(&format!(
        "{MINIMAL}[mirror]\nexactly_once = true\ntransaction_max_bytes = \"1KiB\"\n"
    ));
    assert!(
        e.contains("mirror.transaction_max_bytes") && e.contains("64KiB"),
        "{e}"
    );
    let e = err(&format!(
        "{MINIMAL}[mirror]\nexactly_once = true\nisolation = \"read_uncommitted\"\n"
    ));
    assert!(
        e.contains("mirror.isolation") && e.contains("read_committed"),
        "{e}"
    );
    let e = err(&format!(
        "{MINIMAL}[mirror]\nexactly_once = true\ntransaction_interval = \"40s\"\n"
    ));
    assert!(
        e.contains("mirror.transaction_interval") && e.contains("half"),
        "{e}"
    );
}

/// Issue 28 item 8: `Debug` of a configuration (and of what it is built from) shows no secret
/// value, whatever a future log line prints.
#[test]
fn debug_output_holds_no_secret() {
    const SECRETS: [&str; 4] = ["hunter2", "jaas-secret-1", "oauth-secret-2", "env-secret-4"];
    // The source's key password from the environment, the target's SASL password from the file.
    let env = [("STRAIT_SOURCE_SSL_KEY_PASSWORD", "env-secret-4")];
    let loaded = Config::from_toml_str(
        FULL,
        Path::new("strait.toml"),
        &Environment::from_pairs(env.iter().copied()),
    )
    .unwrap();
    let mut oauth = loaded.config.target.clone();
    oauth.properties.push((
        "sasl.jaas.config".into(),
        "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"u\" \
         password=\"jaas-secret-1\";"
            .into(),
    ));
    oauth.properties.push((
        "sasl.oauthbearer.client.credentials.client.secret".into(),
        "oauth-secret-2".into(),
    ));
    let mut raw = RawCluster::default();
    for (k, v) in &oauth.properties {
        raw.set_property(k, v.clone(), Origin::File);
    }
    let printed = [
        format!("{:?}", loaded),
        format!("{:#?}", loaded.config),
        format!("{oauth:?}"),
        format!("{raw:?}"),
        format!("{:?}", Environment::from_pairs(env.iter().copied())),
    ];
    for p in &printed {
        for s in SECRETS {
            assert!(!p.contains(s), "{s} in {p}");
        }
    }
    // Still useful: the keys, and the values that are not secret.
    assert!(printed[1].contains("sasl.password") && printed[1].contains(REDACTED));
    assert!(printed[1].contains("my-us-user") && printed[1].contains("europe-kafka:9093"));
    assert!(printed[4].contains("STRAIT_SOURCE_SSL_KEY_PASSWORD"));
}

#[test]
fn group_protocol_keys_default_and_print_back() {
    let c = parse(MINIMAL).unwrap();
    assert_eq!(c.mirror.group_protocol, GroupProtocol::Auto);
    assert_eq!(c.mirror.group_remote_assignor, None);
    assert!(!c.mirror.leave_group_on_shutdown);
    let c = parse(&format!(
        "{MINIMAL}[mirror]\ngroup_protocol = \"classic\"\ngroup_remote_assignor = \"range\"\nleave_group_on_shutdown = true\n"
    ))
    .unwrap();
    assert_eq!(c.mirror.group_protocol, GroupProtocol::Classic);
    assert_eq!(c.mirror.group_remote_assignor.as_deref(), Some("range"));
    assert!(c.mirror.leave_group_on_shutdown);
    let again = parse(&c.to_toml(false)).unwrap();
    assert_eq!(again.mirror.group_protocol, GroupProtocol::Classic);
    assert_eq!(again.mirror.group_remote_assignor.as_deref(), Some("range"));
    assert!(again.mirror.leave_group_on_shutdown);
    let e = parse(&format!("{MINIMAL}[mirror]\ngroup_protocol = \"eager\"\n"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("mirror.group_protocol: expected"), "{e}");
}

#[test]
fn runtime_worker_threads_from_the_file_or_the_environment() {
    assert_eq!(parse(MINIMAL).unwrap().runtime.worker_threads, None);
    let two = parse(&format!("{MINIMAL}\n[runtime]\nworker_threads = 2\n")).unwrap();
    assert_eq!(two.runtime.worker_threads.map(|n| n.get()), Some(2));
    let one = parse_env(MINIMAL, &[("STRAIT_RUNTIME_WORKER_THREADS", "1")]).unwrap();
    assert_eq!(one.runtime.worker_threads.map(|n| n.get()), Some(1));
    // The effective configuration writes it back, and reads back the same.
    let again = parse(&two.to_toml(false)).unwrap();
    assert_eq!(again.runtime, two.runtime);
    assert!(one.to_toml(false).contains("[runtime]\nworker_threads = 1"));
    assert!(!parse(MINIMAL).unwrap().to_toml(false).contains("[runtime]"));
}
