//! `strait import strimzi`: runs the built binary on Strimzi custom resources written after the
//! shapes Strimzi documents (tests/data/strimzi/), including the seed walkthrough's
//! `KafkaMirrorMaker`, and loads every generated file with Strait's own configuration loader.
//! No broker is needed.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use strait::config::{Config, Environment, Rename, StartPosition};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/strimzi")
        .join(name)
}

fn strait(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strait"))
        .args(args)
        // A clean environment: the import must not depend on the developer's STRAIT_* or OTEL_*.
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Imports `file`, asserts success, and loads the printed strait.toml with the real loader
/// (with `env`: the SASL passwords the Helm chart takes from Secrets).
fn import(file: &str, extra: &[&str], env: &[(&str, &str)]) -> (Config, String, String) {
    let path = data(file);
    let mut args = vec!["import", "strimzi", path.to_str().unwrap()];
    args.extend(extra);
    let o = strait(&args, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let toml = stdout(&o);
    let loaded = Config::from_toml_str(
        &toml,
        Path::new("imported.toml"),
        &Environment::from_pairs(env.iter().copied()),
    )
    .unwrap_or_else(|e| panic!("the imported file does not load: {e}\n{toml}"));
    (loaded.config, toml, stderr(&o))
}

/// The `KafkaMirrorMaker` of the seed walkthrough, line for line as the walkthrough has it.
fn seed_as_in_the_walkthrough() -> String {
    let walkthrough = std::fs::read_to_string(data("seed-walkthrough.txt")).unwrap();
    let lines: Vec<&str> = walkthrough.lines().collect();
    let kind = lines
        .iter()
        .position(|l| *l == "kind: KafkaMirrorMaker")
        .unwrap();
    let end = (kind..lines.len())
        .find(|&i| lines[i].starts_with("EOF"))
        .unwrap();
    lines[kind - 1..end].join("\n") + "\n"
}

#[test]
fn the_seed_resource_is_the_walkthroughs_resource_reindented() {
    // The walkthrough (a web page's text) lost the YAML's indentation; the test file restores
    // it and changes nothing else: stripped of indentation, its lines are the walkthrough's.
    let seed = seed_as_in_the_walkthrough();
    let ours = std::fs::read_to_string(data("seed-kafka-mirror-maker.yaml")).unwrap();
    let ours: Vec<&str> = ours.lines().map(str::trim_start).collect();
    assert_eq!(ours, seed.lines().collect::<Vec<_>>());
    assert!(seed.starts_with("apiVersion: kafka.strimzi.io/v1beta1\nkind: KafkaMirrorMaker\n"));
}

#[test]
fn seed_kafka_mirror_maker_v1beta1_mtls_and_jaeger() {
    let (c, toml, err) = import("seed-kafka-mirror-maker.yaml", &[], &[]);
    assert_eq!(c.source.alias, "europe-cluster");
    assert_eq!(c.target.alias, "us-cluster");
    // The Secrets are read where the Helm chart mounts them.
    for (cluster, side) in [(&c.source, "source"), (&c.target, "target")] {
        assert_eq!(cluster.property("security.protocol"), Some("SSL"));
        assert_eq!(
            cluster.property("ssl.ca.location"),
            Some(format!("/etc/strait/tls/{side}/ca/ca.crt").as_str())
        );
        assert_eq!(
            cluster.property("ssl.certificate.location"),
            Some(format!("/etc/strait/tls/{side}/user/user.crt").as_str())
        );
        assert_eq!(
            cluster.property("ssl.key.location"),
            Some(format!("/etc/strait/tls/{side}/user/user.key").as_str())
        );
    }
    for (secret, key) in [
        ("europe-cluster-cluster-ca-cert", "ca.crt"),
        ("my-europe-user", "user.crt"),
        ("us-cluster-cluster-ca-cert", "ca.crt"),
        ("my-us-user", "user.key"),
    ] {
        assert!(
            toml.contains(&format!("(Secret {secret}, key {key})")),
            "{toml}"
        );
    }
    assert_eq!(
        c.source.property("bootstrap.servers"),
        Some("europe-cluster-kafka-bootstrap:9093")
    );
    assert_eq!(
        c.target.property("bootstrap.servers"),
        Some("us-cluster-kafka-bootstrap:9093")
    );
    assert_eq!(c.mirror.group_id, "my-group");
    assert_eq!(c.mirror.topics.include(), [".*"]);
    assert_eq!(c.mirror.rename, Rename::Identity);
    assert_eq!(c.target_topic("my-topic"), "my-topic");
    assert!(c.selects("my-topic"));
    // MirrorMaker 1 kept the Java consumer's default: said on stderr and in the file.
    assert_eq!(c.mirror.start, StartPosition::Latest);
    assert!(err.contains("has no auto.offset.reset"), "{err}");
    // Jaeger: the agent's collector, over OTLP/HTTP, with the walkthrough's service name and
    // its const sampler.
    assert_eq!(
        c.tracing.otlp_endpoint.as_deref(),
        Some("http://my-jaeger-collector:4318")
    );
    assert_eq!(c.tracing.service_name, "my-mirror-maker");
    assert_eq!(c.tracing.sample_ratio, 1.0);
    assert!(err.contains("JAEGER_AGENT_HOST"), "{err}");
    // Probes and Prometheus reach the pod's listener.
    assert_eq!(c.metrics.listen, Some("0.0.0.0:9464".parse().unwrap()));
    assert!(
        toml.contains("spec.replicas = 1: run 1 strait process"),
        "{toml}"
    );
    // Nothing of the seed is left out.
    assert!(!err.contains("not converted"), "{err}");
    assert!(!toml.contains("# Not converted"), "{toml}");
}

#[test]
fn seed_output_and_helm_values_files_pass_strait_check_offline() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("strait.toml");
    let values = dir.path().join("values.yaml");
    let seed = data("seed-kafka-mirror-maker.yaml");
    let o = strait(
        &[
            "import",
            "strimzi",
            seed.to_str().unwrap(),
            "--output",
            out.to_str().unwrap(),
            "--helm-values",
            values.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "--output writes nothing to stdout");
    let o = strait(
        &["check", "--offline", "--config", out.to_str().unwrap()],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("my-jaeger-collector:4318"));

    // The Helm values, in deploy/helm/strait's shape: the configuration as YAML without what
    // the chart sets (metrics.listen, the certificate paths of the Secrets it mounts), and the
    // Secrets per side.
    let text = std::fs::read_to_string(&values).unwrap();
    let v: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
    assert_eq!(v["replicas"].as_u64(), Some(1));
    let config = &v["config"];
    assert_eq!(
        config["source"]["bootstrap.servers"].as_str(),
        Some("europe-cluster-kafka-bootstrap:9093")
    );
    assert_eq!(config["source"]["security.protocol"].as_str(), Some("SSL"));
    assert!(config["source"].get("ssl.ca.location").is_none(), "{text}");
    assert!(config["target"].get("ssl.key.location").is_none(), "{text}");
    assert!(config["metrics"].get("listen").is_none(), "{text}");
    assert_eq!(config["mirror"]["group_id"].as_str(), Some("my-group"));
    assert_eq!(
        config["tracing"]["otlp_endpoint"].as_str(),
        Some("http://my-jaeger-collector:4318")
    );
    let secrets = &v["secrets"];
    assert_eq!(
        secrets["source"]["clusterCaCert"]["name"].as_str(),
        Some("europe-cluster-cluster-ca-cert")
    );
    assert_eq!(
        secrets["source"]["clusterCaCert"]["key"].as_str(),
        Some("ca.crt")
    );
    assert_eq!(
        secrets["source"]["userCert"]["name"].as_str(),
        Some("my-europe-user")
    );
    assert_eq!(
        secrets["source"]["userCert"]["certKey"].as_str(),
        Some("user.crt")
    );
    assert_eq!(
        secrets["source"]["userCert"]["keyKey"].as_str(),
        Some("user.key")
    );
    assert_eq!(
        secrets["target"]["clusterCaCert"]["name"].as_str(),
        Some("us-cluster-cluster-ca-cert")
    );
    assert_eq!(
        secrets["target"]["userCert"]["name"].as_str(),
        Some("my-us-user")
    );
    assert!(secrets["target"].get("saslPassword").is_none());
}

#[test]
fn kafka_mirror_maker_v1beta2_scram_from_a_multi_document_file() {
    let (c, toml, err) = import(
        "mm1-v1beta2-scram.yaml",
        &[],
        &[("STRAIT_TARGET_SASL_PASSWORD", "from-the-secret")],
    );
    assert_eq!(c.source.alias, "europe");
    assert_eq!(c.target.alias, "us");
    assert_eq!(c.target.property("security.protocol"), Some("SASL_SSL"));
    assert_eq!(c.target.property("sasl.mechanism"), Some("SCRAM-SHA-512"));
    assert_eq!(c.target.property("sasl.username"), Some("orders-mirror-us"));
    // The password is the variable's, never written into the file.
    assert_eq!(c.target.property("sasl.password"), Some("from-the-secret"));
    assert!(!toml.contains("sasl.password"), "{toml}");
    assert!(
        toml.contains("STRAIT_TARGET_SASL_PASSWORD = key password of Secret orders-mirror-us"),
        "{toml}"
    );
    assert_eq!(c.source.property("security.protocol"), Some("SSL"));
    assert_eq!(
        c.source.property("ssl.certificate.location"),
        Some("/etc/strait/tls/source/user/user.crt")
    );
    assert_eq!(c.mirror.topics.include(), ["orders.*|payments"]);
    assert_eq!(c.mirror.start, StartPosition::Earliest);
    assert_eq!(c.mirror.group_id, "orders-mirror");
    assert_eq!(c.mirror.commit_interval, std::time::Duration::from_secs(2));
    assert_eq!(c.mirror.batch_size.bytes(), 1 << 20);
    assert_eq!(c.log.level, "warn");
    // opentelemetry: the gRPC port becomes OTLP/HTTP's, the sampler ratio is kept.
    assert_eq!(
        c.tracing.otlp_endpoint.as_deref(),
        Some("http://otel-collector.observability:4318")
    );
    assert_eq!(c.tracing.service_name, "orders-mirror");
    assert_eq!(c.tracing.sample_ratio, 0.25);
    for listed in [
        "not converted: spec.version",
        "not converted: spec.metricsConfig",
        "not converted: spec.template.pod",
        "not converted: spec.template.mirrorMakerContainer.env[TZ]",
        "not converted: spec.consumer.numStreams",
        "ignoring 1 setting strait does not use: max.poll.records",
        "ignoring 1 setting strait does not use: linger.ms",
        "--abort.on.send.failure false is not honoured",
        "is OTLP/gRPC (port 4317)",
    ] {
        assert!(err.contains(listed), "{listed} missing from:\n{err}");
    }
    // Each warning is also in the file's comment block.
    assert!(toml.contains("#   spec.template.pod: "), "{toml}");
    assert!(toml.contains("max.poll.records"), "{toml}");
}

#[test]
fn kafka_mirror_maker_v1beta1_whitelist_and_inline_metrics() {
    let (c, _, err) = import("mm1-v1beta1-plain.yaml", &[], &[]);
    assert_eq!(c.mirror.topics.include(), ["logs-.*|metrics-.*"]);
    assert!(c.selects("logs-app") && c.selects("metrics-x") && !c.selects("other"));
    assert_eq!(c.source.property("security.protocol"), None);
    assert_eq!(c.source.alias, "source");
    assert!(err.contains("not converted: spec.metrics:"), "{err}");
}

#[test]
fn kafka_mirror_maker_2_v1beta2_one_mirror_on_request_and_the_rest_listed() {
    let (c, toml, err) = import("mm2-v1beta2.yaml", &["--mirror", "east"], &[]);
    assert_eq!(c.source.alias, "east");
    assert_eq!(c.target.alias, "central");
    assert_eq!(c.target_topic("orders"), "east.orders");
    assert_eq!(c.mirror.topics.include(), ["orders.*", "payments.*"]);
    assert_eq!(c.mirror.topics.exclude(), [".*-internal"]);
    assert_eq!(c.mirror.replication_factor, 3);
    assert_eq!(
        c.mirror.refresh_interval,
        std::time::Duration::from_secs(60)
    );
    let groups = c.mirror.groups.as_ref().unwrap();
    assert_eq!(groups.include(), ["billing-.*"]);
    assert_eq!(groups.exclude(), ["billing-test"]);
    assert_eq!(
        c.mirror.checkpoint_interval,
        std::time::Duration::from_secs(30)
    );
    assert!(c.mirror.sync_group_offsets);
    // pattern "*.crt" reads the cluster CA Secret's ca.crt.
    assert_eq!(
        c.source.property("ssl.ca.location"),
        Some("/etc/strait/tls/source/ca/ca.crt")
    );
    assert_eq!(c.log.level, "info");
    for listed in [
        "not converted: spec.mirrors[1]: mirror west->central: --mirror east converts one mirror",
        "`--mirror west`",
        "not converted: spec.mirrors[0].sourceConnector.tasksMax",
        "not converted: spec.mirrors[0].heartbeatConnector",
        "not converted: spec.logging.loggers.log4j.logger.org.apache.kafka.connect.mirror",
        "east->central.heartbeats.topic.replication.factor",
        "central.config.storage.replication.factor",
    ] {
        assert!(err.contains(listed), "{listed} missing from:\n{err}");
    }
    assert!(toml.contains("# Not converted ("), "{toml}");

    // The second mirror, on request.
    let (c, _, err) = import("mm2-v1beta2.yaml", &["--mirror", "west"], &[]);
    assert_eq!(c.source.alias, "west");
    assert_eq!(c.target_topic("x"), "west.x");
    assert!(
        c.mirror.groups.is_none(),
        "no checkpointConnector, no groups"
    );
    assert!(
        err.contains("not converted: spec.mirrors[0]: mirror east->central"),
        "{err}"
    );
    assert_eq!(c.source.property("ssl.certificate.location"), None);

    let path = data("mm2-v1beta2.yaml");
    let o = strait(
        &[
            "import",
            "strimzi",
            path.to_str().unwrap(),
            "--mirror",
            "north",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with(
            "error: --mirror: expected the source alias of a mirror (east, west), got \"north\""
        ),
        "{}",
        stderr(&o)
    );
}

#[test]
fn kafka_mirror_maker_2_v1_target_and_mirror_sources() {
    let env = [
        ("STRAIT_SOURCE_SASL_PASSWORD", "p1"),
        ("STRAIT_TARGET_SASL_PASSWORD", "p2"),
    ];
    let (c, toml, err) = import("mm2-v1.yaml", &[], &env);
    assert_eq!(c.source.alias, "primary");
    assert_eq!(c.target.alias, "backup");
    assert_eq!(c.mirror.rename, Rename::Identity);
    assert_eq!(c.target_topic("orders"), "orders");
    assert_eq!(c.mirror.topics.exclude(), ["__.*"]);
    assert_eq!(c.mirror.replication_factor, -1);
    for (cluster, secret) in [
        (&c.source, "dr-mirror-primary"),
        (&c.target, "dr-mirror-backup"),
    ] {
        assert_eq!(cluster.property("security.protocol"), Some("SASL_SSL"));
        assert_eq!(cluster.property("sasl.username"), Some("dr-mirror"));
        assert!(
            toml.contains(&format!("key password of Secret {secret}")),
            "{toml}"
        );
    }
    // A checkpoint connector without groupsPattern checkpoints every group, as MM2 does.
    assert_eq!(c.mirror.groups.as_ref().unwrap().include(), [".*"]);
    assert!(c.mirror.sync_group_offsets);
    assert_eq!(
        c.mirror.sync_group_offsets_interval,
        std::time::Duration::from_secs(20)
    );
    assert_eq!(
        c.tracing.otlp_endpoint.as_deref(),
        Some("http://jaeger-collector.tracing:4318")
    );
    assert_eq!(c.tracing.service_name, "dr-mirror");
    for listed in [
        "not converted: spec.target.groupId",
        "not converted: spec.target.configStorageTopic",
        "primary.consumer.fetch.max.bytes",
        "every consumer group is checkpointed",
    ] {
        assert!(err.contains(listed), "{listed} missing from:\n{err}");
    }
    // Without the passwords the file alone is incomplete, and the loader says which key.
    let err = Config::from_toml_str(&toml, Path::new("x.toml"), &Environment::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("sasl.password"), "{err}");
}

/// Imports `file` and loads the printed strait.toml with every flow (`[[flows]]`).
fn import_flows(file: &str, env: &[(&str, &str)]) -> (Vec<Config>, String, String) {
    let path = data(file);
    let o = strait(&["import", "strimzi", path.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let toml = stdout(&o);
    let loaded = Config::from_toml_str(
        &toml,
        Path::new("imported.toml"),
        &Environment::from_pairs(env.iter().copied()),
    )
    .unwrap_or_else(|e| panic!("the imported file does not load: {e}\n{toml}"));
    (
        loaded.all_flows().into_iter().cloned().collect(),
        toml,
        stderr(&o),
    )
}

/// Issue 32 item 3: Strimzi's `oauth` authentication becomes Strait's OAUTHBEARER client
/// credentials (the client secret from its Secret, through the environment).
#[test]
fn oauth_client_credentials_are_converted() {
    let var = "STRAIT_SOURCE_SASL_OAUTHBEARER_CLIENT_CREDENTIALS_CLIENT_SECRET";
    let (c, toml, err) = import("mm2-oauth.yaml", &[], &[(var, "s")]);
    assert_eq!(c.source.alias, "cloud");
    let s = &c.source;
    assert_eq!(s.property("security.protocol"), Some("SASL_SSL"));
    assert_eq!(s.property("sasl.mechanism"), Some("OAUTHBEARER"));
    assert_eq!(
        s.property("sasl.oauthbearer.token.endpoint.url"),
        Some("https://sso.example.com/token")
    );
    assert_eq!(
        s.property("sasl.oauthbearer.client.credentials.client.id"),
        Some("mirror")
    );
    assert_eq!(
        s.property("sasl.oauthbearer.client.credentials.client.secret"),
        Some("s")
    );
    assert!(!err.contains("authentication"), "{err}");
    assert!(
        toml.contains(&format!("#   {var} = key secret of Secret cloud-oauth")),
        "{toml}"
    );
    assert!(!toml.contains("client.secret\" ="), "{toml}");
    // Helm: the chart sets the variable from the Secret (extraEnv), not as a SASL password.
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("values.yaml");
    let path = data("mm2-oauth.yaml");
    let o = strait(
        &[
            "import",
            "strimzi",
            path.to_str().unwrap(),
            "--helm-values",
            values.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let values = std::fs::read_to_string(&values).unwrap();
    assert!(!values.contains("saslPassword"), "{values}");
    assert!(values.contains(&format!("name: {var}")), "{values}");
    assert!(values.contains("secretKeyRef"), "{values}");
}

/// The v1 shape with OAuth on both sides: client credentials with the token endpoint's own CA,
/// scope and timeouts (target), a static access token Secret (source); what Strait's client
/// cannot do is listed.
#[test]
fn oauth_access_tokens_scopes_and_endpoint_trust_are_converted() {
    let var = "STRAIT_TARGET_SASL_OAUTHBEARER_CLIENT_CREDENTIALS_CLIENT_SECRET";
    let (c, toml, err) = import("mm2-v1-oauth.yaml", &[], &[(var, "s")]);
    let t = &c.target;
    assert_eq!(t.property("sasl.mechanism"), Some("OAUTHBEARER"));
    assert_eq!(t.property("sasl.oauthbearer.scope"), Some("kafka"));
    assert_eq!(t.property("sasl.login.connect.timeout.ms"), Some("20000"));
    assert_eq!(t.property("sasl.login.read.timeout.ms"), Some("30000"));
    assert_eq!(
        t.property("sasl.oauthbearer.client.credentials.client.id"),
        Some("cloud-sync")
    );
    // The access token is read from its mounted Secret at every refresh (Java's file: URL).
    assert_eq!(
        c.source.property("sasl.oauthbearer.token.endpoint.url"),
        Some("file:/etc/strait/tls/source/oauth/token")
    );
    assert_eq!(c.source.property("security.protocol"), Some("SASL_SSL"));
    for listed in [
        "SSL_CERT_FILE=/etc/strait/tls/target/oauth-ca/ca.crt",
        "not converted: spec.target.authentication.audience",
        "not converted: spec.target.authentication.disableTlsHostnameVerification",
    ] {
        assert!(err.contains(listed), "{listed} missing from:\n{err}");
    }
    assert!(
        toml.contains("/etc/strait/tls/source/oauth/token  (Secret onprem-token, key token)"),
        "{toml}"
    );
}

/// Issue 32 item 3: every mirror of a KafkaMirrorMaker2 becomes a [[flows]] entry, each cluster
/// a [clusters.<alias>] table whose secrets are `${env:...}` references.
#[test]
fn every_mirror_becomes_a_flow() {
    let env = [
        ("STRAIT_CLUSTER_CENTRAL_SASL_PASSWORD", "p1"),
        ("STRAIT_CLUSTER_EU_WEST_SASL_PASSWORD", "p2"),
    ];
    let (flows, toml, err) = import_flows("mm2-v1-fan-in.yaml", &env);
    let names: Vec<String> = flows.iter().map(strait::config::flows::flow_name).collect();
    assert_eq!(names, ["eu-west->central", "us-east->central"]);
    let (eu, us) = (&flows[0], &flows[1]);
    assert_eq!(eu.mirror.topics.include(), ["orders.*"]);
    assert_eq!(us.mirror.topics.include(), ["payments.*"]);
    assert_eq!(eu.mirror.groups.as_ref().unwrap().include(), ["billing.*"]);
    assert!(us.mirror.groups.is_none());
    assert_eq!(eu.mirror.group_id, "strait-eu-west-central");
    assert_eq!(eu.target_topic("orders"), "eu-west.orders");
    assert_eq!(eu.source.property("sasl.password"), Some("p2"));
    assert_eq!(eu.target.property("sasl.password"), Some("p1"));
    assert_eq!(
        us.source.property("ssl.certificate.location"),
        Some("/etc/strait/tls/us-east/user/user.crt")
    );
    assert!(toml.contains("[clusters.central]"), "{toml}");
    assert!(toml.contains("[[flows]]"), "{toml}");
    assert!(
        toml.contains("\"sasl.password\" = \"${env:STRAIT_CLUSTER_EU_WEST_SASL_PASSWORD}\""),
        "{toml}"
    );
    assert!(
        !toml.contains("p1") && !toml.contains("<from Secret"),
        "{toml}"
    );
    assert!(!err.contains("spec.mirrors[1]"), "{err}");

    // The v1beta2 shape (clusters + connectCluster): both mirrors, each with its settings.
    let (flows, _, err) = import_flows("mm2-v1beta2.yaml", &[]);
    let names: Vec<String> = flows.iter().map(strait::config::flows::flow_name).collect();
    assert_eq!(names, ["east->central", "west->central"]);
    assert_eq!(flows[0].mirror.replication_factor, 3);
    assert_eq!(flows[1].mirror.topics.include(), [".*"]);
    assert!(!err.contains("not converted: spec.mirrors[1]"), "{err}");
}

#[test]
fn unusable_inputs_exit_2_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let cases = [
        (
            file(
                "kafka.yaml",
                "apiVersion: kafka.strimzi.io/v1beta2\nkind: Kafka\nmetadata:\n  name: k\n",
            ),
            "no KafkaMirrorMaker or KafkaMirrorMaker2 resource found (kinds in the file: Kafka)",
        ),
        (file("bad.yaml", "spec: [\n"), "not valid YAML"),
        (
            // The walkthrough's text as it is, without indentation.
            file(
                "flat.yaml",
                "apiVersion: kafka.strimzi.io/v1beta1\nkind: KafkaMirrorMaker\nmetadata:\nname: my-mirror-maker\nspec:\nreplicas: 1\n",
            ),
            "lost its indentation",
        ),
        (
            // The whole walkthrough resource as it is: its repeated keys are not valid YAML.
            file("seed-flat.yaml", &seed_as_in_the_walkthrough()),
            "the resource looks unindented",
        ),
        (
            "/nonexistent/mm.yaml".to_string(),
            "cannot read /nonexistent/mm.yaml",
        ),
    ];
    for (path, expected) in cases {
        let o = strait(&["import", "strimzi", &path], &[]);
        assert_eq!(o.status.code(), Some(2), "{path}");
        assert!(stderr(&o).starts_with("error: "), "{}", stderr(&o));
        assert!(stderr(&o).contains(expected), "{expected}: {}", stderr(&o));
        assert!(stdout(&o).is_empty());
    }
}
