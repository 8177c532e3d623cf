//! Produce: one raw record batch per partition, sent as the caller built it.
//!
//! The batch bytes (a v2 RecordBatch with base offset 0) go into the request without being
//! parsed or copied: the request is encoded around them ([`encode`]) and written vectored, so
//! each batch reaches the socket from the buffer the caller gave. The only thing this
//! module reads from a batch is its producer id (bytes 43..51), to know whether a retry after an
//! ambiguous failure is safe: an idempotent batch (producer id >= 0) is deduplicated by the
//! broker, a plain one would be written twice, so it is not resent.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::ResponseError;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName, TransactionalId};
use kafka_protocol::protocol::StrBytes;

mod encode;

use crate::client::{Client, partition_error};
use crate::conn::{Connection, request_header};
use crate::error::{Error, ErrorClass, RecordError, Result};
use crate::metadata::ClusterMetadata;
use crate::route::{PartitionRequest, Verdict};
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
        // Produce v12 announces KIP-890's second transaction protocol (the broker adds the
        // partition to the transaction itself); `txn.rs` runs the first one, in which the
        // producer adds partitions, so transactional batches go as v11, as Java's producer sends
        // them when that protocol is off.
        let max = match (&options.transactional_id, use_ids) {
            (Some(_), _) => 11,
            (None, true) => 13,
            (None, false) => 12,
        };
        let version = self.pick_version::<ProduceRequest>(3..=max)?;
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
        // The broker may hold the request for `timeout` before answering. Encoded by hand
        // around the batches: they are written from where they are, not copied into the frame.
        let resp = self
            .send_encoded::<ProduceRequest>(
                version,
                self.request_timeout().saturating_add(timeout),
                |correlation, client_id| {
                    let header = request_header::<ProduceRequest>(version, correlation, client_id);
                    encode::produce_frame(&req, version, &header)
                },
            )
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

/// Marks an error after which the batch may or may not have been written.
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
        let request = LeaderProduce {
            options: options.clone(),
            principal: self.principal().map(Arc::from),
        };
        let outcomes = self.route_and_retry(&request, &batches).await?;
        Ok(batches
            .into_iter()
            .zip(outcomes)
            .map(|(b, outcome)| ProduceResult {
                partition: b.partition,
                outcome,
            })
            .collect())
    }
}

/// [`Client::produce`]: each batch to its partition's leader.
#[derive(Clone)]
struct LeaderProduce {
    options: ProduceOptions,
    principal: Option<Arc<str>>,
}

impl PartitionRequest for LeaderProduce {
    type Item = ProduceBatch;
    type Answer = PartitionProduceResponse;
    type Out = ProduceAck;
    const API: &'static str = "Produce";
    const OPERATION: &'static str = "Write";
    const FAIL_FAST: bool = false;

    fn partition(item: &ProduceBatch) -> &TopicPartition {
        &item.partition
    }

    fn answered(answer: &PartitionProduceResponse) -> &TopicPartition {
        &answer.partition
    }

    async fn send(
        &self,
        conn: &Connection,
        items: &[ProduceBatch],
        metadata: &ClusterMetadata,
    ) -> Result<Vec<PartitionProduceResponse>> {
        conn.produce(items, &self.options, |t| {
            metadata.topic(t).and_then(|i| i.id)
        })
        .await
    }

    /// Errors after which the batch was certainly not appended are retried; those after which
    /// it may have been (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND) only if the
    /// broker deduplicates a resend (an idempotent batch).
    fn judge(&self, item: &ProduceBatch, answer: PartitionProduceResponse) -> Verdict<ProduceAck> {
        let e = match answer.result(self.principal.as_deref()) {
            Ok(ack) => return Verdict::Done(ack),
            Err(e) => e,
        };
        match e.class() {
            ErrorClass::Refresh | ErrorClass::Retriable => Verdict::retry(e),
            ErrorClass::Ambiguous if item.is_idempotent() => Verdict::retry(e),
            ErrorClass::Ambiguous => Verdict::Fail(ambiguous(e)),
            _ => Verdict::Fail(e),
        }
    }

