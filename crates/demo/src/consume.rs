//! The demo consumer: a classic-protocol group member that prints each record and traces it.
//!
//! It joins the group with strait-wire's `GroupMember`, starts each assigned partition at the
//! group's committed offset (or the earliest offset), fetches, prints
//! `partition: P offset: O value: V`, and commits after each fetch that returned records. Each
//! record gets a CONSUMER span `process <topic>` parented on the record's `traceparent` (a new
//! root when it has none), from the fetch response's arrival to the end of its processing.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, SpanKind, Tracer as _};
use strait_forward::{FetchedBatch, FetchedRecords};
use strait_wire::group::{Generation, GroupConfig, GroupEvent, GroupMember};
use strait_wire::offset_commit::CommitOffset;
use strait_wire::{
    Client, FetchOptions, FetchPartition, FetchedPartition, Isolation, OffsetSpec, ResponseError,
    TopicPartition,
};

use crate::error::{Error, Result};
use crate::telemetry::{Telemetry, extract};
use crate::topic::{TOPIC_WAIT, wait_for_topic};

/// Cap on a fetched batch's decompressed size.
const MAX_DECOMPRESSED: usize = 64 << 20;

/// What to consume.
#[derive(Debug, Clone)]
pub struct ConsumeArgs {
    /// The topic.
    pub topic: String,
    /// The consumer group.
    pub group: String,
    /// Stop after this many records; 0 = until stopped.
    pub count: u64,
}

/// Where each owned partition continues, and the generation to commit with.
struct Owned {
    generation: Generation,
    next: BTreeMap<TopicPartition, i64>,
}

enum Step {
    Event(Option<GroupEvent>),
    Fetched(strait_wire::Result<Vec<FetchedPartition>>, SystemTime),
    Stop,
}

/// The committed offset of each partition, or its earliest offset.
async fn start_positions(
    client: &Client,
    member: &GroupMember,
    partitions: &[TopicPartition],
) -> Result<BTreeMap<TopicPartition, i64>> {
    let committed = member.committed(partitions).await?;
    let mut next = BTreeMap::new();
    let mut missing = Vec::new();
    for tp in partitions {
        match committed.get(tp).and_then(|c| c.as_ref()) {
            Some(c) if c.offset >= 0 => {
                next.insert(tp.clone(), c.offset);
            }
            _ => missing.push((tp.clone(), OffsetSpec::Earliest)),
        }
    }
    if !missing.is_empty() {
        for listed in client
            .list_offsets(&missing, Isolation::ReadUncommitted)
            .await?
        {
            next.insert(listed.partition, listed.offset.unwrap_or(0));
        }
    }
    Ok(next)
}

