//! Exactly-once in memory: the pipeline's transactional routes against a fake target that keeps
//! Kafka's transaction rules (one producer id per transactional id, InitProducerId bumps the
//! epoch, aborts what the older epoch left open and fences it; batches and offsets become
//! visible to `read_committed` only when their transaction commits), over the fake source of
//! [`pipeline_mem`](crate::pipeline_mem). Paused time, as there.
#![allow(clippy::unwrap_used)]

use crate::common::NoPositions;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use strait_forward::observe::NoopObserver;
use strait_forward::pipeline::io::{
    FailureAction, IoError, ProduceAck, ProducerIdentity, Target, TopicLimits, Transactions,
};
use strait_forward::pipeline::{AckedBatch, CommitHook};
use strait_forward::{Compression, ExactlyOnce, Forwarder, RecordBatch, Route, Settings};
use strait_wire::TopicPartition;

use crate::pipeline_mem::{
    FakeSource, Rec, assert_same, decode, gen_rec, settings, tp, wait_until,
};

/// Where a target batch's transaction stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mark {
    Open,
    Committed,
    Aborted,
}

struct Stored {
    bytes: Bytes,
    producer_id: i64,
    mark: Mark,
}

/// The coordinator's state of one transactional id.
struct TxnId {
    producer_id: i64,
    epoch: i16,
    /// Partitions added to the open transaction.
    added: HashSet<TopicPartition>,
    inits: u32,
}

#[derive(Default)]
struct EosState {
    logs: HashMap<TopicPartition, Vec<Stored>>,
    next_offset: HashMap<TopicPartition, i64>,
    ids: HashMap<String, TxnId>,
    /// (group, target partition) -> committed offset and when it was stored.
    groups: HashMap<(String, TopicPartition), (i64, tokio::time::Instant)>,
    /// `offsets.retention.minutes` of the target, for groups without members (KIP-211): a
    /// position not stored again within it is gone.
    retention: Option<Duration>,
    /// (partition, producer id) -> (epoch, next sequence).
    sequences: HashMap<(TopicPartition, i64), (i16, i32)>,
    next_pid: i64,
    violations: Vec<String>,
}

impl EosState {
    fn end(&mut self, producer_id: i64, mark: Mark) {
        for log in self.logs.values_mut() {
            for b in log.iter_mut() {
                if b.producer_id == producer_id && b.mark == Mark::Open {
                    b.mark = mark;
                }
            }
        }
    }

    /// The id's state if `epoch` is still its current epoch; fenced otherwise.
    fn current(&mut self, id: &str, epoch: Option<i16>) -> Result<&mut TxnId, IoError> {
        match self.ids.get_mut(id) {
            Some(t) if Some(t.epoch) == epoch => Ok(t),
            Some(t) => Err(fenced(id, epoch, t.epoch)),
            None => Err(IoError::new(
                FailureAction::Fatal,
                "INVALID_TXN_STATE",
                format!("{id} was never initialized"),
            )),
        }
    }

    fn produce_one(
        &mut self,
        id: &str,
        tp: &TopicPartition,
        bytes: &Bytes,
    ) -> Result<i64, IoError> {
        let batch = RecordBatch::parse(bytes.clone()).unwrap();
        if !batch.is_transactional() {
            self.violations
                .push(format!("{tp}: a batch without the transactional bit"));
        }
        let (pid, epoch) = (batch.producer_id(), batch.producer_epoch());
        let txn = self.current(id, Some(epoch))?;
        if txn.producer_id != pid {
            return Err(fenced(id, Some(epoch), txn.epoch));
        }
        if !txn.added.contains(tp) {
            let v = format!("{tp}: produced before AddPartitionsToTxn");
            self.violations.push(v.clone());
            return Err(IoError::new(FailureAction::Fatal, "INVALID_TXN_STATE", v));
        }
        let key = (tp.clone(), pid);
        let expected = match self.sequences.get(&key) {
            Some(&(e, next)) if e == epoch => next,
            _ => 0,
        };
        if batch.base_sequence() != expected {
            let v = format!(
                "{tp}: sequence {} where {expected} was due",
                batch.base_sequence()
            );
            self.violations.push(v.clone());
            return Err(IoError::new(
                FailureAction::ProducerState,
                "OUT_OF_ORDER_SEQUENCE_NUMBER",
                v,
            ));
        }
        let count = i64::from(batch.record_count());
        self.sequences
            .insert(key, (epoch, expected + batch.record_count()));
        let next = self.next_offset.entry(tp.clone()).or_default();
        let base = *next;
        *next += count + 1; // and the marker
        self.logs.entry(tp.clone()).or_default().push(Stored {
            bytes: bytes.clone(),
            producer_id: pid,
            mark: Mark::Open,
        });
        Ok(base)
    }
}

