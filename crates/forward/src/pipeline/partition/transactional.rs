//! Exactly-once, the transactional driver of a route: its transactional id initialized
//! (fencing the previous owner), its start read from the target, transactions joined and
//! committed (with the commit hook and the position store's gate first), aborted and redone
//! after an abortable error, waited out when fenced or denied. The produce side
//! ([`produce_loop`](super::produce_loop)) decides when, through the route's [`Cycle`].

// The partition's shared types and helpers (Shared, Leg, Route, retry...).
use super::*;

/// Exactly-once: a route's transactional producer and its commit cycle.
pub(crate) struct RouteTxn<X> {
    /// The route's transactional id, carried by each of its Produce requests.
    pub(super) id: Arc<str>,
    txn: X,
    pub(super) cycle: Cycle,
    group_id: String,
    /// A transaction call the target refuses for lack of an ACL (TxnOffsetCommit without Read
    /// on the target topic or group): reported, waited out and cleared at the next commit.
    pub(super) denial: Retry,
    /// How long the open transaction's AddPartitionsToTxn took (retries included), for the
    /// commit's timings.
    pub(super) added_in: std::time::Duration,
}

/// Exactly-once: runs the route in transactions. A transaction that cannot commit is aborted
/// and its work redone from the last committed position under a new epoch; a fenced route
/// waits (another instance owns the partition now, and the group revokes it here), then takes
/// its transactional id back.
pub(super) async fn run_transactional<S: Source, T: Target>(
    leg: &Leg<'_, S, T>,
    eos: &ExactlyOnce,
) -> Result<(), Error> {
    let (shared, route, stop) = (leg.shared, leg.route, leg.stop);
    let id: Arc<str> = Arc::from(eos.transactional_id(&route.source));
    let producer = shared
        .target
        .transactions(&id, eos.transaction_timeout)
        .map_err(Error::Io)?;
    let mut txn = RouteTxn {
        id: id.clone(),
        txn: producer,
        cycle: Cycle::new(eos.transaction_interval, eos.transaction_max_bytes, -1),
        group_id: eos.group_id.clone(),
        denial: Retry::denials(),
        added_in: std::time::Duration::ZERO,
    };
    // Known after the first initialization: the position this route's last transaction
    // committed (or where it started).
    let mut known: Option<i64> = None;
    loop {
        let identity = match init_transactions(leg, &mut txn.txn).await {
            Ok(identity) => identity,
            Err(Error::Stopped) => return Ok(()),
            Err(e) => return Err(e),
        };
        // Read only now: the initialization aborted what a previous owner left open, whose
        // pending offsets would otherwise hold the read (UNSTABLE_OFFSET_COMMIT) until the
        // coordinator times that transaction out. Read again after every re-initialization,
        // never taken from `known`: while this route was fenced another owner may have
        // committed further (it cannot see the source group's revoke when that coordinator is
        // unreachable), and resuming from our own older position would commit its range twice.
        let (start, stored) = match transactional_start(leg, eos, known).await {
            Ok(start) => start,
            Err(Error::Stopped) => return Ok(()),
            Err(e) => return Err(e),
        };
        if known.is_none() {
            leg.started(start);
        } else {
            leg.position.ackd.store(start, Ordering::Release);
        }
        tracing::debug!(partition = %route.source, transactional_id = %id,
            producer_id = identity.producer_id, epoch = identity.epoch, start, "transactions initialized");
        let cycle = Cycle::new(eos.transaction_interval, eos.transaction_max_bytes, start)
            .refreshing(eos.position_refresh_interval, now());
        txn.cycle = if stored { cycle } else { cycle.storing_first() };
        let (result, _) = leg
            .run(
                start,
                ProducerSeq::fresh_transactional(identity),
                Some(&mut txn),
            )
            .await;
        let Err(e) = result else { return Ok(()) };
        // Nothing of the open transaction may become visible: abort it (a fenced producer's
        // is aborted by whoever fenced it).
        let aborted = Box::pin(txn.txn.abort()).await;
        let committed = txn.cycle.committed_position();
        known = Some(committed);
        leg.position.ackd.store(committed, Ordering::Release);
        let action = failure_action(&e);
        let fenced = action == Some(FailureAction::Fenced)
            || matches!(&aborted, Err(a) if a.action == FailureAction::Fenced);
        if stop.is_cancelled() {
            return Ok(());
        }
        if fenced {
            tracing::warn!(partition = %route.source, transactional_id = %id, error = %e,
                "fenced: another producer with this transactional id took over (another instance \
                 owns the partition now, or the transaction outlived the transaction timeout); \
                 nothing of the open transaction becomes visible; taking the id back in {:?} \
                 unless the partition is revoked before", eos.fenced_backoff);
            tokio::select! {
                () = tokio::time::sleep(eos.fenced_backoff) => {}
                _ = stop.cancelled() => return Ok(()),
            }
        } else if matches!(action, Some(FailureAction::Abortable)) {
            tracing::warn!(partition = %route.source, transactional_id = %id, error = %e,
                restart = committed, "transaction aborted; redoing it from the last committed position");
        } else if let Some(io) = io_error(&e).filter(|io| io.action == FailureAction::Denied) {
            // The open transaction is aborted; once the grant exists the work is redone from
            // the last committed position, as after an abortable error.
            let blocked: Blocked<'_> = Some((shared.observer.as_ref(), &route.source));
            if txn
                .denial
                .wait(io.clone(), blocked, |_, _| {}, stop)
                .await
                .is_err()
            {
                return Ok(());
            }
        } else {
            return Err(e);
        }
    }
}

