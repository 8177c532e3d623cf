//! `strait-kafka`: starts a real Kafka cluster from the command line (for humans and the demo), prints how to
//! connect, and keeps it up until Ctrl-C or SIGTERM, then tears it down. `scripts/kafka.sh` wraps it.
//!
//! ```text
//! strait-kafka up --name europe --mtls --user my-europe-user:europe-secret \
//!     --topic my-topic:3:1 --allow my-europe-user:topic:my-topic:Read,Write,Describe
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use strait_testkit::{AdminOp, Cluster, KafkaVersion, Resource};

#[derive(Parser, Debug)]
#[command(
    name = "strait-kafka",
    about = "Start a real Apache Kafka cluster (KRaft, from the Maven jars) until Ctrl-C"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a cluster, print its bootstrap, client properties and PKI paths, and wait for Ctrl-C / SIGTERM.
    Up(Up),
}

#[derive(Parser, Debug)]
struct Up {
    /// Cluster name (shows in dirs and logs).
    #[arg(long, default_value = "kafka")]
    name: String,
    /// Kafka line: 4 or 3.9.
    #[arg(long, default_value = "4")]
    version: String,
    /// Number of nodes (1 or 3).
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// mTLS listener with ACLs (StandardAuthorizer) instead of PLAINTEXT.
    #[arg(long)]
    mtls: bool,
    /// SASL listeners (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
    #[arg(long)]
    sasl: bool,
    /// A user as NAME:PASSWORD (client certificate CN=NAME with --mtls, SASL credentials with --sasl).
    #[arg(long = "user", value_name = "NAME:PASSWORD")]
    users: Vec<String>,
    /// A topic as `NAME[:PARTITIONS[:REPLICATION]]` (defaults 1 and the node count, at most 3).
    #[arg(long = "topic", value_name = "NAME[:P[:RF]]")]
    topics: Vec<String>,
    /// An ALLOW ACL as USER:RESOURCE:NAME:OPS, RESOURCE one of topic, topic-prefix, group, group-prefix,
    /// cluster, transactional-id; OPS comma-separated (Read,Write,Create,Describe,...).
    #[arg(long = "allow", value_name = "USER:RESOURCE:NAME:OPS")]
    allows: Vec<String>,
    /// A broker config KEY=VALUE for every node.
    #[arg(long = "broker-config", value_name = "KEY=VALUE")]
    broker_configs: Vec<String>,
    /// Also write the client properties files into this directory (they are always in the cluster dir, under clients/).
    #[arg(long)]
    props_dir: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Up(up) => run_up(up),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("strait-kafka: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run_up(up: Up) -> Result<(), String> {
    let version = match up.version.as_str() {
        "4" | "4.x" => KafkaVersion::V4,
        "3.9" => KafkaVersion::V3_9,
        other => return Err(format!("--version {other}: use 4 or 3.9")),
    };
    let mut builder = Cluster::builder(&up.name).version(version).nodes(up.nodes);
    if up.mtls {
        builder = builder.mtls();
    }
    if up.sasl {
        builder = builder.sasl();
    }
    for user in &up.users {
        let (name, password) = user
            .split_once(':')
            .ok_or_else(|| format!("--user {user}: expected NAME:PASSWORD"))?;
        builder = builder.user(name, password);
    }
    for kv in &up.broker_configs {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("--broker-config {kv}: expected KEY=VALUE"))?;
        builder = builder.broker_config(k, v);
    }
    let mut ops = Vec::new();
    for topic in &up.topics {
        let mut parts = topic.split(':');
        let name = parts.next().unwrap_or_default();
        let partitions = parse_or(parts.next(), 1, "partitions")?;
        let replication = parse_or(parts.next(), up.nodes.min(3) as i16, "replication")?;
        ops.push(AdminOp::topic(name, partitions, replication));
    }
    for allow in &up.allows {
        let parts: Vec<&str> = allow.splitn(4, ':').collect();
        let [user, kind, name, op_list] = parts[..] else {
            return Err(format!("--allow {allow}: expected USER:RESOURCE:NAME:OPS"));
        };
        let resource = match kind {
            "topic" => Resource::Topic(name.into()),
            "topic-prefix" => Resource::TopicPrefix(name.into()),
            "group" => Resource::Group(name.into()),
            "group-prefix" => Resource::GroupPrefix(name.into()),
            "cluster" => Resource::Cluster,
            "transactional-id" => Resource::TransactionalId(name.into()),
            other => return Err(format!("--allow {allow}: unknown resource type {other}")),
        };
        let op_names: Vec<&str> = op_list.split(',').collect();
        ops.push(AdminOp::allow(&format!("User:{user}"), resource, &op_names));
    }

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the signal runtime: {e}"))?;
    // Listen before starting: a SIGTERM during the start must still tear the cluster down.
    let (mut sigterm, mut sigint) = runtime
        .block_on(async {
            use tokio::signal::unix::{SignalKind, signal};
            Ok::<_, std::io::Error>((
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
            ))
        })
        .map_err(|e| format!("cannot listen for signals: {e}"))?;