fn fenced(id: &str, epoch: Option<i16>, current: i16) -> IoError {
    IoError::new(
        FailureAction::Fenced,
        "PRODUCER_FENCED",
        format!("{id}: epoch {epoch:?} was fenced by epoch {current}"),
    )
}

#[derive(Clone, Default)]
struct EosTarget(Arc<Mutex<EosState>>);

impl EosTarget {
    fn st(&self) -> std::sync::MutexGuard<'_, EosState> {
        self.0.lock().unwrap()
    }

    /// What a `read_committed` consumer of `tp` reads.
    fn read_committed(&self, tp: &TopicPartition) -> Vec<Rec> {
        let st = self.st();
        st.logs.get(tp).map_or(vec![], |log| {
            log.iter()
                .filter(|b| b.mark == Mark::Committed)
                .flat_map(|b| decode(&RecordBatch::parse(b.bytes.clone()).unwrap()))
                .map(|(_, r)| r)
                .collect()
        })
    }

    fn position(&self, group: &str, tp: &TopicPartition) -> Option<i64> {
        let mut st = self.st();
        let key = (group.to_string(), tp.clone());
        let (offset, stored_at) = *st.groups.get(&key)?;
        if st
            .retention
            .is_some_and(|r| tokio::time::Instant::now() >= stored_at + r)
        {
            st.groups.remove(&key);
            return None;
        }
        Some(offset)
    }

    fn inits(&self, id: &str) -> u32 {
        self.st().ids.get(id).map_or(0, |t| t.inits)
    }
}

impl Target for EosTarget {
    async fn init_producer_id(&self) -> Result<ProducerIdentity, IoError> {
        let mut st = self.st();
        st.next_pid += 1;
        Ok(ProducerIdentity {
            producer_id: st.next_pid,
            epoch: 0,
        })
    }

    async fn leader(&self, _: &TopicPartition, _: bool) -> Result<i32, IoError> {
        Ok(1)
    }

    async fn produce(
        &self,
        _node: i32,
        _lane: u16,
        batches: Vec<(TopicPartition, Bytes)>,
        transactional_id: Option<&str>,
    ) -> Result<Vec<Result<ProduceAck, IoError>>, IoError> {
        let mut st = self.st();
        let Some(id) = transactional_id else {
            st.violations
                .push("exactly-once sent a request without a transactional id".into());
            return Err(IoError::new(
                FailureAction::Fatal,
                "INVALID_REQUEST",
                "no id",
            ));
        };
        Ok(batches
            .iter()
            .map(|(tp, bytes)| {
                st.produce_one(id, tp, bytes).map(|base_offset| ProduceAck {
                    base_offset,
                    log_append_time_ms: None,
                    log_start_offset: None,
                })
            })
            .collect())
    }

    async fn topic_limits(&self, _: &str) -> Result<TopicLimits, IoError> {
        Ok(TopicLimits::default())
    }

    async fn end_offset(&self, tp: &TopicPartition) -> Result<i64, IoError> {
        Ok(self.st().next_offset.get(tp).copied().unwrap_or(0))
    }

    type Transactions = EosTxn;

    fn transactions(&self, id: &str, _: Duration) -> Result<EosTxn, IoError> {
        Ok(EosTxn {
            target: self.clone(),
            id: id.to_string(),
            epoch: None,
        })
    }

    async fn stable_positions(
        &self,
        group_id: &str,
        partitions: &[TopicPartition],
    ) -> Result<Vec<Option<i64>>, IoError> {
        Ok(partitions
            .iter()
            .map(|tp| self.position(group_id, tp))
            .collect())
    }
}

/// One route's transactional producer on the fake target.
struct EosTxn {
    target: EosTarget,
    id: String,
    epoch: Option<i16>,
}

impl EosTxn {
    fn init_now(&mut self) -> ProducerIdentity {
        let mut st = self.target.st();
        let fresh = st.next_pid + 1;
        let known = st.ids.contains_key(&self.id);
        if !known {
            st.next_pid = fresh;
        }
        let t = st.ids.entry(self.id.clone()).or_insert(TxnId {
            producer_id: fresh,
            epoch: -1,
            added: HashSet::new(),
            inits: 0,
        });
        t.epoch += 1;
        t.inits += 1;
        t.added.clear();
        let identity = ProducerIdentity {
            producer_id: t.producer_id,
            epoch: t.epoch,
        };
        // What the older epoch left open is aborted.
        st.end(identity.producer_id, Mark::Aborted);
        self.epoch = Some(identity.epoch);
        identity
    }

