//! Produce: one raw record batch per partition, sent as the caller built it.
//!
//! The batch bytes (a v2 RecordBatch with base offset 0) go into the request without being
//! parsed; encoding the request copies them once into the outgoing frame. The only thing this
//! module reads from a batch is its producer id (bytes 43..51), to know whether a retry after an
//! ambiguous failure is safe: an idempotent batch (producer id >= 0) is deduplicated by the
//! broker, a plain one would be written twice, so it is not resent.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use tokio::task::JoinSet;

use crate::client::{Client, UNKNOWN_TOPIC_RETRIES, partition_error};
use crate::conn::Connection;
use crate::error::{Error, Result};
use crate::topic::{TopicId, TopicPartition, requested_topic};

/// One record batch for one partition.
#[derive(Debug, Clone)]
pub struct ProduceBatch {
    /// Where it goes.
    pub partition: TopicPartition,
    /// Exactly one v2 record batch, base offset 0 (Kafka refuses several batches per partition).
    pub records: Bytes,
}

impl ProduceBatch {
    /// A batch for `partition`.
    pub fn new(partition: TopicPartition, records: Bytes) -> ProduceBatch {
        ProduceBatch { partition, records }
    }

    /// Whether the batch carries a producer id, so the broker deduplicates a resend.
    pub fn is_idempotent(&self) -> bool {
        let r = &self.records;
        r.len() >= 61 && r[16] == 2 && {
            let mut pid = [0u8; 8];
            pid.copy_from_slice(&r[43..51]);
            i64::from_be_bytes(pid) >= 0
        }
    }
}

/// `acks`. There is no acks=0: a mirror must know what was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Acks {
    /// acks=all (-1): every in-sync replica has the batch. The default.
    #[default]
    All,
    /// acks=1: the leader has it.
    Leader,
}

impl Acks {
    fn code(self) -> i16 {
        match self {
            Acks::All => -1,
            Acks::Leader => 1,
        }
    }
}

/// Options of a Produce request.
#[derive(Debug, Clone, Default)]
pub struct ProduceOptions {
    /// `acks`.
    pub acks: Acks,
    /// How long the broker may wait for replication; `None` = `request.timeout.ms`.
    pub timeout: Option<Duration>,
    /// A transactional id (only for batches of a transaction the caller manages).
    pub transactional_id: Option<String>,
}

/// A per-record error from a Produce response (v8+).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError {
    /// Index of the record inside the batch.
    pub batch_index: i32,
    /// The broker's message for it.
    pub message: Option<String>,
}

/// One partition of a Produce response, as the broker sent it.
#[derive(Debug, Clone)]
pub struct PartitionProduceResponse {
    /// The partition.
    pub partition: TopicPartition,
    /// The error, if the batch was not written.
    pub error: Option<ResponseError>,
    /// The broker's error message (v8+).
    pub error_message: Option<String>,
    /// Offset of the batch's first record.
    pub base_offset: i64,
    /// The append time for LogAppendTime topics.
    pub log_append_time_ms: Option<i64>,
    /// The partition's log start offset (v5+).
    pub log_start_offset: Option<i64>,
    /// Per-record errors (v8+).
    pub record_errors: Vec<RecordError>,
    /// The new leader and its epoch, when the broker says (NOT_LEADER_OR_FOLLOWER, v10+).
    pub current_leader: Option<(i32, i32)>,
}

/// What the broker acknowledged for a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceAck {
    /// Offset of the batch's first record.
    pub base_offset: i64,
    /// The append time for LogAppendTime topics.
    pub log_append_time_ms: Option<i64>,
    /// The partition's log start offset (v5+).
    pub log_start_offset: Option<i64>,
}

/// The outcome of one batch of a [`Client::produce`] call.
#[derive(Debug)]
pub struct ProduceResult {
    /// The partition.
    pub partition: TopicPartition,
    /// The acknowledgement, or why the batch was not (or may not have been) written.
    pub outcome: Result<ProduceAck>,
}

impl PartitionProduceResponse {
    /// The acknowledgement, or the error as a crate [`Error`] (`principal` names who was refused).
    pub fn result(&self, principal: Option<&str>) -> Result<ProduceAck> {
        let Some(code) = self.error else {
            return Ok(ProduceAck {
                base_offset: self.base_offset,
                log_append_time_ms: self.log_append_time_ms,
                log_start_offset: self.log_start_offset,
            });
        };
        let rejects_records = matches!(
            code,
            ResponseError::InvalidRecord
                | ResponseError::InvalidTimestamp
                | ResponseError::CorruptMessage
                | ResponseError::UnsupportedCompressionType
                | ResponseError::UnsupportedForMessageFormat
        );
        if rejects_records || !self.record_errors.is_empty() {
            return Err(Error::RecordsRejected {
                partition: self.partition.to_string(),
                code,
                message: self.error_message.clone(),
                record_errors: self.record_errors.clone(),
            });
        }
        Err(partition_error(
            code,
            principal,
            "Write",
            &self.partition,
            "Produce",
            self.error_message.as_deref(),
        ))
    }
}

