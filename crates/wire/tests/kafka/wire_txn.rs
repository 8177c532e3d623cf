//! strait-wire's transactional producer against one real Kafka 4.x broker (mTLS with the
//! StandardAuthorizer, so that ACLs are enforced; one cluster for the file), checked with
//! Kafka's own Java tools:
//!
//! 1. commit: batches to two partitions and a TxnOffsetCommit of source positions for a group,
//!    in one transaction; a `read_committed` Java consumer sees the records, and
//!    `kafka-consumer-groups --describe` shows the group's offsets;
//! 2. abort: the records are in the log but a `read_committed` consumer never sees them, and
//!    the group's offsets stay as they were;
//! 3. fencing: a second producer with the same transactional id initializes while the first has
//!    a transaction open; the first one's commit fails as fenced, its records never become
//!    visible, and the second one commits;
//! 4. a principal without an ACL on its transactional id gets the error naming the ACL to add,
//!    and succeeds once it is added;
//! 5. offsets of a topic the target does not have are refused (UNKNOWN_TOPIC_OR_PARTITION): a
//!    mirror must commit positions under the target's topic names.
//!
//! Run: `cargo test -p strait-wire --test kafka -- wire_txn:: --nocapture`
#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use strait_testkit::batch::{Batch, TRANSACTIONAL};
use strait_testkit::{AdminOp, Cluster, ConsumeOptions, Listener, Resource};
use strait_wire::group::Generation;
use strait_wire::offset_commit::{CommitOffset, GroupOffsets};
use strait_wire::{
    Client, ErrorClass, ProduceBatch, ProducerIdentity, TransactionalProducer, TxnState,
};

const OUT: &str = "txn-out";
const SRC: &str = "txn-src";
const GROUP: &str = "wire-txn-group";
const TIMEOUT: Duration = Duration::from_secs(60);

/// One producer's next sequence per partition of `OUT` (partitions 0 and 1).
struct Seqs {
    identity: ProducerIdentity,
    next: [i32; 2],
}

impl Seqs {
    fn of(p: &TransactionalProducer) -> Seqs {
        Seqs {
            identity: p.identity().unwrap(),
            next: [0, 0],
        }
    }