    fn end_now(
        &self,
        mark: Mark,
        positions: &[(TopicPartition, i64)],
        group: &str,
    ) -> Result<(), IoError> {
        let mut st = self.target.st();
        let t = st.current(&self.id, self.epoch)?;
        t.added.clear();
        let pid = t.producer_id;
        st.end(pid, mark);
        for (tp, next) in positions {
            st.groups.insert(
                (group.to_string(), tp.clone()),
                (*next, tokio::time::Instant::now()),
            );
        }
        Ok(())
    }
}

impl Transactions for EosTxn {
    async fn init(&mut self) -> Result<ProducerIdentity, IoError> {
        Ok(self.init_now())
    }

    async fn add_partition(
        &mut self,
        partition: &TopicPartition,
        _group_id: &str,
    ) -> Result<(), IoError> {
        let mut st = self.target.st();
        st.current(&self.id, self.epoch)?
            .added
            .insert(partition.clone());
        Ok(())
    }

    async fn commit(
        &mut self,
        group_id: &str,
        positions: &[(TopicPartition, i64)],
    ) -> Result<(), IoError> {
        self.end_now(Mark::Committed, positions, group_id)
    }

    async fn abort(&mut self) -> Result<(), IoError> {
        self.end_now(Mark::Aborted, &[], "")
    }
}

type EosForwarder = Forwarder<FakeSource, EosTarget, NoPositions>;

fn eos_settings(fenced_backoff: Duration) -> Settings {
    let mut eos = ExactlyOnce::new("mirror");
    eos.fenced_backoff = fenced_backoff;
    let mut s = settings();
    s.exactly_once = Some(eos);
    s
}

async fn instance(src: &FakeSource, dst: &EosTarget, s: &Settings) -> EosForwarder {
    let fwd = Forwarder::new(
        src.clone(),
        dst.clone(),
        NoPositions,
        s.clone(),
        Arc::new(NoopObserver),
    )
    .await
    .unwrap();
    fwd.assign(vec![Route {
        source: tp("src", 0),
        target: tp("dst", 0),
    }])
    .await
    .unwrap();
    fwd
}

/// Issue 28 item 7: two instances own the same partition (the source group's coordinator is
/// unreachable from A, so A never learns that the partition went to B; the target is reachable
/// from both). B's init fences A; B mirrors and commits a range while A waits out the fence;
/// then A takes its transactional id back (fencing B). A must resume from the position B
/// committed, not from its own older one: otherwise it writes B's range again, and both copies
/// are committed.
#[tokio::test(start_paused = true)]
async fn a_fenced_route_resumes_from_the_position_another_owner_committed() {
    let (src, dst) = (FakeSource::default(), EosTarget::default());
    let (source, target) = (tp("src", 0), tp("dst", 0));
    let id = "mirror-src-0";
    let add = |tag: &str| {
        src.with(&source, |l| {
            l.data(
                Compression::None,
                (0..10)
                    .map(|i| gen_rec(tag, i, 1_700_000_000_000))
                    .collect(),
            );
            l.end
        })
    };
    let s = eos_settings(Duration::from_secs(30));

    let end = add("first");
    let a = instance(&src, &dst, &s).await;
    wait_until("A committed the first range", || {
        dst.position("mirror", &target) == Some(end)
    })
    .await;

    // B takes the partition over; A is not told.
    let b = instance(&src, &dst, &s).await;
    wait_until("B initialized", || dst.inits(id) == 2).await;
    // A is fenced at its next transaction; B mirrors and commits the range.
    let end = add("second");
    wait_until("B committed the second range", || {
        dst.position("mirror", &target) == Some(end)
    })
    .await;
    // A's fence wait runs out: it takes the id back (fencing B) and resumes.
    wait_until("A took its id back", || dst.inits(id) == 3).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let end = add("third");
    wait_until("the third range committed", || {
        dst.position("mirror", &target) == Some(end)
    })
    .await;
    // Whatever ping-pong the two still play ends here: both stop, nothing open.
    tokio::time::sleep(Duration::from_secs(120)).await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();

    let want: Vec<Rec> = src.with(&source, |l| {
        l.expected.iter().map(|(_, r)| r.clone()).collect()
    });
    assert_same(
        "read_committed target partition",
        &want,
        &dst.read_committed(&target),
    );
    let violations = dst.st().violations.clone();
    assert!(violations.is_empty(), "{violations:#?}");
}