impl Connection {
    /// Sends one Produce request with `batches` (at most one per partition) and returns each
    /// partition's answer, errors included. No routing, no retries.
    ///
    /// `topic_id` gives topic ids for Produce v13 (Kafka 4.1+); if any topic lacks one, v12 or
    /// lower is used with names.
    pub async fn produce(
        &self,
        batches: &[ProduceBatch],
        options: &ProduceOptions,
        topic_id: impl Fn(&str) -> Option<TopicId>,
    ) -> Result<Vec<PartitionProduceResponse>> {
        let mut topics: Vec<(Arc<str>, Option<TopicId>, Vec<PartitionProduceData>)> = Vec::new();
        for b in batches {
            let name = b.partition.topic_arc();
            let data = PartitionProduceData::default()
                .with_index(b.partition.partition())
                .with_records(Some(b.records.clone()));
            match topics.iter_mut().find(|(n, _, _)| n == name) {
                Some((_, _, parts)) => {
                    if parts.iter().any(|p| p.index == b.partition.partition()) {
                        return Err(Error::InvalidArgument(format!(
                            "two batches for {} in one Produce request; Kafka accepts one batch per \
                             partition per request, so send them in order in separate requests",
                            b.partition
                        )));
                    }
                    parts.push(data)
                }
                None => topics.push((name.clone(), topic_id(name), vec![data])),
            }
        }
        let use_ids = !topics.is_empty() && topics.iter().all(|(_, id, _)| id.is_some());
        let version = self.pick_version::<ProduceRequest>(3..=if use_ids { 13 } else { 12 })?;
        let with_ids = version >= 13;
        let timeout = options.timeout.unwrap_or(self.request_timeout());
        let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
        let req = ProduceRequest::default()
            .with_acks(options.acks.code())
            .with_timeout_ms(timeout_ms)
            .with_transactional_id(
                options
                    .transactional_id
                    .as_ref()
                    .map(|t| TransactionalId(StrBytes::from_string(t.clone()))),
            )
            .with_topic_data(
                topics
                    .iter()
                    .map(|(name, id, parts)| {
                        let t = TopicProduceData::default().with_partition_data(parts.clone());
                        match (with_ids, id) {
                            (true, Some(id)) => t.with_topic_id(id.to_uuid()),
                            _ => t.with_name(TopicName(StrBytes::from_string(name.to_string()))),
                        }
                    })
                    .collect(),
            );
        // The broker may hold the request for `timeout` before answering.
        let resp = self
            .send_with_timeout(req, version, self.request_timeout().saturating_add(timeout))
            .await?;

        let mut out = Vec::with_capacity(batches.len());
        for t in resp.responses {
            let name =
                requested_topic(&topics, with_ids, TopicId::from_uuid(t.topic_id), &t.name.0);
            let Some(name) = name else {
                return Err(Error::protocol(
                    self.broker(),
                    "Produce response names a topic that was not requested",
                ));
            };
            for p in t.partition_responses {
                out.push(PartitionProduceResponse {
                    partition: TopicPartition::from_broker(name.clone(), p.index),
                    error: ResponseError::try_from_code(p.error_code),
                    error_message: p.error_message.map(|m| m.to_string()),
                    base_offset: p.base_offset,
                    log_append_time_ms: (p.log_append_time_ms >= 0).then_some(p.log_append_time_ms),
                    log_start_offset: (p.log_start_offset >= 0).then_some(p.log_start_offset),
                    record_errors: p
                        .record_errors
                        .into_iter()
                        .map(|e| RecordError {
                            batch_index: e.batch_index,
                            message: e.batch_index_error_message.map(|m| m.to_string()),
                        })
                        .collect(),
                    current_leader: (p.current_leader.leader_id.0 >= 0)
                        .then_some((p.current_leader.leader_id.0, p.current_leader.leader_epoch)),
                });
            }
        }
        if let Some(missing) = batches
            .iter()
            .find(|b| !out.iter().any(|r| r.partition == b.partition))
        {
            return Err(Error::protocol(
                self.broker(),
                format!("Produce response has no answer for {}", missing.partition),
            ));
        }
        Ok(out)
    }
}