/// Exactly-once: where the route starts: the position the transactions of whoever owned the
/// partition last stored on the target; when there is none, `known` (this route's own last
/// committed position, if it ran before), else the start policy's. And whether the target
/// holds it (if not, the route stores it before its first batch).
async fn transactional_start<S: Source, T: Target>(
    leg: &Leg<'_, S, T>,
    eos: &ExactlyOnce,
    known: Option<i64>,
) -> Result<(i64, bool), Error> {
    let (shared, route) = (leg.shared, leg.route);
    let targets = std::slice::from_ref(&route.target);
    let stored = retry(shared, &route.target, leg.stop, || {
        shared.target.stable_positions(&eos.group_id, targets)
    })
    .await?;
    match (stored.first().copied().flatten(), known) {
        (Some(position), _) => return Ok((position, true)),
        (None, Some(position)) => return Ok((position, false)),
        (None, None) => {}
    }
    // No position: `start` is right only for a partition nobody mirrored into yet. A route
    // stores its start position before its first batch, so a target partition that holds
    // anything lost its position (expired while the mirror was stopped longer than the
    // target's offsets.retention.minutes, or deleted): starting over from `start` would mirror
    // records twice (earliest) or skip some (latest).
    let end = retry(shared, &route.target, leg.stop, || {
        shared.target.end_offset(&route.target)
    })
    .await?;
    if end > 0 {
        return Err(Error::Target {
            partition: route.target.to_string(),
            detail: position_missing(eos, route, end),
        });
    }
    let start = resolve_start(shared, &route.source, shared.settings.start, leg.stop).await?;
    Ok((start, false))
}

/// Exactly-once: the target partition holds `end` offsets but its position in the target group
/// is gone. What happened and how to set the position by hand.
fn position_missing(eos: &ExactlyOnce, route: &Route, end: i64) -> IoError {
    let (group, target) = (&eos.group_id, &route.target);
    IoError::new(
        FailureAction::Fatal,
        "position_missing",
        format!(
            "exactly-once: the target group '{group}' holds no position for {target}, but the \
             target partition already holds {end} offsets (mirrored before: the position expired \
             after offsets.retention.minutes on the target while the mirror was stopped, or it was \
             deleted); starting from mirror.start would mirror records twice or skip some, so \
             partition {source} stops. Store the next source offset to mirror on the target, then \
             restart: kafka-consumer-groups.sh --bootstrap-server <target> --group {group} \
             --topic {topic}:{partition} --reset-offsets --to-offset <next source offset> \
             --execute (the mirror's group on the source cluster shows a recent, never too high, \
             offset for {source}; `strait failover` translation and the offset-syncs topic know \
             the last mirrored one)",
            source = route.source,
            topic = target.topic(),
            partition = target.partition(),
        ),
    )
}

/// The pipeline action behind a partition's error, if it came from a cluster.
fn failure_action(e: &Error) -> Option<FailureAction> {
    io_error(e).map(|io| io.action)
}

/// The cluster's error inside `e`, if it is one.
fn io_error(e: &Error) -> Option<&IoError> {
    match e {
        Error::Io(io) | Error::Target { detail: io, .. } => Some(io),
        _ => None,
    }
}

/// Initializes the route's transactional id: retried while retriable, waited out while denied.
async fn init_transactions<S: Source, T: Target>(
    leg: &Leg<'_, S, T>,
    txn: &mut T::Transactions,
) -> Result<ProducerIdentity, Error> {
    let mut retry = target_retry(leg.shared);
    loop {
        match Box::pin(txn.init()).await {
            Ok(identity) => {
                retry.succeeded(Some((leg.shared.observer.as_ref(), &leg.route.source)));
                return Ok(identity);
            }
            Err(e) => {
                let what = "initializing the transactional producer";
                target_wait(&mut retry, leg.shared, leg.route, what, e, leg.stop).await?;
            }
        }
    }
}