    let cluster = builder.start().map_err(|e| e.to_string())?;
    cluster.admin(&ops).map_err(|e| e.to_string())?;
    print_cluster(&cluster, up.props_dir.as_deref())?;
    println!("READY (Ctrl-C or SIGTERM stops the cluster)");

    runtime.block_on(async {
        tokio::select! {
            _ = sigterm.recv() => {}
            _ = sigint.recv() => {}
        }
    });
    println!("stopping cluster {}", cluster.name());
    drop(cluster);
    println!("stopped");
    Ok(())
}

fn parse_or<T: std::str::FromStr>(s: Option<&str>, default: T, what: &str) -> Result<T, String> {
    match s {
        None | Some("") => Ok(default),
        Some(s) => s
            .parse()
            .map_err(|_| format!("{what} {s:?} is not a number")),
    }
}

fn print_cluster(cluster: &Cluster, props_dir: Option<&std::path::Path>) -> Result<(), String> {
    println!(
        "cluster {} ({}, {} node(s)) dir {}",
        cluster.name(),
        cluster.version(),
        cluster.node_ids().len(),
        cluster.dir().display()
    );
    println!("bootstrap {}", cluster.bootstrap());
    for l in cluster.listeners() {
        println!(
            "listener {} {}",
            l.security_protocol(),
            cluster.listener(*l)
        );
    }
    if let Some(pki) = cluster.pki() {
        println!("pki ca {}", pki.ca_pem().display());
        for name in pki.user_names() {
            if let Some(cert) = pki.user(name) {
                println!(
                    "pki user {name} cert {} key {} keystore {}",
                    cert.cert_pem.display(),
                    cert.key_pem.display(),
                    cert.keystore_pem.display()
                );
            }
        }
    }
    let mut users: Vec<Option<&str>> = vec![None];
    users.extend(cluster.user_names().into_iter().map(Some));
    if let Some(dir) = props_dir {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    for l in cluster.listeners() {
        for user in &users {
            let who = user.unwrap_or("admin");
            let props = cluster.client_properties(*l, *user);
            let java = cluster
                .write_java_client_config(*l, *user)
                .map_err(|e| e.to_string())?;
            let stem = format!("{}-{who}", l.security_protocol().to_ascii_lowercase());
            let text: String = props.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
            let mut files = vec![
                cluster
                    .dir()
                    .join("clients")
                    .join(format!("{stem}.properties")),
            ];
            if let Some(dir) = props_dir {
                files.push(dir.join(format!("{stem}.properties")));
                let java_copy = dir.join(format!("{stem}.java.properties"));
                std::fs::copy(&java, &java_copy)
                    .map_err(|e| format!("copying to {}: {e}", java_copy.display()))?;
            }
            for f in &files {
                std::fs::write(f, &text).map_err(|e| format!("writing {}: {e}", f.display()))?;
            }
            println!(
                "client {} {who}: {} (Java client: {})",
                l.security_protocol(),
                files[files.len() - 1].display(),
                java.display()
            );
            for (k, v) in &props {
                println!("    {k}={v}");
            }
        }
    }
    Ok(())
}