/// Issue 28 item 2: the positions group on the target has no members, so the broker drops a
/// position `offsets.retention.minutes` after it was last stored. An idle partition stores its
/// position again every `position_refresh_interval`; a restart after a long idle time resumes
/// where it was: nothing is mirrored twice.
#[tokio::test(start_paused = true)]
async fn an_idle_position_outlives_the_offsets_retention() {
    let (src, dst) = (FakeSource::default(), EosTarget::default());
    let (source, target) = (tp("src", 0), tp("dst", 0));
    dst.st().retention = Some(Duration::from_secs(600));
    let mut s = eos_settings(Duration::from_secs(30));
    if let Some(eos) = s.exactly_once.as_mut() {
        eos.position_refresh_interval = Duration::from_secs(120);
    }
    let end = src.with(&source, |l| {
        l.data(
            Compression::None,
            (0..10)
                .map(|i| gen_rec("idle", i, 1_700_000_000_000))
                .collect(),
        );
        l.end
    });
    let a = instance(&src, &dst, &s).await;
    wait_until("the records committed", || {
        dst.position("mirror", &target) == Some(end)
    })
    .await;
    // Idle for six retentions.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(
        dst.position("mirror", &target),
        Some(end),
        "position expired"
    );
    a.shutdown().await.unwrap();
    // A restart reads it back (Settings::start is earliest: a lost position re-mirrors all).
    let b = instance(&src, &dst, &s).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    b.shutdown().await.unwrap();
    assert!(b.failures().is_empty(), "{:?}", b.failures());
    let want: Vec<Rec> = src.with(&source, |l| {
        l.expected.iter().map(|(_, r)| r.clone()).collect()
    });
    assert_same("read_committed", &want, &dst.read_committed(&target));
}

/// Issue 28 item 2: a mirror stopped longer than the target's offset retention loses its
/// positions. It must not start such a partition from `Settings::start` (earliest here: every
/// record twice): the partition stops with an error that says how to set the position; a
/// partition never mirrored into still starts from `start`.
#[tokio::test(start_paused = true)]
async fn a_lost_position_stops_the_partition_instead_of_restarting_it() {
    let (src, dst) = (FakeSource::default(), EosTarget::default());
    let (source, target) = (tp("src", 0), tp("dst", 0));
    dst.st().retention = Some(Duration::from_secs(600));
    let s = eos_settings(Duration::from_secs(30));
    let end = src.with(&source, |l| {
        l.data(
            Compression::None,
            (0..10)
                .map(|i| gen_rec("lost", i, 1_700_000_000_000))
                .collect(),
        );
        l.end
    });
    let a = instance(&src, &dst, &s).await;
    wait_until("the records committed", || {
        dst.position("mirror", &target) == Some(end)
    })
    .await;
    a.shutdown().await.unwrap();
    // Stopped for six retentions: the position is gone.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(dst.position("mirror", &target), None);
    let b = instance(&src, &dst, &s).await;
    wait_until("the partition stopped", || !b.failures().is_empty()).await;
    let failure = b.failures()[0].error.to_string();
    assert!(
        failure.contains("position_missing") || failure.contains("holds no position"),
        "{failure}"
    );
    assert!(failure.contains("--reset-offsets"), "{failure}");
    b.shutdown().await.unwrap();
    let want: Vec<Rec> = src.with(&source, |l| {
        l.expected.iter().map(|(_, r)| r.clone()).collect()
    });
    assert_same("read_committed", &want, &dst.read_committed(&target));
}