/// Adds the route's target partition to its open transaction (opening one), retried while
/// retriable and waited out while denied.
pub(super) async fn join_transaction<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    txn: &mut RouteTxn<T::Transactions>,
) -> Result<(), Error> {
    let started = now();
    let group = &txn.group_id;
    transaction_call(shared, route, &mut txn.txn, TxnOp::Add { group }).await?;
    let added = now();
    txn.added_in = added.saturating_duration_since(started);
    txn.cycle.added(added);
    Ok(())
}

/// Stores `next` in the transaction and commits it.
pub(super) async fn commit_transaction<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    txn: &mut RouteTxn<T::Transactions>,
    next: i64,
) -> Result<(), Error> {
    let group = &txn.group_id;
    transaction_call(shared, route, &mut txn.txn, TxnOp::Commit { group, next }).await
}

/// A transaction operation of a route.
#[derive(Clone, Copy)]
enum TxnOp<'a> {
    /// Add the route's target partition (opening a transaction), and `group`, where the
    /// commit stores the position.
    Add { group: &'a str },
    /// Store `next` (the next source offset) as the target partition's position in `group`
    /// and commit.
    Commit { group: &'a str, next: i64 },
}

/// One transaction operation, retried (the producer keeps the request pending) while
/// retriable; denied, abortable and fenced errors end the run (a refused AddPartitionsToTxn or
/// TxnOffsetCommit leaves the transaction to abort: [`run_transactional`] aborts it, waits a
/// denial out and redoes the work).
async fn transaction_call<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    txn: &mut T::Transactions,
    op: TxnOp<'_>,
) -> Result<(), Error> {
    let what = match op {
        TxnOp::Add { .. } => "adding the partition to the transaction",
        TxnOp::Commit { .. } => "committing the transaction",
    };
    // Not cancellable by `stop`: a stopping route still commits what it has (the drain
    // deadline bounds it; an abandoned transaction is aborted by the next owner's init).
    let never = CancellationToken::new();
    let mut retry = target_retry(shared);
    loop {
        let outcome = match op {
            TxnOp::Add { group } => txn.add_partition(&route.target, group).await,
            TxnOp::Commit { group, next } => {
                // The hook first: the transaction's batches count as committed from here on.
                shared.commit_hook.committing(&route.source, next);
                // What the position store needs durable first (the offset syncs mapping the
                // transaction's records): a transaction committed without it would leave its
                // range unmapped for the next owner after a crash.
                match (shared.before_transaction_commit)(route.source.clone(), next).await {
                    Ok(()) => txn.commit(group, &[(route.target.clone(), next)]).await,
                    Err(e) => Err(e),
                }
            }
        };
        match outcome {
            Ok(()) => {
                retry.succeeded(Some((shared.observer.as_ref(), &route.source)));
                return Ok(());
            }
            Err(e) if e.action == FailureAction::Denied => {
                return Err(Error::Target {
                    partition: route.target.to_string(),
                    detail: e,
                });
            }
            Err(e) => target_wait(&mut retry, shared, route, what, e, &never).await?,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn route() -> Route {
        Route {
            source: TopicPartition::new("src", 3).unwrap(),
            target: TopicPartition::new("dst", 3).unwrap(),
        }
    }

    /// A lost position stops the partition with the command that sets it again, naming the
    /// group, the target partition and where to find the offset.
    #[test]
    fn a_missing_position_says_how_to_store_it_again() {
        let e = position_missing(&ExactlyOnce::new("mirror-positions"), &route(), 42);
        assert_eq!(e.action, FailureAction::Fatal);
        assert_eq!(e.code, "position_missing");
        for needle in [
            "'mirror-positions'",
            "dst-3",
            "already holds 42 offsets",
            "--group mirror-positions --topic dst:3 --reset-offsets",
            "partition src-3 stops",
        ] {
            assert!(e.message.contains(needle), "{needle} in {}", e.message);
        }
    }

    /// Only a cluster's error has an action: the run loop tells fenced, abortable and denied
    /// apart by it; anything else ends the route as it is.
    #[test]
    fn the_action_of_an_error_is_its_clusters() {
        let io = |a| IoError::new(a, "CODE", "m");
        let target = Error::Target {
            partition: "dst-3".into(),
            detail: io(FailureAction::Fenced),
        };
        assert_eq!(failure_action(&target), Some(FailureAction::Fenced));
        assert_eq!(
            failure_action(&Error::Io(io(FailureAction::Abortable))),
            Some(FailureAction::Abortable)
        );
        assert_eq!(failure_action(&Error::Stopped), None);
    }
}