/// Produce errors after which the batch was certainly not appended: safe to resend anywhere.
fn not_appended_retriable(code: ResponseError) -> bool {
    matches!(
        code,
        ResponseError::NotLeaderOrFollower
            | ResponseError::LeaderNotAvailable
            | ResponseError::UnknownTopicOrPartition
            | ResponseError::UnknownTopicId
            | ResponseError::NotEnoughReplicas
            | ResponseError::FencedLeaderEpoch
            | ResponseError::UnknownLeaderEpoch
            | ResponseError::KafkaStorageError
            | ResponseError::ThrottlingQuotaExceeded
            | ResponseError::BrokerNotAvailable
    )
}

/// Produce errors after which the batch may have been appended: resend only if idempotent.
fn maybe_appended_retriable(code: ResponseError) -> bool {
    matches!(
        code,
        ResponseError::RequestTimedOut
            | ResponseError::NotEnoughReplicasAfterAppend
            | ResponseError::NetworkException
    )
}

fn ambiguous(e: Error) -> Error {
    let hint = "the batch may or may not have been written; strait-wire resends only idempotent \
                batches (with a producer id from init_producer_id)";
    match e {
        Error::Disconnected { broker, reason } => Error::Disconnected {
            broker,
            reason: format!("{reason}; {hint}"),
        },
        Error::Broker { code, context } => Error::broker(code, format!("{context}; {hint}")),
        other => other,
    }
}

