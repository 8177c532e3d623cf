//! Embeds the forwarder in a program of your own: mirrors partitions of one topic from a source
//! cluster into the same topic on a target cluster until Ctrl-C, then stops gracefully (in-flight
//! batches acknowledged, positions committed to the consumer group on the source).
//!
//! ```text
//! SOURCE=127.0.0.1:9092 TARGET=127.0.0.1:9192 TOPIC=orders PARTITIONS=3 \
//!     cargo run -p strait-forward --example embed
//! ```
//!
//! The target topic must exist with at least as many partitions (this example does not create
//! topics). Positions are stored in the source consumer group `GROUP` (default `strait-embed`),
//! so a restart continues where the last run stopped.

use std::time::Duration;

use strait_forward::{Forwarder, OffsetOutOfRange, Route, Settings};
use strait_wire::{ClientConfig, TopicPartition};

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let topic = env_or("TOPIC", "orders");
    let partitions: i32 = env_or("PARTITIONS", "1").parse()?;
    // Kafka's own client property names; add security.protocol, ssl.*, sasl.* as needed.
    let source =
        ClientConfig::from_properties([("bootstrap.servers", env_or("SOURCE", "127.0.0.1:9092"))])?;
    let target =
        ClientConfig::from_properties([("bootstrap.servers", env_or("TARGET", "127.0.0.1:9192"))])?;

    let mut settings = Settings::default();
    // Never skip data silently: a partition whose position was deleted by retention stops and
    // is listed by `failures()` (the default; Earliest/Latest accept the gap).
    settings.on_offset_out_of_range = OffsetOutOfRange::Fail;

    let forwarder = Forwarder::builder()
        .source(source)
        .target(target)
        .group_id(env_or("GROUP", "strait-embed"))
        .settings(settings)
        .build()
        .await?;

    let routes = (0..partitions)
        .map(|p| {
            let tp = TopicPartition::new(&topic, p)?;
            Ok(Route {
                source: tp.clone(),
                target: tp,
            })
        })
        .collect::<Result<Vec<_>, strait_wire::Error>>()?;
    forwarder.assign(routes).await?;
    eprintln!("mirroring {partitions} partition(s) of {topic}; Ctrl-C stops");

    // A clone is a handle to the same forwarder: report progress from another task.
    let watcher = forwarder.clone();
    let report = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            for (tp, next) in watcher.acknowledged_positions() {
                eprintln!("{tp}: acknowledged up to offset {next}");
            }
            for failure in watcher.failures() {
                eprintln!("{} stopped: {}", failure.partition, failure.error);
            }
        }
    });

    tokio::signal::ctrl_c().await?;
    report.abort();
    forwarder.shutdown().await?;
    eprintln!("stopped; positions committed");
    Ok(())
}