/// Consumes until `count` records were printed, `stop` resolves, or the membership fails;
/// returns how many records were printed. Leaves the group on the way out.
pub async fn run(
    client: &Client,
    telemetry: &Telemetry,
    args: &ConsumeArgs,
    stop: impl Future<Output = ()>,
) -> Result<u64> {
    // On the target cluster the mirror creates the topic: join once it exists.
    let partitions = wait_for_topic(client, &args.topic, TOPIC_WAIT).await?;
    eprintln!(
        "strait-demo consume: {} has {partitions} partition(s); joining group {}",
        args.topic, args.group
    );
    let config = GroupConfig::new(args.group.clone(), [args.topic.clone()])?;
    let mut member = GroupMember::join(client, config).await?;
    let options = FetchOptions {
        max_wait: Duration::from_millis(200),
        ..FetchOptions::default()
    };
    let mut owned: Option<Owned> = None;
    let mut printed = 0u64;
    tokio::pin!(stop);
    let result = loop {
        if args.count > 0 && printed >= args.count {
            break Ok(());
        }
        let wanted: Vec<FetchPartition> = owned
            .as_ref()
            .map(|o| {
                o.next
                    .iter()
                    .map(|(tp, off)| FetchPartition::new(tp.clone(), *off))
                    .collect()
            })
            .unwrap_or_default();
        let step = tokio::select! {
            ev = member.next_event() => Step::Event(ev),
            r = client.fetch(&wanted, &options), if !wanted.is_empty() => Step::Fetched(r, SystemTime::now()),
            _ = &mut stop => Step::Stop,
        };
        match step {
            Step::Stop => break Ok(()),
            Step::Event(None) => break Ok(()),
            Step::Event(Some(GroupEvent::Assigned {
                generation,
                partitions,
            })) => {
                let next = start_positions(client, &member, &partitions).await?;
                eprintln!(
                    "strait-demo consume: assigned {} partition(s) of {} in group {}",
                    partitions.len(),
                    args.topic,
                    args.group
                );
                owned = Some(Owned { generation, next });
            }
            Step::Event(Some(GroupEvent::Revoked { lost, done, .. })) => {
                if let (Some(o), false) = (owned.take(), lost) {
                    commit(&member, &o).await;
                }
                done.done();
            }
            Step::Event(Some(GroupEvent::Failed(e))) => break Err(Error::Group(e.to_string())),
            Step::Event(Some(_)) => {}
            Step::Fetched(Err(e), _) => {
                eprintln!("strait-demo consume: fetch failed: {e}; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Step::Fetched(Ok(fetched), arrived) => {
                let Some(o) = owned.as_mut() else { continue };
                let before = printed;
                for p in fetched {
                    printed += handle_partition(client, telemetry, args, o, p, arrived).await?;
                }
                if printed > before {
                    commit(&member, o).await;
                }
            }
        }
    };
    if let Some(o) = &owned {
        commit(&member, o).await;
    }
    let _ = member.close().await;
    result.map(|()| printed)
}

async fn commit(member: &GroupMember, owned: &Owned) {
    let offsets: Vec<CommitOffset> = owned
        .next
        .iter()
        .map(|(tp, off)| CommitOffset::new(tp.clone(), *off))
        .collect();
    if let Err(e) = member.commit(&owned.generation, &offsets).await {
        eprintln!("strait-demo consume: commit failed: {e}");
    }
}

/// Prints and traces one partition's records; returns how many were printed.
async fn handle_partition(
    client: &Client,
    telemetry: &Telemetry,
    args: &ConsumeArgs,
    owned: &mut Owned,
    p: FetchedPartition,
    arrived: SystemTime,
) -> Result<u64> {
    let tp = p.partition.clone();
    let Some(&fetch_offset) = owned.next.get(&tp) else {
        return Ok(0);
    };
    match p.error {
        None => {}
        Some(ResponseError::OffsetOutOfRange) => {
            let listed = client
                .list_offsets(
                    &[(tp.clone(), OffsetSpec::Earliest)],
                    Isolation::ReadUncommitted,
                )
                .await?;
            let earliest = listed.first().and_then(|l| l.offset).unwrap_or(0);
            eprintln!(
                "strait-demo consume: {tp}: offset {fetch_offset} is gone; continuing at {earliest}"
            );
            owned.next.insert(tp, earliest);
            return Ok(0);
        }
        Some(code) => {
            eprintln!("strait-demo consume: {tp}: {code:?}; retrying");
            return Ok(0);
        }
    }
    let tracer = telemetry.tracer();
    let mut next = fetch_offset;
    let mut printed = 0;
    let mut walker = FetchedRecords::new(p.records);
    for entry in walker.by_ref() {
        let entry = entry?;
        let batch = match entry {
            FetchedBatch::V2(b) => b,
            // Magic 0/1 data never comes from this demo's producer.
            other => {
                next = next.max(other.next_offset());
                continue;
            }
        };
        if batch.is_control() {
            next = next.max(batch.next_offset());
            continue;
        }
        let decoded = batch.decode_records(MAX_DECOMPRESSED)?;
        for record in decoded.iter() {
            let record = record?;
            let offset = batch.record_offset(&record);
            if offset < fetch_offset {
                continue;
            }
            let value = String::from_utf8_lossy(record.value().unwrap_or_default()).into_owned();
            let parent = extract(record.headers().map(|h| (h.key, h.value)));
            let mut span = tracer
                .span_builder(format!("process {}", args.topic))
                .with_kind(SpanKind::Consumer)
                .with_start_time(arrived)
                .with_attributes([
                    KeyValue::new("messaging.system", "kafka"),
                    KeyValue::new("messaging.operation.name", "process"),
                    KeyValue::new("messaging.operation.type", "process"),
                    KeyValue::new("messaging.destination.name", args.topic.clone()),
                    KeyValue::new(
                        "messaging.destination.partition.id",
                        tp.partition().to_string(),
                    ),
                    KeyValue::new("messaging.consumer.group.name", args.group.clone()),
                    KeyValue::new("messaging.kafka.offset", offset),
                ])
                .start_with_context(tracer, &parent);
            println!(
                "partition: {} offset: {offset} value: {value}",
                tp.partition()
            );
            span.end();
            printed += 1;
            next = offset + 1;
        }
        next = next.max(batch.next_offset());
    }
    owned.next.insert(tp, next);
    Ok(printed)
}
