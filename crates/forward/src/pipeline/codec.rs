//! Codec work of the fetch side: planning a fetch response that needs re-encoding, in the memory
//! budget and off the runtime's worker threads.
//!
//! A response of pass-through batches (and skips) is planned where it arrived, exactly as
//! before: the plan runs with an allowance of zero bytes, which is all such a response needs.
//! When a batch needs codec work (decompress, re-encode, recompress), that first plan fails
//! with `CodecError::OverAllowance` before anything large is allocated, saying how much working
//! memory the batch needs. The partition then
//!
//! 1. stops the partition with [`Error::CodecMemory`] if the fetched bytes plus that need are
//!    more than the whole budget (it could never run);
//! 2. otherwise gives its fetch reservation back and reserves fetched bytes + need as one
//!    amount, holding nothing while it waits (two partitions each holding part of the budget and
//!    waiting for more would deadlock);
//! 3. plans again on a blocking thread (`spawn_blocking`) within that allowance, so a large
//!    batch stalls neither the worker thread nor the partitions that share it. If the need was
//!    a lower bound (the decompressed size was not known yet) and the work needs more, it asks
//!    again for at least twice as much.
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
    loop {
        let total = input.saturating_add(needed);
        if total > budget.total() {
            return Err(Error::CodecMemory {
                offset: position,
                needed: total,
                budget: budget.total(),
            });
        }
        // Hold nothing while waiting (see the module docs).
        drop(std::mem::replace(reservation, Reservation::empty()));
        *reservation = tokio::select! {
            r = budget.reserve(account, total) => r,
            _ = stop.cancelled() => return Ok(None),
        };
        let (job, rules_job) = (fetched.clone(), rules.clone());
        let allowed = needed;
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
                Some(more) => needed = more.max(needed.saturating_mul(2)),
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
