//! The demo producer: `Hello world - N` at a fixed rate, one traced record per batch.
//!
//! Each record gets a PRODUCER span `send <topic>` that starts just before the Produce request
//! and ends when the broker acknowledges it (so the span is the real send time, not a marker),
//! and the span's context travels in the record's `traceparent` header. Partitions are chosen
//! by a counter over the topic's partitions: record N goes to partition (N - 1) mod count.

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanKind, Status, TraceContextExt as _, Tracer as _};
use opentelemetry::{Context, KeyValue};
use strait_wire::{Client, ProduceBatch, ProduceOptions, TopicPartition};

use crate::error::{Error, Result};
use crate::record::single_record_batch;
use crate::telemetry::{Telemetry, inject};
use crate::topic::{TOPIC_WAIT, wait_for_topic};

/// What to produce.
#[derive(Debug, Clone)]
pub struct ProduceArgs {
    /// The topic.
    pub topic: String,
    /// Records per second.
    pub rate: f64,
    /// Stop after this many records; 0 = until stopped.
    pub count: u64,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Produces until `count` records were sent or `stop` resolves; returns how many were
/// acknowledged.
pub async fn run(
    client: &Client,
    telemetry: &Telemetry,
    args: &ProduceArgs,
    stop: impl Future<Output = ()>,
) -> Result<u64> {
    if !(args.rate > 0.0 && args.rate.is_finite()) {
        return Err(Error::Usage(format!(
            "--rate {}: must be a positive number of records per second",
            args.rate
        )));
    }
    let partitions = wait_for_topic(client, &args.topic, TOPIC_WAIT).await?;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let tracer = telemetry.tracer();
    let mut acked = 0;
    tokio::pin!(stop);
    let mut n: u64 = 0;
    while args.count == 0 || n < args.count {
        tokio::select! {
            _ = tick.tick() => {}
            _ = &mut stop => break,
        }
        n += 1;
        let partition = ((n - 1) % partitions as u64) as i32;
        let tp = TopicPartition::new(&args.topic, partition)?;
        let value = format!("Hello world - {n}");
        let span = tracer
            .span_builder(format!("send {}", args.topic))
            .with_kind(SpanKind::Producer)
            .with_attributes([
                KeyValue::new("messaging.system", "kafka"),
                KeyValue::new("messaging.operation.name", "send"),
                KeyValue::new("messaging.operation.type", "send"),
                KeyValue::new("messaging.destination.name", args.topic.clone()),
                KeyValue::new("messaging.destination.partition.id", partition.to_string()),
                KeyValue::new("messaging.message.body.size", value.len() as i64),
            ])
            .start_with_context(tracer, &Context::new());
        let cx = Context::new().with_span(span);
        let headers = inject(&cx);
        let batch = single_record_batch(value.as_bytes(), &headers, now_ms())?;
        let outcome = client
            .produce(
                vec![ProduceBatch::new(tp.clone(), batch)],
                &ProduceOptions::default(),
            )
            .await
            .and_then(|mut results| match results.pop() {
                Some(r) => r.outcome,
                None => Err(strait_wire::Error::InvalidArgument(
                    "the broker answered without the partition".into(),
                )),
            });
        let span = cx.span();
        let trace_id = span.span_context().trace_id();
        match outcome {
            Ok(ack) => {
                span.set_attribute(KeyValue::new("messaging.kafka.offset", ack.base_offset));
                acked += 1;
                println!(
                    "Sending messages \"{value}\" -> partition {partition} offset {} trace {trace_id}",
                    ack.base_offset
                );
            }
            Err(e) => {
                span.set_attribute(KeyValue::new("error.type", "produce_failed"));
                span.set_status(Status::error(e.to_string()));
                eprintln!("strait-demo produce: \"{value}\" to {tp} failed: {e}");
            }
        }
        span.end();
    }
    Ok(acked)
}