impl Client {
    /// Produces each batch to its partition's leader; batches for the same leader share a
    /// request, leaders are written to concurrently. Leadership errors refresh metadata and
    /// retry (within `request.timeout.ms`); ambiguous failures (disconnects, timeouts) are
    /// retried only for idempotent batches. Returns one result per batch, in input order.
    pub async fn produce(
        &self,
        batches: Vec<ProduceBatch>,
        options: &ProduceOptions,
    ) -> Result<Vec<ProduceResult>> {
        for (i, b) in batches.iter().enumerate() {
            if batches[..i].iter().any(|o| o.partition == b.partition) {
                return Err(Error::InvalidArgument(format!(
                    "two batches for {} in one produce call; send them in order in separate calls",
                    b.partition
                )));
            }
        }
        let mut outcomes: Vec<Option<Result<ProduceAck>>> = batches.iter().map(|_| None).collect();
        let mut last_error: HashMap<usize, Error> = HashMap::new();
        let mut pending: Vec<usize> = (0..batches.len()).collect();
        let mut retry = self.retry();
        let mut force = false;
        let mut unknown_topic_rounds = 0u32;

        while !pending.is_empty() {
            let topics: Vec<&str> = pending
                .iter()
                .map(|&i| batches[i].partition.topic())
                .collect();
            let mut next = Vec::new();
            let mut saw_unknown_topic = false;
            match self.metadata_for(&topics, force).await {
                Err(e) if e.is_retriable() => {
                    for &i in &pending {
                        last_error.insert(i, e.clone());
                    }
                    next = pending.clone();
                }
                Err(e) => {
                    for &i in &pending {
                        outcomes[i] = Some(Err(e.clone()));
                    }
                }
                Ok(md) => {
                    let mut by_leader: HashMap<i32, Vec<usize>> = HashMap::new();
                    for &i in &pending {
                        match self.route(&md, &batches[i].partition, "Write") {
                            Ok(route) => by_leader.entry(route.leader).or_default().push(i),
                            Err(e) if e.is_retriable() => {
                                saw_unknown_topic |=
                                    e.code() == Some(ResponseError::UnknownTopicOrPartition);
                                last_error.insert(i, e);
                                next.push(i);
                            }
                            Err(e) => outcomes[i] = Some(Err(e)),
                        }
                    }
                    let mut set = JoinSet::new();
                    for (leader, idxs) in by_leader {
                        let client = self.clone();
                        let group: Vec<ProduceBatch> =
                            idxs.iter().map(|&i| batches[i].clone()).collect();
                        let options = options.clone();
                        let md = md.clone();
                        set.spawn(async move {
                            // `sent`: whether the request may have reached the broker.
                            let conn = match client.broker(leader).await {
                                Ok(c) => c,
                                Err(e) => return (idxs, false, Err(e)),
                            };
                            let r = conn
                                .produce(&group, &options, |t| md.topic(t).and_then(|i| i.id))
                                .await;
                            (idxs, true, r)
                        });
                    }
                    while let Some(joined) = set.join_next().await {
                        let Ok((idxs, sent, r)) = joined else {
                            continue;
                        };
                        match r {
                            Err(e) if e.is_retriable() => {
                                for i in idxs {
                                    if !sent || batches[i].is_idempotent() {
                                        last_error.insert(i, e.clone());
                                        next.push(i);
                                    } else {
                                        outcomes[i] = Some(Err(ambiguous(e.clone())));
                                    }
                                }
                            }
                            Err(e) => {
                                for i in idxs {
                                    outcomes[i] = Some(Err(e.clone()));
                                }
                            }
                            Ok(parts) => {
                                for i in idxs {
                                    let Some(p) =
                                        parts.iter().find(|p| p.partition == batches[i].partition)
                                    else {
                                        continue;
                                    };
                                    match p.error {
                                        None => outcomes[i] = Some(p.result(self.principal())),
                                        Some(code)
                                            if not_appended_retriable(code)
                                                || (maybe_appended_retriable(code)
                                                    && batches[i].is_idempotent()) =>
                                        {
                                            saw_unknown_topic |=
                                                code == ResponseError::UnknownTopicOrPartition;
                                            last_error.insert(
                                                i,
                                                p.result(self.principal())
                                                    .err()
                                                    .unwrap_or_else(|| Error::broker(code, "")),
                                            );
                                            next.push(i);
                                        }
                                        Some(code) if maybe_appended_retriable(code) => {
                                            outcomes[i] = p
                                                .result(self.principal())
                                                .map_err(ambiguous)
                                                .into();
                                        }
                                        Some(_) => outcomes[i] = Some(p.result(self.principal())),
                                    }
                                }
                            }
                        }
                    }
                }
            }
            if saw_unknown_topic {
                unknown_topic_rounds += 1;
            }
            pending = next;
            if pending.is_empty() {
                break;
            }
            force = true;
            let give_up = unknown_topic_rounds > UNKNOWN_TOPIC_RETRIES
                && pending.iter().all(|i| {
                    last_error
                        .get(i)
                        .and_then(Error::code)
                        .is_some_and(|c| c == ResponseError::UnknownTopicOrPartition)
                });
            if give_up || !retry.wait().await {
                break;
            }
            tracing::debug!(
                partitions = pending.len(),
                attempt = retry.attempts(),
                "retrying produce"
            );
        }
        for i in pending {
            outcomes[i] = Some(Err(last_error.remove(&i).unwrap_or_else(|| {
                Error::broker(
                    ResponseError::RequestTimedOut,
                    "produce did not complete within request.timeout.ms",
                )
            })));
        }
        Ok(batches
            .into_iter()
            .zip(outcomes)
            .map(|(b, o)| ProduceResult {
                partition: b.partition,
                outcome: o.unwrap_or_else(|| {
                    Err(Error::broker(
                        ResponseError::UnknownServerError,
                        "no outcome",
                    ))
                }),
            })
            .collect())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn batch_with_pid(pid: i64) -> ProduceBatch {
        let mut v = vec![0u8; 70];
        v[16] = 2;
        v[43..51].copy_from_slice(&pid.to_be_bytes());
        ProduceBatch::new(TopicPartition::new("t", 0).unwrap(), Bytes::from(v))
    }

    #[test]
    fn idempotence_is_read_from_the_batch_header() {
        assert!(batch_with_pid(7).is_idempotent());
        assert!(!batch_with_pid(-1).is_idempotent());
        assert!(
            !ProduceBatch::new(
                TopicPartition::new("t", 0).unwrap(),
                Bytes::from_static(b"short")
            )
            .is_idempotent()
        );
    }

    #[test]
    fn rejected_records_are_typed() {
        let r = PartitionProduceResponse {
            partition: TopicPartition::new("t", 1).unwrap(),
            error: Some(ResponseError::InvalidTimestamp),
            error_message: Some("timestamp out of range".into()),
            base_offset: -1,
            log_append_time_ms: None,
            log_start_offset: None,
            record_errors: vec![RecordError {
                batch_index: 2,
                message: Some("too new".into()),
            }],
            current_leader: None,
        };
        let e = r.result(None).unwrap_err();
        assert!(matches!(e, Error::RecordsRejected { .. }));
        let m = e.to_string();
        assert!(
            m.contains("INVALID_TIMESTAMP") && m.contains("record 2: too new"),
            "{m}"
        );
    }

    #[test]
    fn retry_classes() {
        assert!(not_appended_retriable(ResponseError::NotLeaderOrFollower));
        assert!(!not_appended_retriable(ResponseError::RequestTimedOut));
        assert!(maybe_appended_retriable(ResponseError::RequestTimedOut));
        assert!(!maybe_appended_retriable(ResponseError::InvalidRecord));
    }
}