/// A route with no stored position stores its start position before its first batch: a crash
/// inside a partition's very first transaction leaves aborted data in the target partition, and
/// without the stored position the next instance would take that for a lost position and stop
/// the partition.
#[tokio::test(start_paused = true)]
async fn a_crash_in_the_first_transaction_does_not_stop_the_partition() {
    let (src, dst) = (FakeSource::default(), EosTarget::default());
    let (source, target) = (tp("src", 0), tp("dst", 0));
    let mut s = eos_settings(Duration::from_secs(30));
    if let Some(eos) = s.exactly_once.as_mut() {
        eos.transaction_interval = Duration::from_secs(20);
    }
    src.with(&source, |l| {
        l.data(
            Compression::None,
            (0..10)
                .map(|i| gen_rec("crash", i, 1_700_000_000_000))
                .collect(),
        )
    });
    let a = instance(&src, &dst, &s).await;
    wait_until("a batch in the open transaction", || {
        dst.st().logs.get(&target).is_some_and(|l| !l.is_empty())
    })
    .await;
    assert_eq!(
        dst.position("mirror", &target),
        Some(0),
        "the start position is stored before the first batch"
    );
    // A crash: nothing commits; the next owner's init aborts the open transaction.
    drop(a);
    let b = instance(&src, &dst, &s).await;
    let end = src.with(&source, |l| l.end);
    wait_until("the records committed", || {
        dst.position("mirror", &target) == Some(end)
    })
    .await;
    b.shutdown().await.unwrap();
    assert!(b.failures().is_empty(), "{:?}", b.failures()[0].error);
    let want: Vec<Rec> = src.with(&source, |l| {
        l.expected.iter().map(|(_, r)| r.clone()).collect()
    });
    assert_same("read_committed", &want, &dst.read_committed(&target));
}

/// Exactly-once, the commit hook's order: every acknowledged batch is heard of before the
/// transaction that makes it visible commits, and every position before its transaction stores
/// it on the target, never again after (the source group's monitoring copy is not announced).
struct TxnLedger {
    dst: EosTarget,
    src: FakeSource,
    heard: Mutex<HashSet<i64>>,
    announced: Mutex<Vec<i64>>,
    problems: Mutex<Vec<String>>,
}

impl CommitHook for TxnLedger {
    fn acknowledged(&self, batch: &AckedBatch<'_>) {
        let stored = self.dst.position("mirror", &tp("dst", 0));
        if stored.is_some_and(|p| p > batch.source_last_offset) {
            self.problems.lock().unwrap().push(format!(
                "{}..={} heard of after the transaction storing {stored:?} committed",
                batch.source_base_offset, batch.source_last_offset
            ));
        }
        let mut heard = self.heard.lock().unwrap();
        heard.extend((0..batch.records).filter_map(|d| batch.source_offset_of(d)));
    }

    fn committing(&self, source: &TopicPartition, next: i64) {
        self.announced.lock().unwrap().push(next);
        let stored = self.dst.position("mirror", &tp("dst", 0));
        if stored.is_some_and(|p| p >= next) {
            self.problems.lock().unwrap().push(format!(
                "{source}@{next} announced after its transaction stored it"
            ));
        }
        let heard = self.heard.lock().unwrap();
        let unheard: Vec<i64> = self.src.with(source, |l| {
            l.expected
                .iter()
                .map(|(o, _)| *o)
                .filter(|o| *o < next && !heard.contains(o))
                .take(5)
                .collect()
        });
        if !unheard.is_empty() {
            self.problems.lock().unwrap().push(format!(
                "{source}@{next} announced before the hook heard of {unheard:?}"
            ));
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_commit_hook_hears_each_transaction_before_it_commits() {
    let (src, dst) = (FakeSource::default(), EosTarget::default());
    let (source, target) = (tp("src", 0), tp("dst", 0));
    let ledger = Arc::new(TxnLedger {
        dst: dst.clone(),
        src: src.clone(),
        heard: Mutex::default(),
        announced: Mutex::default(),
        problems: Mutex::default(),
    });
    let s = eos_settings(Duration::from_secs(30));
    let fwd = Forwarder::with_commit_hook(
        src.clone(),
        dst.clone(),
        NoPositions,
        s,
        Arc::new(NoopObserver),
        ledger.clone(),
    )
    .await
    .unwrap();
    fwd.assign(vec![Route {
        source: source.clone(),
        target: target.clone(),
    }])
    .await
    .unwrap();
    let mut ends = Vec::new();
    for round in 0..3 {
        let end = src.with(&source, |l| {
            l.data(
                Compression::None,
                (0..10)
                    .map(|i| gen_rec(&format!("r{round}"), i, 1_700_000_000_000))
                    .collect(),
            );
            l.end
        });
        wait_until("the range committed", || {
            dst.position("mirror", &target) == Some(end)
        })
        .await;
        ends.push(end);
        // Past a commit interval: the source group's copy is committed too (not announced).
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    fwd.shutdown().await.unwrap();
    let problems = ledger.problems.lock().unwrap().clone();
    assert!(
        problems.is_empty(),
        "commit hook out of step: {problems:#?}"
    );
    let announced = ledger.announced.lock().unwrap().clone();
    for end in ends {
        assert!(
            announced.contains(&end),
            "position {end} committed unannounced: {announced:?}"
        );
    }
}
