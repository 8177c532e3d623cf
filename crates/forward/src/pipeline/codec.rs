//! Codec work of the fetch side: planning a fetch response that needs re-encoding, in the memory
//! budget and off the runtime's worker threads.
//!
//! A response of pass-through batches (and skips) is planned where it arrived, exactly as
//! before: the plan runs with an allowance of zero bytes, which is all such a response needs.
//! When a batch needs codec work (decompress, re-encode, recompress), that first plan fails
//! with `CodecError::OverAllowance` before anything large is allocated, saying how much working
//! memory the batch needs. The partition then
//!
//! 1. gives its fetch reservation back and reserves fetched bytes + need (at most the whole
//!    budget) as one amount, holding nothing while it waits (two partitions each holding part of
//!    the budget and waiting for more would deadlock);
//! 2. plans again on a blocking thread (`spawn_blocking`) within that allowance, so a large
//!    batch stalls neither the worker thread nor the partitions that share it;
//! 3. if the work needs more (the need was a guess: the decompressed size is not known before
//!    decompressing), asks again for at least twice as much; when a run with the whole budget
//!    still does not fit, stops the partition with [`Error::CodecMemory`] (nothing beyond the
//!    budget was allocated).
//!
//! When the plan is made, the reservation is trimmed to what its batches weigh: the working
//! memory was freed with the plan.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::Error;
use crate::error::CodecError;
use crate::reencode::Allowance;

use super::budget::{Account, Budget, Reservation};
use super::io::Fetched;
use super::plan::{self, Plan, Rules};

/// Plans `fetched` for a partition at `position` (see the module docs). `reservation` holds the
/// fetch's bytes on entry, and the plan's (at least the fetched bytes) on return. `None`: `stop`
/// was cancelled while waiting for the budget.
pub(crate) async fn plan_within_budget(
    budget: &Budget,
    account: &Arc<Account>,
    fetched: &Fetched,
    position: i64,
    rules: &Rules,
    reservation: &mut Reservation,
    stop: &CancellationToken,
) -> Result<Option<Plan>, Error> {
    // Pass-through and skips need no codec work: planned here, with no allowance.
    let mut needed = match plan::plan(fetched, position, rules, &mut Allowance::new(0)) {
        Ok(plan) => return Ok(Some(plan)),
        Err(e) => match over_allowance(&e) {
            Some(needed) => needed,
            None => return Err(e),
        },
    };
    let input = fetched.records.len();
    let too_much = |needed: usize| Error::CodecMemory {
        offset: position,
        needed: input.saturating_add(needed),
        budget: budget.total(),
    };
    // The need is often a guess (the decompressed size is not known before decompressing): the
    // whole budget is tried before the partition is stopped.
    let most = budget.total().checked_sub(input).ok_or(too_much(needed))?;
    loop {
        let allowed = needed.min(most);
        // Hold nothing while waiting (see the module docs).
        drop(std::mem::replace(reservation, Reservation::empty()));
        *reservation = tokio::select! {
            r = budget.reserve(account, input + allowed) => r,
            _ = stop.cancelled() => return Ok(None),
        };
        let (job, rules_job) = (fetched.clone(), rules.clone());
        let planned = tokio::task::spawn_blocking(move || {
            plan::plan(&job, position, &rules_job, &mut Allowance::new(allowed))
        })
        .await;
        let planned = match planned {
            Ok(planned) => planned,
            // A panic in the codec is a bug: let it unwind here, as it did when planning ran
            // on this task.
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => return Ok(None),
        };
        match planned {
            Ok(plan) => {
                // The working memory went with the plan; keep what its batches (or the fetched
                // bytes, still held by the caller) weigh.
                let keep = plan
                    .steps
                    .iter()
                    .map(plan::Step::bytes)
                    .sum::<usize>()
                    .max(input);
                let kept = reservation.split(keep);
                *reservation = kept;
                return Ok(Some(plan));
            }
            Err(e) => match over_allowance(&e) {
                Some(more) if allowed < most => needed = more.max(allowed.saturating_mul(2)),
                Some(more) => return Err(too_much(more)),
                None => return Err(e),
            },
        }
    }
}

/// The working memory an `OverAllowance` error asks for.
fn over_allowance(e: &Error) -> Option<usize> {
    fn codec(e: &CodecError) -> Option<usize> {
        match e {
            CodecError::OverAllowance { needed, .. } => Some(*needed),
            CodecError::InBatch { source, .. } => codec(source),
            _ => None,
        }
    }
    match e {
        Error::Codec(e) => codec(e),
        Error::Partition { source, .. } => over_allowance(source),
        _ => None,
    }
}