    /// A transactional batch of `values` for partition `partition` of `OUT`, stamped as the
    /// forwarder stamps them: the producer's id and epoch, the partition's next sequence.
    fn batch(&mut self, partition: i32, values: &[&str]) -> ProduceBatch {
        let seq = &mut self.next[partition as usize];
        let mut b = Batch::of_values(0, now_ms(), values);
        b.attributes = TRANSACTIONAL;
        b.producer_id = self.identity.producer_id;
        b.producer_epoch = self.identity.epoch;
        b.base_sequence = *seq;
        *seq += values.len() as i32;
        ProduceBatch::new(tp(OUT, partition), Bytes::from(b.encode()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_on_a_real_broker() {
    let cluster = blocking(|| {
        let c = Cluster::builder("wire-txn")
            .mtls()
            .user("alice", "alice-secret")
            .start()
            .unwrap();
        c.admin(&[
            AdminOp::topic(OUT, 2, 1),
            AdminOp::topic(SRC, 2, 1),
            AdminOp::allow(
                "User:alice",
                Resource::Topic(OUT.into()),
                &["Write", "Describe"],
            ),
        ])
        .unwrap();
        Arc::new(c)
    })
    .await;
    let client = connect(props(&cluster, Listener::Ssl, None)).await.unwrap();

    let mut committed = commit(&client).await;
    let (aborted, more) = abort(&client).await;
    committed.extend(more);
    let (zombie, more) = fencing(&client).await;
    committed.extend(more);

    // Everything that was aborted or fenced is in the log (read_uncommitted, markers
    // skipped): invisible only to read_committed.
    for p in 0..2 {
        let tag = format!("-p{p}-");
        let written: Vec<&String> = committed
            .iter()
            .chain(&aborted)
            .chain(&zombie)
            .filter(|v| v.contains(&tag))
            .collect();
        let log: Vec<String> = fetch_all(&client, &tp(OUT, p), 0, written.len())
            .await
            .into_iter()
            .map(|r| String::from_utf8(r.value.unwrap()).unwrap())
            .collect();
        assert_eq!(log.len(), written.len(), "partition {p}: {log:?}");
        for v in written {
            assert!(log.contains(v), "{v} is not in the log: {log:?}");
        }
    }

    // Kafka's own consumer, read_committed: exactly the committed records, in order per
    // partition. Had the aborted or fenced ones been visible, they would be among the first
    // `committed.len()` records it reads.
    let seen = java_read_committed(&cluster, committed.len()).await;
    for p in 0..2 {
        let tag = format!("-p{p}-");
        let want: Vec<&String> = committed.iter().filter(|v| v.contains(&tag)).collect();
        let got: Vec<&String> = seen.iter().filter(|v| v.contains(&tag)).collect();
        assert_eq!(got, want, "partition {p}, read_committed");
    }
    assert_eq!(seen.len(), committed.len(), "{seen:?}");

    // The committed offsets, as Kafka's own tool reports them.
    java_group_offsets(&cluster, &[(0, 10), (1, 20)]).await;

    offsets_of_a_topic_the_target_lacks(&client).await;
    denied_transactional_id(&cluster).await;
}

/// 5. The group coordinator refuses the offsets of a topic the target cluster does not have
///    (measured on Kafka 4.3: UNKNOWN_TOPIC_OR_PARTITION, which stays retriable), so a mirror
///    must commit its positions under the target's topic names (or keep them in a topic of its
///    own). The producer survives it: the transaction can be aborted and the next one works.
async fn offsets_of_a_topic_the_target_lacks(client: &Client) {
    let group = "wire-txn-source-only";
    let mut p = client
        .transactional_producer("wire-txn-d", TIMEOUT)
        .await
        .unwrap()
        // The coordinator keeps answering the same: do not wait the default minute.
        .with_retry_budget(Duration::from_secs(2));
    p.begin().unwrap();
    let e = p
        .send_offsets(
            group,
            &Generation::simple(),
            &[CommitOffset::new(tp("only-on-source", 3), 5)],
        )
        .await
        .unwrap_err();
    eprintln!("offsets of a topic missing on the target: {e}");
    assert_eq!(
        e.code(),
        Some(strait_wire::ResponseError::UnknownTopicOrPartition),
        "{e}"
    );
    assert!(e.to_string().contains("only-on-source-3"), "{e}");
    // Retriable: the transaction is still open, with the offsets pending.
    assert_eq!(p.state(), TxnState::InTransaction);
    assert!(
        p.commit().await.is_err(),
        "commit with offsets not committed"
    );
    p.abort().await.unwrap();
    assert_eq!(p.state(), TxnState::Ready);
    p.begin().unwrap();
    p.send_offsets(
        group,
        &Generation::simple(),
        &[CommitOffset::new(tp(SRC, 1), 7)],
    )
    .await
    .unwrap();
    p.commit().await.unwrap();
    let offsets = GroupOffsets::new(client, group)
        .fetch(&[tp("only-on-source", 3), tp(SRC, 1)])
        .await
        .unwrap();
    let got: Vec<Option<i64>> = offsets
        .values()
        .map(|o| o.as_ref().map(|c| c.offset))
        .collect();
    assert_eq!(got, [None, Some(7)], "{offsets:?}");
}

/// 1. One transaction: batches to both partitions (two to partition 0) and the source offsets.
async fn commit(client: &Client) -> Vec<String> {
    let mut p = client
        .transactional_producer("wire-txn-a", TIMEOUT)
        .await
        .unwrap();
    assert_eq!(p.state(), TxnState::Ready);
    let mut seqs = Seqs::of(&p);
    p.begin().unwrap();
    let acks = p
        .produce(vec![
            seqs.batch(0, &["c1-p0-0", "c1-p0-1", "c1-p0-2"]),
            seqs.batch(1, &["c1-p1-0", "c1-p1-1"]),
        ])
        .await
        .unwrap();
    assert_eq!(acks.len(), 2);
    p.produce(vec![seqs.batch(0, &["c1-p0-3"])]).await.unwrap();
    let mut added: Vec<String> = p.partitions().map(ToString::to_string).collect();
    added.sort();
    assert_eq!(added, ["txn-out-0", "txn-out-1"]);
    p.send_offsets(
        GROUP,
        &Generation::simple(),
        &[
            CommitOffset::new(tp(SRC, 0), 10),
            CommitOffset::new(tp(SRC, 1), 20),
        ],
    )
    .await
    .unwrap();
    p.commit().await.unwrap();
    assert_eq!(p.state(), TxnState::Ready);
    let offsets = GroupOffsets::new(client, GROUP)
        .fetch(&[tp(SRC, 0), tp(SRC, 1)])
        .await
        .unwrap();
    let got: Vec<Option<i64>> = offsets
        .values()
        .map(|o| o.as_ref().map(|c| c.offset))
        .collect();
    assert_eq!(got, [Some(10), Some(20)]);
    [
        "c1-p0-0", "c1-p0-1", "c1-p0-2", "c1-p1-0", "c1-p1-1", "c1-p0-3",
    ]
    .map(String::from)
    .to_vec()
}

/// 2. An aborted transaction, then a committed one with the same producer (the sequences carry
///    on across the abort: the aborted batches are in the log).
async fn abort(client: &Client) -> (Vec<String>, Vec<String>) {
    let mut p = client
        .transactional_producer("wire-txn-b", TIMEOUT)
        .await
        .unwrap();
    let mut seqs = Seqs::of(&p);
    p.begin().unwrap();
    p.produce(vec![
        seqs.batch(0, &["ab-p0-0", "ab-p0-1"]),
        seqs.batch(1, &["ab-p1-0"]),
    ])
    .await
    .unwrap();
    p.send_offsets(
        GROUP,
        &Generation::simple(),
        &[CommitOffset::new(tp(SRC, 0), 999)],
    )
    .await
    .unwrap();
    p.abort().await.unwrap();
    assert_eq!(p.state(), TxnState::Ready);
    let offsets = GroupOffsets::new(client, GROUP)
        .fetch(&[tp(SRC, 0)])
        .await
        .unwrap();
    assert_eq!(
        offsets.values().next().unwrap().as_ref().map(|c| c.offset),
        Some(10),
        "an aborted TxnOffsetCommit must not change the group's offset"
    );

    p.begin().unwrap();
    p.produce(vec![
        seqs.batch(0, &["c2-p0-0"]),
        seqs.batch(1, &["c2-p1-0"]),
    ])
    .await
    .unwrap();
    p.commit().await.unwrap();
    (
        ["ab-p0-0", "ab-p0-1", "ab-p1-0"].map(String::from).to_vec(),
        ["c2-p0-0", "c2-p1-0"].map(String::from).to_vec(),
    )
}

/// 3. A second producer with the same transactional id fences the first mid-transaction.
async fn fencing(client: &Client) -> (Vec<String>, Vec<String>) {
    let mut old = client
        .transactional_producer("wire-txn-c", TIMEOUT)
        .await
        .unwrap();
    let mut old_seqs = Seqs::of(&old);
    old.begin().unwrap();
    old.produce(vec![
        old_seqs.batch(0, &["zombie-p0-0"]),
        old_seqs.batch(1, &["zombie-p1-0"]),
    ])
    .await
    .unwrap();

    // The new instance: InitProducerId aborts the old one's open transaction and bumps the
    // epoch.
    let mut new = client
        .transactional_producer("wire-txn-c", TIMEOUT)
        .await
        .unwrap();
    let (o, n) = (old.identity().unwrap(), new.identity().unwrap());
    assert_eq!(n.producer_id, o.producer_id);
    assert!(n.epoch > o.epoch, "{n:?} after {o:?}");

    let e = old.commit().await.unwrap_err();
    eprintln!("the zombie's commit: {e}");
    assert_eq!(e.class(), ErrorClass::Fenced, "{e}");
    assert!(
        e.to_string()
            .contains("newer producer with the same transactional id"),
        "{e}"
    );
    assert_eq!(old.state(), TxnState::Fatal);
    // Whatever it tries next fails the same way, without reaching a broker.
    assert_eq!(old.begin().unwrap_err().class(), ErrorClass::Fenced);

    let mut seqs = Seqs::of(&new);
    new.begin().unwrap();
    new.produce(vec![
        seqs.batch(0, &["new-p0-0"]),
        seqs.batch(1, &["new-p1-0"]),
    ])
    .await
    .unwrap();
    new.commit().await.unwrap();
    (
        ["zombie-p0-0", "zombie-p1-0"].map(String::from).to_vec(),
        ["new-p0-0", "new-p1-0"].map(String::from).to_vec(),
    )
}

/// 4. No ACL on the transactional id: the error says which one to add; with it, init works.
async fn denied_transactional_id(cluster: &Arc<Cluster>) {
    let alice = connect(props(cluster, Listener::Ssl, Some("alice")))
        .await
        .unwrap();
    let e = alice
        .transactional_producer("alice-txn", TIMEOUT)
        .await
        .unwrap_err();
    eprintln!("denied: {e}");
    assert_eq!(e.class(), ErrorClass::Denied, "{e}");
    let m = e.to_string();
    assert!(m.contains("TRANSACTIONAL_ID_AUTHORIZATION_FAILED"), "{m}");
    assert!(
        m.contains("--operation Write --transactional-id alice-txn"),
        "{m}"
    );
    let c = cluster.clone();
    blocking(move || {
        c.add_acls(
            "User:alice",
            Resource::TransactionalId("alice-txn".into()),
            &["Write"],
        )
        .unwrap()
    })
    .await;
    let p = alice
        .transactional_producer("alice-txn", TIMEOUT)
        .await
        .unwrap();
    assert_eq!(p.state(), TxnState::Ready);
}

/// What Kafka's console consumer reads from `OUT` with isolation.level=read_committed.
async fn java_read_committed(cluster: &Arc<Cluster>, want: usize) -> Vec<String> {
    let c = cluster.clone();
    blocking(move || {
        let mut props = c.client_properties(Listener::Ssl, None);
        props.push(("isolation.level".into(), "read_committed".into()));
        c.console_consume_with(
            OUT,
            want,
            &props,
            &ConsumeOptions::default().timeout(Duration::from_secs(30)),
        )
        .unwrap()
    })
    .await
}

/// Checks `kafka-consumer-groups --describe --offsets` lists `want` (partition, offset) of SRC
/// for GROUP.
async fn java_group_offsets(cluster: &Arc<Cluster>, want: &[(i32, i64)]) {
    let c = cluster.clone();
    let out = blocking(move || {
        let config = c.write_java_client_config(Listener::Ssl, None).unwrap();
        let config = config.display().to_string();
        let bootstrap = c.bootstrap();
        c.java_tool(
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
            &[
                "--bootstrap-server",
                &bootstrap,
                "--command-config",
                &config,
                "--describe",
                "--offsets",
                "--group",
                GROUP,
            ],
        )
        .unwrap()
    })
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("kafka-consumer-groups:\n{stdout}");
    for (partition, offset) in want {
        let found = stdout.lines().any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() >= 4
                && cols[0] == GROUP
                && cols[1] == SRC
                && cols[2] == partition.to_string()
                && cols[3] == offset.to_string()
        });
        assert!(
            found,
            "no committed offset {offset} for {SRC}-{partition}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
