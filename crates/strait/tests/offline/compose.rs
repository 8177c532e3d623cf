//! `docker-compose.yml` (the reference scenario for users with Docker) has the seed's shape:
//! mutual TLS with the two users and their ACLs, a producer that sends trace context, Jaeger,
//! and start-up ordered by healthchecks. Compose cannot run here, so the file is read as YAML
//! (merge keys applied, as compose does) and its parts are checked; Strait's configuration in it
//! goes through `strait check --offline`.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::path::{Path, PathBuf};

use common::StraitCommand;
use yaml_serde::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn compose() -> Value {
    let text = std::fs::read_to_string(root().join("docker-compose.yml")).unwrap();
    let mut v: Value = yaml_serde::from_str(&text).unwrap();
    v.apply_merge().unwrap();
    v
}

/// A service's command as one string (compose takes a list or a string).
fn command(service: &Value) -> String {
    match &service["command"] {
        Value::Sequence(parts) => parts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" "),
        Value::String(s) => s.clone(),
        _ => String::new(),
    }
}

fn condition<'a>(service: &'a Value, on: &str) -> &'a str {
    service["depends_on"][on]["condition"]
        .as_str()
        .unwrap_or_else(|| panic!("no depends_on.{on}.condition in {service:?}"))
}

#[test]
fn compose_runs_the_seed_scenario_with_mtls_acls_traces_and_healthchecks() {
    let c = compose();
    let services = &c["services"];
    for name in [
        "certs", "europe", "us", "acls", "jaeger", "strait", "producer", "consumer",
    ] {
        assert!(services[name].is_mapping(), "service {name} missing");
    }

    // mTLS: the brokers listen with TLS only and require client certificates; ACLs are on.
    let certs = command(&services["certs"]);
    for needed in [
        "listeners=SSL://:9093,CONTROLLER://localhost:9094",
        "ssl.client.auth=required",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found=false",
        "issue my-europe-user",
        "issue my-us-user",
        "client my-europe-user europe:9093 > my-europe-user.properties",
        "client my-us-user us:9093 > my-us-user.properties",
    ] {
        assert!(
            certs.contains(needed),
            "{needed:?} not in the certs service"
        );
    }
    for broker in ["europe", "us"] {
        let b = &services[broker];
        assert_eq!(b["environment"]["NAME"].as_str(), Some(broker));
        assert_eq!(condition(b, "certs"), "service_completed_successfully");
        let probe = format!("{:?}", b["healthcheck"]["test"]);
        assert!(probe.contains("--command-config"), "{broker}: {probe}");
    }

    // The seed's grants for both users, on their own cluster.
    let acls = &services["acls"];
    assert_eq!(condition(acls, "europe"), "service_healthy");
    assert_eq!(condition(acls, "us"), "service_healthy");
    let grants = command(acls);
    for needed in [
        "for pair in europe:my-europe-user us:my-us-user",
        "--allow-principal \"User:CN=$$user\"",
        "--operation Read --operation Write --operation Create --operation Describe --topic my-topic",
        "--operation Read --group my-group",
        "--topic my-topic --partitions 12",
    ] {
        assert!(
            grants.contains(needed),
            "{needed:?} not in the acls service"
        );
    }

    // Strait starts once the grants exist, and is healthy when ready (`strait status`).
    let strait = &services["strait"];
    assert_eq!(condition(strait, "acls"), "service_completed_successfully");
    let probe: Vec<&str> = strait["healthcheck"]["test"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        probe,
        ["CMD", "/strait", "status", "--url", "http://127.0.0.1:9464"]
    );
    assert_eq!(
        condition(&services["consumer"], "strait"),
        "service_healthy"
    );

    // The producer sends trace context (strait-demo: a span and a traceparent per record) to
    // Jaeger, whose image serves the UI.
    let producer = &services["producer"];
    assert_eq!(producer["build"]["target"].as_str(), Some("demo"));
    assert!(command(producer).starts_with("produce --props /certs/my-europe-user.properties"));
    assert_eq!(
        producer["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"].as_str(),
        Some("http://jaeger:4318")
    );
    let jaeger = &services["jaeger"];
    assert!(
        jaeger["image"]
            .as_str()
            .unwrap()
            .starts_with("jaegertracing/jaeger:")
    );
    assert!(format!("{:?}", jaeger["ports"]).contains("16686:16686"));
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains("FROM scratch AS demo"),
        "no demo target"
    );

    // Every dependency waits on a condition, not only on the container having started.
    for (name, s) in services.as_mapping().unwrap() {
        if let Some(deps) = s.get("depends_on") {
            assert!(deps.is_mapping(), "{name:?}: depends_on without conditions");
        }
    }
}

#[test]
fn compose_strait_configuration_is_mtls_with_traces_per_record() {
    let path = root().join("examples/docker/strait.toml");
    let mut cmd = StraitCommand::new(["check", "--offline", "--config"]);
    cmd.command().env_clear().arg(&path);
    let o = cmd.output();
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    for needed in [
        "\"bootstrap.servers\" = \"europe:9093\"",
        "\"ssl.keystore.location\" = \"/certs/my-europe-user.p12\"",
        "\"ssl.keystore.location\" = \"/certs/my-us-user.p12\"",
        "\"security.protocol\" = \"SSL\"",
        "mode = \"records\"",
        "group_id = \"my-group\"",
    ] {
        assert!(out.contains(needed), "{needed:?} not in:\n{out}");
    }
    // The stores it names are the ones the compose file's certs service writes.
    let certs = command(&compose()["services"]["certs"]);
    assert!(certs.contains("ssl.truststore.location=/certs/truststore.p12"));
}
