//! Secrets never leak (issue 15, item 6), and the keys and stores users already have work
//! against a real broker (item 5).
//!
//! One mTLS + SASL cluster. Distinctive secret values (`S3cr3t-...-<random>`) go into a
//! strait.toml and the environment: the SASL password, a wrong SASL password, a JAAS password, the
//! encrypted PKCS#8 key's password, the PKCS#12 store password and an inline private key. Every
//! command runs with `RUST_LOG=trace`; `strait run` also serves /metrics (scraped) and exports
//! spans to the test OTLP sink. Every stdout, stderr, metrics page and span attribute is
//! searched for every secret. The run mirrors through a PKCS#12 truststore (source, SASL_SSL)
//! and an encrypted PKCS#8 client key (target, mTLS); a second configuration connects with a
//! PKCS#12 keystore made by `openssl pkcs12 -export` and a truststore made by `keytool`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{StraitCommand, http_get, java, produce_numbered, runtime, terminate};
use strait_otlp_sink::Sink;
use strait_testkit::{AdminOp, Cluster, Listener};
use strait_wire::{Client, ClientConfig};

const TOPIC: &str = "secrets-in";

/// Every secret of the test, by what it is, for the failure message.
struct Secrets(Vec<(&'static str, String)>);

impl Secrets {
    /// Fails if any secret (or any 24-character piece of a long one, such as a key's base64
    /// body) appears in `text`.
    fn assert_absent(&self, what: &str, text: &str) {
        if std::env::var_os("SECRETS_DEBUG").is_some() {
            eprintln!("===== {what} ({} bytes)\n{text}", text.len());
        }
        for (name, value) in &self.0 {
            let pieces: Vec<&str> = if value.len() > 64 {
                value
                    .lines()
                    .filter(|l| l.len() >= 24 && !l.starts_with("-----"))
                    .map(|l| &l[..24])
                    .collect()
            } else {
                vec![value.as_str()]
            };
            for piece in pieces {
                assert!(
                    !text.contains(piece),
                    "{what} contains the {name} ({piece}):\n{text}"
                );
            }
        }
    }
}

fn text(o: &Output) -> String {
    format!(
        "exit: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A tool next to `java` (keytool), else on the PATH.
fn jdk_tool(name: &str) -> PathBuf {
    let java = java();
    match java.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(name),
        _ => PathBuf::from(name),
    }
}

fn run_tool(cmd: &mut Command) {
    let out = cmd.output().expect("start the tool");
    assert!(out.status.success(), "{cmd:?}: {}", text(&out));
}

fn strait(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = StraitCommand::new(args);
    cmd.command()
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "trace")
        .envs(env.iter().copied());
    cmd.output()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Issue 32 item 2: an mm2.properties that keeps its passwords out of the file with Kafka's
/// config providers (`${file:...}` for the source, `${env:...}` inside the target's JAAS config)
/// runs unchanged: `--check` prints the references, an undeclared provider is an error naming
/// the reference, and `strait mm2` mirrors the topic. No output holds a secret.
fn mm2_with_config_provider_references(
    cluster: &Cluster,
    secrets: &Secrets,
    sasl_pw: &str,
    jaas_pw: &str,
    d: &Path,
    rt: &tokio::runtime::Runtime,
) {
    let path = |p: &Path| p.display().to_string();
    let secret_file = d.join("mm2-secrets.properties");
    std::fs::write(
        &secret_file,
        format!("# the mirror's password\npassword = {sasl_pw}\n"),
    )
    .unwrap();
    let sasl = cluster.listener(Listener::SaslPlaintext);
    let mm2 = d.join("mm2-references.properties");
    let properties = format!(
        "clusters = psrc, pdst\npsrc.bootstrap.servers = {sasl}\npdst.bootstrap.servers = {sasl}\n\
         config.providers = file,env\n\
         config.providers.file.class = org.apache.kafka.common.config.provider.FileConfigProvider\n\
         config.providers.env.class = org.apache.kafka.common.config.provider.EnvVarConfigProvider\n\
         psrc.security.protocol = SASL_PLAINTEXT\npsrc.sasl.mechanism = SCRAM-SHA-512\n\
         psrc.sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required \
         username=\"mirror\" password=\"${{file:{}:password}}\";\n\
         pdst.security.protocol = SASL_PLAINTEXT\npdst.sasl.mechanism = SCRAM-SHA-512\n\
         pdst.sasl.username = jaasuser\npdst.sasl.password = ${{env:MM2_TARGET_PASSWORD}}\n\
         psrc->pdst.enabled = true\npsrc->pdst.topics = {TOPIC}\n\
         refresh.topics.interval.seconds = 1\n",
        secret_file.display()
    );
    std::fs::write(&mm2, &properties).unwrap();
    let env = [("MM2_TARGET_PASSWORD", jaas_pw)];

    let o = strait(&["mm2", &path(&mm2), "--check"], &env);
    secrets.assert_absent("strait mm2 --check (config providers)", &text(&o));
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("${env:MM2_TARGET_PASSWORD}"), "{out}");
    assert!(out.contains(":password}"), "{out}");

    // An undeclared provider, a missing variable: errors that name the reference.
    let undeclared = d.join("mm2-undeclared.properties");
    std::fs::write(
        &undeclared,
        properties.replace("config.providers = file,env", "config.providers = file"),
    )
    .unwrap();
    let o = strait(&["mm2", &path(&undeclared), "--check"], &env);
    secrets.assert_absent("strait mm2 --check (undeclared provider)", &text(&o));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("${env:MM2_TARGET_PASSWORD}: config provider \"env\" is not declared"),
        "{}",
        text(&o)
    );
    let o = strait(&["mm2", &path(&mm2), "--check"], &[]);
    secrets.assert_absent("strait mm2 --check (variable not set)", &text(&o));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("environment variable MM2_TARGET_PASSWORD is not set"),
        "{}",
        text(&o)
    );

    // The file runs unchanged: the topic is mirrored (prefix naming: psrc.<topic>).
    let log = d.join("mm2-references.log");
    let metrics_port = free_port();
    let mut cmd = StraitCommand::new(["mm2"]).arg(&mm2);
    cmd.command()
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "trace")
        .env("STRAIT_METRICS_LISTEN", format!("127.0.0.1:{metrics_port}"))
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut run = cmd.spawn();
    let target_topic = format!("psrc.{TOPIC}");
    let client = rt.block_on(async {
        let props = cluster.client_properties(Listener::SaslPlaintext, None);
        Client::connect(ClientConfig::from_properties(props).unwrap())
            .await
            .unwrap()
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let copied = rt.block_on(async {
            let wanted = [target_topic.clone()];
            let exists = client.metadata(Some(&wanted)).await.is_ok_and(|m| {
                m.topics
                    .get(target_topic.as_str())
                    .is_some_and(|t| t.error.is_none() && !t.partitions.is_empty())
            });
            match exists {
                true => common::end_offsets(&client, &target_topic, 1).await[0],
                false => 0,
            }
        });
        if copied >= 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{target_topic} has {copied} of 200 records after 120 s; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(
            run.try_wait().unwrap().is_none(),
            "strait mm2 exited; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let metrics = http_get(
        format!("127.0.0.1:{metrics_port}").parse().unwrap(),
        "/metrics",
    )
    .map(|(_, body)| body)
    .unwrap_or_default();
    terminate(&mut run);
    let (source, target) = rt.block_on(async {
        (
            common::read_all(&client, TOPIC, 1).await,
            common::read_all(&client, &target_topic, 1).await,
        )
    });
    common::assert_complete_in_order(&source[&0], &target[&0], "psrc->pdst");
    secrets.assert_absent("/metrics (strait mm2, config providers)", &metrics);
    secrets.assert_absent(
        "strait mm2 (config providers, RUST_LOG=trace)",
        &std::fs::read_to_string(&log).unwrap(),
    );
}

#[test]
fn secrets_never_leak_and_stores_work() {
    let r: u32 = rand::random();
    let sasl_pw = format!("S3cr3t-sasl-{r:08x}");
    let wrong_pw = format!("S3cr3t-wrong-{r:08x}");
    let jaas_pw = format!("S3cr3t-jaas-{r:08x}");
    let key_pw = format!("S3cr3t-key-{r:08x}");
    let store_pw = format!("S3cr3t-store-{r:08x}");
    let oauth_secret = format!("S3cr3t-oauth-{r:08x}");
    let bare_secret = format!("S3cr3t-bare-{r:08x}");

    let cluster = Cluster::builder("secrets")
        .mtls()
        .sasl()
        .user("mirror", &sasl_pw)
        .user("jaasuser", &jaas_pw)
        .broker_config(
            "super.users",
            "User:broker;User:admin;User:mirror;User:jaasuser",
        )
        .start()
        .expect("cluster");
    cluster.admin(&[AdminOp::topic(TOPIC, 1, 1)]).unwrap();
    let pki = cluster.pki().unwrap();
    let user = pki.user("mirror").unwrap();
    let inline_key = std::fs::read_to_string(&user.key_pem).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    let secrets = Secrets(vec![
        ("SASL password", sasl_pw.clone()),
        ("wrong SASL password", wrong_pw.clone()),
        ("JAAS password", jaas_pw.clone()),
        ("key password", key_pw.clone()),
        ("store password", store_pw.clone()),
        ("private key", inline_key.clone()),
        ("OAuth client secret", oauth_secret.clone()),
        ("secret on a line of its own", bare_secret.clone()),
    ]);

    // The stores and keys, made by the tools users make them with.
    let enc_key = d.join("mirror.key.enc.pem");
    run_tool(
        Command::new("openssl")
            .args([
                "pkcs8",
                "-topk8",
                "-v2",
                "aes-256-cbc",
                "-passout",
                "env:KEY_PW",
                "-in",
            ])
            .arg(&user.key_pem)
            .arg("-out")
            .arg(&enc_key)
            .env("KEY_PW", &key_pw),
    );
    assert!(
        std::fs::read_to_string(&enc_key)
            .unwrap()
            .contains("ENCRYPTED PRIVATE KEY")
    );
    let keystore = d.join("mirror.p12");
    run_tool(
        Command::new("openssl")
            .args([
                "pkcs12",
                "-export",
                "-name",
                "mirror",
                "-passout",
                "env:STORE_PW",
                "-in",
            ])
            .arg(&user.cert_pem)
            .arg("-inkey")
            .arg(&user.key_pem)
            .arg("-certfile")
            .arg(pki.ca_pem())
            .arg("-out")
            .arg(&keystore)
            .env("STORE_PW", &store_pw),
    );
    let truststore = d.join("trust.p12");
    run_tool(
        Command::new(jdk_tool("keytool"))
            .args([
                "-importcert",
                "-noprompt",
                "-alias",
                "ca",
                "-storetype",
                "PKCS12",
            ])
            .arg("-file")
            .arg(pki.ca_pem())
            .arg("-keystore")
            .arg(&truststore)
            .args(["-storepass:env", "STORE_PW"])
            .env("STORE_PW", &store_pw),
    );
    let jks = d.join("mirror.jks");
    run_tool(
        Command::new(jdk_tool("keytool"))
            .args(["-importkeystore", "-noprompt", "-srcstoretype", "PKCS12"])
            .arg("-srckeystore")
            .arg(&keystore)
            .args(["-srcstorepass:env", "STORE_PW", "-deststoretype", "JKS"])
            .arg("-destkeystore")
            .arg(&jks)
            .args(["-deststorepass:env", "STORE_PW"])
            .env("STORE_PW", &store_pw),
    );

    // Records to mirror, written as the admin.
    let rt = runtime();
    rt.block_on(async {
        let props = cluster.client_properties(Listener::SaslPlaintext, None);
        let client = Client::connect(ClientConfig::from_properties(props).unwrap())
            .await
            .unwrap();
        produce_numbered(&client, TOPIC, 0..1, 0..200).await;
    });

    let sasl_ssl = cluster.listener(Listener::SaslSsl);
    let ssl = cluster.listener(Listener::Ssl);
    let path = |p: &Path| p.display().to_string();
    let mirror_section = format!(
        "[mirror]\ntopics = [\"{TOPIC}\"]\ngroup_id = \"secrets\"\nstart = \"earliest\"\n\
         refresh_interval = \"1s\"\ncommit_interval = \"200ms\"\n"
    );
    // Source: SASL_SSL, SCRAM password in the file, CAs from a keytool PKCS#12 truststore.
    // Target: mTLS with the encrypted PKCS#8 key; its password comes from the environment.
    let source = |password: &str| {
        format!(
            "[source]\nalias = \"src\"\n\"bootstrap.servers\" = \"{sasl_ssl}\"\n\
             \"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\
             \"sasl.username\" = \"mirror\"\n\"sasl.password\" = \"{password}\"\n\
             \"ssl.truststore.type\" = \"PKCS12\"\n\"ssl.truststore.location\" = \"{}\"\n\
             \"ssl.truststore.password\" = \"{store_pw}\"\n",
            path(&truststore)
        )
    };
    let target_encrypted_key = format!(
        "[target]\nalias = \"dst\"\n\"bootstrap.servers\" = \"{ssl}\"\n\
         \"security.protocol\" = \"SSL\"\n\"ssl.ca.location\" = \"{}\"\n\
         \"ssl.certificate.location\" = \"{}\"\n\"ssl.key.location\" = \"{}\"\n",
        path(pki.ca_pem()),
        path(&user.cert_pem),
        path(&enc_key)
    );
    let key_env = [("STRAIT_TARGET_SSL_KEY_PASSWORD", key_pw.as_str())];
    let good = d.join("good.toml");
    let metrics_port = free_port();
    let sink = rt.block_on(Sink::start("127.0.0.1:0")).unwrap();
    std::fs::write(
        &good,
        format!(
            "{}\n{target_encrypted_key}\n{mirror_section}\n[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n\n\
             [tracing]\notlp_endpoint = \"{}\"\nmode = \"batch\"\n",
            source(&sasl_pw),
            sink.endpoint()
        ),
    )
    .unwrap();

    // Target with a PKCS#12 keystore (openssl) and an inline PEM CA; store password from the
    // environment; the source's SASL password from the environment too.
    let store_config = d.join("store.toml");
    std::fs::write(
        &store_config,
        format!(
            "{}\n[target]\nalias = \"dst\"\n\"bootstrap.servers\" = \"{ssl}\"\n\
             \"security.protocol\" = \"SSL\"\n\"ssl.truststore.type\" = \"PKCS12\"\n\
             \"ssl.truststore.location\" = \"{}\"\n\"ssl.keystore.type\" = \"PKCS12\"\n\
             \"ssl.keystore.location\" = \"{}\"\n\n{mirror_section}\n[metrics]\nlisten = \"\"\n",
            source("from-the-environment")
                .replace("\"sasl.password\" = \"from-the-environment\"\n", ""),
            path(&truststore),
            path(&keystore)
        ),
    )
    .unwrap();
    let store_env = [
        ("STRAIT_SOURCE_SASL_PASSWORD", sasl_pw.as_str()),
        ("STRAIT_TARGET_SSL_KEYSTORE_PASSWORD", store_pw.as_str()),
        ("STRAIT_TARGET_SSL_TRUSTSTORE_PASSWORD", store_pw.as_str()),
    ];

    // 1. strait check: both configurations connect (PKCS#12 stores, encrypted key, SCRAM).
    let o = strait(&["check", "--config", &path(&good)], &key_env);
    secrets.assert_absent("strait check (encrypted key)", &text(&o));
    assert!(o.status.success(), "{}", text(&o));
    let o = strait(&["check", "--config", &path(&store_config)], &store_env);
    secrets.assert_absent("strait check (PKCS#12 stores)", &text(&o));
    assert!(o.status.success(), "{}", text(&o));

    // 2. Error paths: a wrong SASL password, a wrong key password, a wrong store password, a
    //    JKS keystore, a malformed JAAS value, a secret under a misspelt key, a secret on a
    //    listener that does not use it.
    let wrong = d.join("wrong.toml");
    std::fs::write(
        &wrong,
        format!(
            "{}\n{target_encrypted_key}\n{mirror_section}\n[metrics]\nlisten = \"\"\n",
            source(&wrong_pw)
        ),
    )
    .unwrap();
    let o = strait(&["check", "--config", &path(&wrong)], &key_env);
    secrets.assert_absent("strait check (wrong SASL password)", &text(&o));
    assert!(!o.status.success(), "{}", text(&o));
    let o = strait(
        &["check", "--config", &path(&good)],
        &[("STRAIT_TARGET_SSL_KEY_PASSWORD", wrong_pw.as_str())],
    );
    secrets.assert_absent("strait check (wrong key password)", &text(&o));
    assert!(
        text(&o).contains("cannot decrypt the private key"),
        "{}",
        text(&o)
    );
    let o = strait(
        &["check", "--config", &path(&store_config)],
        &[
            ("STRAIT_SOURCE_SASL_PASSWORD", sasl_pw.as_str()),
            ("STRAIT_TARGET_SSL_KEYSTORE_PASSWORD", wrong_pw.as_str()),
            ("STRAIT_TARGET_SSL_TRUSTSTORE_PASSWORD", store_pw.as_str()),
        ],
    );
    secrets.assert_absent("strait check (wrong store password)", &text(&o));
    assert!(
        text(&o).contains("the store password is wrong; set ssl.keystore.password"),
        "{}",
        text(&o)
    );
    let jks_config = d.join("jks.toml");
    std::fs::write(
        &jks_config,
        std::fs::read_to_string(&store_config)
            .unwrap()
            .replace(&path(&keystore), &path(&jks)),
    )
    .unwrap();
    let o = strait(&["check", "--config", &path(&jks_config)], &store_env);
    secrets.assert_absent("strait check (JKS keystore)", &text(&o));
    assert!(
        text(&o).contains("keytool -importkeystore -srcstoretype JKS"),
        "{}",
        text(&o)
    );
    for (name, extra) in [
        (
            "jaas",
            format!(
                "\"sasl.jaas.config\" = 'org.apache.kafka.common.security.scram.ScramLoginModule required username=\"jaasuser\" password=\"{jaas_pw}'\n"
            ),
        ),
        (
            "typo",
            format!("\"sasl.username\" = \"jaasuser\"\n\"sasl.pasword\" = \"{jaas_pw}\"\n"),
        ),
        // TOML syntax errors quote the offending line.
        (
            "toml-unterminated",
            format!("\"sasl.username\" = \"jaasuser\"\n\"sasl.password\" = \"{jaas_pw}\n"),
        ),
        (
            "toml-bare",
            format!("\"sasl.username\" = \"jaasuser\"\n\"sasl.password\" = {jaas_pw}\n"),
        ),
        (
            "inline-key",
            format!("\"ssl.key.pem\" = '''{inline_key}'''\n"),
        ),
    ] {
        let bad = d.join(format!("{name}.toml"));
        std::fs::write(
            &bad,
            format!(
                "[source]\nalias = \"src\"\n\"bootstrap.servers\" = \"{sasl_ssl}\"\n\
                 \"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanism\" = \"SCRAM-SHA-512\"\n{extra}\n\
                 {target_encrypted_key}\n{mirror_section}"
            ),
        )
        .unwrap();
        let o = strait(&["check", "--config", &path(&bad)], &key_env);
        secrets.assert_absent(&format!("strait check ({name})"), &text(&o));
        assert!(!o.status.success(), "{name}: {}", text(&o));
    }
    // A key password from the environment where there is no key: the error names the variable.
    let o = strait(
        &["check", "--config", &path(&good)],
        &[
            ("STRAIT_TARGET_SSL_KEY_PASSWORD", key_pw.as_str()),
            ("STRAIT_SOURCE_SSL_KEY_PASSWORD", key_pw.as_str()),
        ],
    );
    secrets.assert_absent("strait check (key password without a key)", &text(&o));
    assert!(
        text(&o).contains("STRAIT_SOURCE_SSL_KEY_PASSWORD"),
        "{}",
        text(&o)
    );

    // 3. MirrorMaker inputs: mm2 (JAAS) and MirrorMaker 1 (JAAS in consumer/producer files).
    let jaas = format!(
        "org.apache.kafka.common.security.scram.ScramLoginModule required username=\\\"jaasuser\\\" password=\\\"{jaas_pw}\\\";"
    );
    let mm2 = d.join("mm2.properties");
    std::fs::write(
        &mm2,
        format!(
            "clusters = src, dst\nsrc.bootstrap.servers = {sasl}\ndst.bootstrap.servers = {sasl}\n\
             src.security.protocol = SASL_PLAINTEXT\nsrc.sasl.mechanism = SCRAM-SHA-512\n\
             src.sasl.jaas.config = {jaas}\ndst.security.protocol = SASL_PLAINTEXT\n\
             dst.sasl.mechanism = SCRAM-SHA-512\ndst.sasl.jaas.config = {jaas}\n\
             src->dst.enabled = true\nsrc->dst.topics = {TOPIC}\n",
            sasl = cluster.listener(Listener::SaslPlaintext)
        ),
    )
    .unwrap();
    let o = strait(&["mm2", &path(&mm2), "--check"], &[]);
    secrets.assert_absent("strait mm2 --check", &text(&o));
    assert!(o.status.success(), "{}", text(&o));
    // The same with errors on secret lines: a key password where there is no TLS, a misspelt
    // key (reported as ignored), a store password on a cluster without a store.
    let text_mm2 = std::fs::read_to_string(&mm2).unwrap();
    for (name, extra) in [
        ("misplaced", format!("dst.ssl.key.password = {key_pw}\n")),
        ("typo", format!("dst.sasl.pasword = {key_pw}\n")),
        (
            "space-separated",
            format!("dst.ssl.keystore.password {key_pw}\n"),
        ),
        // A secret alone on a line (its `key =` line lost) is a key to Java's reader.
        ("bare line", format!("{bare_secret}\n")),
        // An OAuth client secret with the wrong mechanism, and in an OAUTHBEARER JAAS whose
        // token endpoint cannot be reached.
        (
            "oauth secret, SCRAM",
            format!("dst.sasl.oauthbearer.client.credentials.client.secret = {oauth_secret}\n"),
        ),
        (
            "oauth endpoint down",
            format!(
                "dst.sasl.mechanism = OAUTHBEARER\ndst.sasl.oauthbearer.token.endpoint.url = \
                 http://127.0.0.1:1/token\ndst.sasl.jaas.config = \
                 org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \
                 clientId=\"mirror\" clientSecret=\"{oauth_secret}\";\n"
            ),
        ),
    ] {
        let broken = d.join(format!("mm2-{name}.properties"));
        std::fs::write(&broken, format!("{text_mm2}{extra}")).unwrap();
        let o = strait(&["mm2", &path(&broken), "--check"], &[]);
        secrets.assert_absent(&format!("strait mm2 --check ({name})"), &text(&o));
    }
    let consumer = d.join("consumer.properties");
    let producer = d.join("producer.properties");
    for (p, group) in [(&consumer, "group.id=mm1\n"), (&producer, "")] {
        std::fs::write(
            p,
            format!(
                "bootstrap.servers={}\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n\
                 sasl.jaas.config={jaas}\n{group}",
                cluster.listener(Listener::SaslPlaintext)
            ),
        )
        .unwrap();
    }
    let o = strait(
        &[
            "mirror-maker",
            "--consumer.config",
            &path(&consumer),
            "--producer.config",
            &path(&producer),
            "--include",
            TOPIC,
            "--check",
        ],
        &[],
    );
    secrets.assert_absent("strait mirror-maker --check", &text(&o));
    mm2_with_config_provider_references(&cluster, &secrets, &sasl_pw, &jaas_pw, d, &rt);

    // 4. strait run with trace logs, /metrics and OTLP spans; then failover and offsets translate.
    let log = d.join("run.log");
    let out = d.join("run.out");
    let mut cmd = StraitCommand::new(["run", "--config"]).arg(&good);
    cmd.command()
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "trace")
        .envs(key_env.iter().copied())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut run = cmd.spawn();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{metrics_port}").parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let metrics = loop {
        // Mirrored: the forwarded-records counter has moved.
        if let Some((200, body)) = http_get(addr, "/metrics")
            && body.lines().any(|l| {
                l.starts_with("strait_records_total{")
                    && l.split_whitespace().nth(1).is_some_and(|n| n != "0")
            })
        {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "nothing mirrored within 120 s; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(
            run.try_wait().unwrap().is_none(),
            "strait run exited; log:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    secrets.assert_absent("/metrics", &metrics);
    let spans = rt
        .block_on(sink.wait_for(|s| !s.is_empty(), Duration::from_secs(60)))
        .unwrap();
    terminate(&mut run);
    let spans_text = format!("{spans:?}");
    secrets.assert_absent("OTLP spans", &spans_text);
    let run_log = std::fs::read_to_string(&log).unwrap();
    secrets.assert_absent("strait run (stderr, RUST_LOG=trace)", &run_log);
    secrets.assert_absent(
        "strait run (stdout)",
        &std::fs::read_to_string(&out).unwrap(),
    );
    assert!(
        run_log.contains("TRACE") || run_log.contains("trace"),
        "RUST_LOG=trace did not produce trace lines"
    );
    for args in [
        vec!["failover", "--config", &path(&good)],
        vec!["offsets", "translate", "--config", &path(&good)],
        vec!["--help"],
    ] {
        let o = strait(&args, &key_env);
        secrets.assert_absent(&format!("strait {}", args.join(" ")), &text(&o));
    }

    // 5. strait run with the wrong SASL password: the error path of the running mirror.
    let log = d.join("wrong.log");
    let mut cmd = StraitCommand::new(["run", "--config"]).arg(&wrong);
    cmd.command()
        .env_clear()
        .env("RUST_LOG", "trace")
        .envs(key_env.iter().copied())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let mut run = cmd.spawn();
    let deadline = Instant::now() + Duration::from_secs(90);
    while run.try_wait().unwrap().is_none() {
        let l = std::fs::read_to_string(&log).unwrap_or_default();
        if l.contains("uthentication") && l.len() > 4096 {
            break;
        }
        assert!(Instant::now() < deadline, "no authentication error:\n{l}");
        std::thread::sleep(Duration::from_millis(300));
    }
    let _ = run.kill();
    let l = std::fs::read_to_string(&log).unwrap();
    assert!(l.contains("uthentication"), "{l}");
    secrets.assert_absent("strait run (wrong SASL password)", &l);
    rt.block_on(sink.stop());
}
