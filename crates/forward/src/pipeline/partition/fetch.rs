//! The fetch side of a partition: fetches from its position, plans each answer (pass-through,
//! re-encode, skip) within the memory budget and hands the work to the produce side; retries
//! and denials go through the pipeline's retry driver, a missing offset through the
//! out-of-range policy.

// The partition's shared types and helpers (Shared, Route, Work, resolve_start...).
use super::*;

/// Fetches `leg`'s partition from `offset` under `rules` and sends the work to `tx`, until the
/// leg stops, the produce side hangs up, or an error needs an operator.
pub(super) async fn fetch_loop<S: Source, T: Target>(
    leg: &Leg<'_, S, T>,
    mut offset: i64,
    mut rules: Rules,
    max_message_bytes: &AtomicUsize,
    tx: mpsc::Sender<WorkBox>,
) -> Result<(), Error> {
    let (shared, route, account, stop) = (leg.shared.as_ref(), leg.route, leg.account, leg.stop);
    let settings = &shared.settings;
    let mut max_bytes = settings.partition_fetch_bytes;
    let mut retry = Retry::new(
        (settings.retry_backoff, settings.retry_backoff_max),
        OnDenied::WaitSlowly,
    );
    let blocked: Blocked<'_> = Some((shared.observer.as_ref(), &route.source));
    loop {
        if tx.is_closed() {
            // The produce side stopped on an error; it reports it.
            return Ok(());
        }
        // Waiting on the budget or the source must end when the produce side has stopped on
        // an error: it reports the error only once both sides ended, and a partition whose
        // source is quiet would otherwise never get back to the check above.
        let mut reservation = tokio::select! {
            r = shared.budget.reserve(account, max_bytes as usize) => r,
            _ = stop.cancelled() => return Ok(()),
            () = tx.closed() => return Ok(()),
        };
        let spec = FetchSpec {
            partition: route.source.clone(),
            offset,
            max_bytes,
            max_wait: settings.fetch_max_wait,
            isolation: settings.isolation,
        };
        let fetched = tokio::select! {
            r = shared.source.fetch(&spec) => r,
            _ = stop.cancelled() => return Ok(()),
            () = tx.closed() => return Ok(()),
        };
        let fetched = match fetched {
            Ok(f) => {
                retry.succeeded(blocked);
                f
            }
            Err(e) => {
                shared.observer.fetch_error(&route.source, &e.code);
                drop(reservation);
                match e.action {
                    FailureAction::Retriable | FailureAction::Denied => {
                        let log = |e: &IoError, _| {
                            shared
                                .fetch_retries
                                .log(&route.source, e, "fetch failed, retrying");
                        };
                        if retry.wait(e, blocked, log, stop).await.is_err() {
                            return Ok(());
                        }
                        continue;
                    }
                    FailureAction::OffsetOutOfRange => {
                        offset = Box::pin(out_of_range(shared, route, offset, e, stop)).await?;
                        // The records up to the new offset are gone for good: let the committed
                        // position follow, or a restart would meet the same gap again (and,
                        // with `Latest`, skip what arrived meanwhile).
                        let advance = Box::new(Work::Advance { next: offset });
                        if tx.send(advance).await.is_err() {
                            return Ok(());
                        }
                        continue;
                    }
                    _ => return Err(Error::Io(e)),
                }
            }
        };
        let fetched_at = SystemTime::now();
        rules.policy.max_message_bytes = max_message_bytes.load(Ordering::Acquire);
        let planned = codec::plan_within_budget(
            &shared.budget,
            account,
            &fetched,
            offset,
            &rules,
            &mut reservation,
            stop,
        )
        .await
        .map_err(|e| Error::Partition {
            partition: route.source.to_string(),
            source: Box::new(e),
        })?;
        let Some(mut planned) = planned else {
            return Ok(());
        };
        shared
            .observer
            .lag(&route.source, fetched.high_watermark, planned.next);
        let visible_end = match settings.isolation {
            Isolation::ReadCommitted if fetched.last_stable_offset >= 0 => {
                fetched.last_stable_offset
            }
            _ => fetched.high_watermark,
        };
        if planned.steps.is_empty()
            && planned.next == offset
            && (planned.truncated_bytes > 0 || visible_end > offset)
        {
            // No complete batch although there is data: the next batch is larger than our
            // limit. A lone partition gets a whole first batch (or a cut one), but in a fetch
            // of several partitions Kafka answers a later partition whose batch does not fit
            // with nothing at all. Ask for more, up to max_fetch_bytes.
            drop(reservation);
            if max_bytes >= settings.max_fetch_bytes && !retry.pause(stop).await {
                return Ok(());
            }
            max_bytes = max_bytes.saturating_mul(2).min(settings.max_fetch_bytes);
            continue;
        }
        // Back to the usual fetch size, but never below the largest batch just seen: a source
        // written in batches larger than partition_fetch_bytes would otherwise cost an empty
        // answer and a retry for every batch.
        // Re-compressing a backlog: fetch enough for a run to fill a whole batch after
        // compression (see `plan.rs`).
        let largest = planned
            .steps
            .iter()
            .map(Step::bytes)
            .max()
            .unwrap_or(0)
            .max(crate::pipeline::plan::run_fetch_bytes(
                settings.batch_size,
                planned.run_bytes,
                fetched.records.len(),
                usize::try_from(max_bytes).unwrap_or(0),
            ));
        if let Some(ratio) = planned.run_ratio {
            rules.run_ratio = ratio;
        }
        max_bytes = i32::try_from(largest)
            .unwrap_or(i32::MAX)
            .clamp(settings.partition_fetch_bytes, settings.max_fetch_bytes);
        // Pass-through parts are slices of the whole fetch response, which carries other
        // partitions' data too: held while this partition waits for its target, they would pin
        // memory its reservation does not count. Each part gets its own buffer now (the copy
        // that stamping would make anyway: the produce side stamps it in place).
        for step in &mut planned.steps {
            if let Step::Forward { parts, .. } = step {
                for part in parts.iter_mut() {
                    own(part);
                }
            }
        }
        drop(fetched);
        for step in planned.steps {
            let bytes = step.bytes();
            let work = match step {
                Step::Skip {
                    reason,
                    records,
                    next,
                } => {
                    shared
                        .observer
                        .batch_skipped(&route.source, reason, records);
                    Work::Advance { next }
                }
                Step::Forward { parts, next } => {
                    let mut share = reservation.split(bytes);
                    if share.bytes() < bytes {
                        // The response (a whole first batch beyond the limit) or its re-encoding
                        // is larger than what the fetch reserved. Wait for the full amount holding
                        // nothing: waiting while holding part of the budget deadlocks as soon as
                        // two partitions do it at once, or one batch is larger than the budget.
                        drop(share);
                        share = tokio::select! {
                            r = shared.budget.reserve(account, bytes) => r,
                            _ = stop.cancelled() => return Ok(()),
                        };
                    }
                    Work::Forward {
                        parts,
                        next,
                        fetched_at,
                        reservation: share,
                    }
                }
            };
            if tx.send(Box::new(work)).await.is_err() {
                // The produce side stopped on an error; it reports it.
                return Ok(());
            }
        }
        offset = planned.next;
        drop(reservation);
        if stop.is_cancelled() {
            return Ok(());
        }
    }
}