    /// A request that failed after it may have reached the broker is resent only for an
    /// idempotent batch.
    fn failed(&self, item: &ProduceBatch, error: &Error, sent: bool) -> Verdict<ProduceAck> {
        if !error.is_retriable() {
            Verdict::Fail(error.clone())
        } else if !sent || item.is_idempotent() {
            Verdict::retry(error.clone())
        } else {
            Verdict::Fail(ambiguous(error.clone()))
        }
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

    /// What happens to a batch after each kind of answer, idempotent or not.
    #[test]
    fn which_produce_answers_are_retried() {
        use ResponseError as E;
        #[derive(Debug, PartialEq)]
        enum Then {
            Done,
            Retry,
            Fail,
            FailAmbiguous,
        }
        let request = LeaderProduce {
            options: ProduceOptions::default(),
            principal: None,
        };
        // (code, idempotent batch, expected)
        let table = [
            (None, false, Then::Done),
            (Some(E::NotLeaderOrFollower), false, Then::Retry),
            (Some(E::UnknownTopicOrPartition), false, Then::Retry),
            (Some(E::NotEnoughReplicas), false, Then::Retry),
            (Some(E::ThrottlingQuotaExceeded), false, Then::Retry),
            (Some(E::KafkaStorageError), false, Then::Retry),
            (Some(E::RequestTimedOut), true, Then::Retry),
            (Some(E::RequestTimedOut), false, Then::FailAmbiguous),
            (Some(E::NotEnoughReplicasAfterAppend), true, Then::Retry),
            (
                Some(E::NotEnoughReplicasAfterAppend),
                false,
                Then::FailAmbiguous,
            ),
            (Some(E::NetworkException), false, Then::FailAmbiguous),
            (Some(E::CorruptMessage), true, Then::Fail),
            (Some(E::InvalidRecord), true, Then::Fail),
            (Some(E::OutOfOrderSequenceNumber), true, Then::Fail),
            (Some(E::TopicAuthorizationFailed), true, Then::Fail),
            (Some(E::MessageTooLarge), true, Then::Fail),
        ];
        for (code, idempotent, expected) in table {
            let batch = batch_with_pid(if idempotent { 7 } else { -1 });
            let answer = PartitionProduceResponse {
                partition: batch.partition.clone(),
                error: code,
                error_message: None,
                base_offset: 42,
                log_append_time_ms: None,
                log_start_offset: None,
                record_errors: Vec::new(),
                current_leader: None,
            };
            let got = match request.judge(&batch, answer) {
                Verdict::Done(ack) => {
                    assert_eq!(ack.base_offset, 42);
                    Then::Done
                }
                Verdict::Retry { .. } => Then::Retry,
                Verdict::Fail(e) if e.to_string().contains("may or may not") => Then::FailAmbiguous,
                Verdict::Fail(_) => Then::Fail,
            };
            assert_eq!(got, expected, "{code:?} idempotent={idempotent}");
        }
    }

    /// A request lost after it was sent is resent only for an idempotent batch; one that never
    /// got a connection always.
    #[test]
    fn a_lost_request_is_resent_only_if_that_is_safe() {
        let request = LeaderProduce {
            options: ProduceOptions::default(),
            principal: None,
        };
        let lost = Error::Disconnected {
            broker: "b:1".into(),
            reason: "eof".into(),
        };
        let plain = batch_with_pid(-1);
        let idempotent = batch_with_pid(7);
        assert!(matches!(
            request.failed(&plain, &lost, false),
            Verdict::Retry { .. }
        ));
        assert!(matches!(
            request.failed(&idempotent, &lost, true),
            Verdict::Retry { .. }
        ));
        match request.failed(&plain, &lost, true) {
            Verdict::Fail(e) => assert!(e.to_string().contains("may or may not"), "{e}"),
            other => panic!("{other:?}"),
        }
        let fatal = Error::InvalidArgument("x".into());
        assert!(matches!(
            request.failed(&idempotent, &fatal, false),
            Verdict::Fail(_)
        ));
    }
}