async fn out_of_range<S: Source, T: Target>(
    shared: &Shared<S, T>,
    route: &Route,
    offset: i64,
    e: IoError,
    stop: &CancellationToken,
) -> Result<i64, Error> {
    use crate::pipeline::OffsetOutOfRange::*;
    let start = match shared.settings.on_offset_out_of_range {
        Fail => {
            return Err(Error::OffsetOutOfRange {
                partition: route.source.to_string(),
                offset,
                detail: e.message,
            });
        }
        Earliest => StartPosition::Earliest,
        Latest => StartPosition::Latest,
    };
    let next = resolve_start(shared, &route.source, start, stop).await?;
    // Offsets are dense on the source: the gap is exactly the records skipped (none when the
    // position was past the end, e.g. after an unclean leader election: those are re-sent).
    let lost = u64::try_from(next.saturating_sub(offset)).unwrap_or(0);
    shared.observer.records_lost(
        &route.source,
        crate::observe::LossReason::OffsetOutOfRange,
        lost,
    );
    tracing::warn!(
        partition = %route.source, from = offset, to = next, lost,
        "source offset {offset} is no longer available; continuing at {next} as the out-of-range policy says: \
         {lost} records lost (never mirrored)"
    );
    Ok(next)
}

/// Gives a pass-through part a buffer of its own instead of a slice of the fetch response.
/// Re-encoded parts already own theirs.
fn own(part: &mut Part) {
    if matches!(part.path, Path::PassThrough) {
        let owned = Bytes::from(part.batch.to_vec());
        crate::pipeline::copies::record(&part.batch, &owned);
        part.batch = owned;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(path: Path, batch: Bytes) -> Part {
        Part {
            batch,
            first_offset: 0,
            last_offset: 0,
            records: 1,
            path,
            compression: crate::Compression::None,
            max_timestamp_ms: 0,
            offsets: Vec::new(),
        }
    }

    /// A pass-through part stops pinning the whole fetch response: it gets a buffer of its own
    /// with the same bytes. A re-encoded part already owns its buffer and keeps it.
    #[test]
    fn pass_through_parts_get_their_own_buffer() {
        let response = Bytes::from(vec![7u8; 64]);
        let mut p = part(Path::PassThrough, response.slice(8..24));
        own(&mut p);
        assert_eq!(p.batch, response.slice(8..24));
        let inside = response.as_ptr_range();
        assert!(
            !inside.contains(&p.batch.as_ptr()),
            "still a slice of the response"
        );
        let reencoded = Bytes::from(vec![1u8; 16]);
        let mut p = part(
            Path::Reencoded(crate::ReencodeReason::LegacyMagic),
            reencoded.clone(),
        );
        own(&mut p);
        assert_eq!(p.batch.as_ptr(), reencoded.as_ptr(), "copied needlessly");
    }
}
