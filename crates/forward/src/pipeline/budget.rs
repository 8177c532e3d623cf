//! The memory budget: bytes fetched but not yet acknowledged by the target.
//!
//! A fetch reserves its byte limit before it is sent; when the response arrives each batch takes
//! its own share and the rest is returned at once. A batch's share is returned when the target
//! acknowledges it. A slow target therefore blocks new fetches instead of growing memory.
//!
//! Each partition holds its reservations on an [`Account`] and may hold at most a fair share of
//! the budget (the budget divided by the partitions sharing it, never less than
//! [`Budget::min_share`]). Without the cap, the partitions of one dead target broker would fill
//! the whole budget with batches nobody can deliver and stop every healthy partition from
//! fetching.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// A shared byte budget.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    sem: Arc<Semaphore>,
    total: usize,
    /// The smallest share a partition always gets (at least one fetch of the usual size).
    min_share: usize,
    /// Partitions sharing the budget now (each holds an [`Account`]).
    accounts: Arc<AtomicUsize>,
}

/// One partition's hold on the budget.
#[derive(Debug)]
pub(crate) struct Account {
    held: AtomicUsize,
    freed: Notify,
    accounts: Arc<AtomicUsize>,
}

impl Drop for Account {
    fn drop(&mut self) {
        self.accounts.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Account {
    /// Bytes this partition holds now.
    pub(crate) fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

/// Bytes held out of the budget; returned (to the budget and the account) on drop.
#[derive(Debug)]
pub(crate) struct Reservation {
    permit: Option<OwnedSemaphorePermit>,
    account: Option<Arc<Account>>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let (Some(permit), Some(account)) = (&self.permit, &self.account) {
            account
                .held
                .fetch_sub(permit.num_permits(), Ordering::AcqRel);
            account.freed.notify_waiters();
        }
    }
}

impl Budget {
    /// A budget of `total` bytes (at least 1 MiB, at most what a semaphore can count), in which
    /// every partition may hold at least `min_share` bytes.
    pub(crate) fn new(total: usize, min_share: usize) -> Self {
        let total = total.clamp(1 << 20, u32::MAX as usize);
        Budget {
            sem: Arc::new(Semaphore::new(total)),
            total,
            min_share: min_share.clamp(1, total),
            accounts: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The whole budget, bytes.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// A new partition's account; the fair share of every partition shrinks accordingly.
    pub(crate) fn open_account(&self) -> Arc<Account> {
        self.accounts.fetch_add(1, Ordering::AcqRel);
        Arc::new(Account {
            held: AtomicUsize::new(0),
            freed: Notify::new(),
            accounts: self.accounts.clone(),
        })
    }

    /// What one partition may hold now: the budget split evenly between the partitions
    /// sharing it, never less than the minimum share.
    pub(crate) fn fair_share(&self) -> usize {
        let n = self.accounts.load(Ordering::Acquire).max(1);
        (self.total / n).max(self.min_share)
    }

    /// Waits until `bytes` fit in the account's fair share and in the budget, and holds them.
    /// A partition holding nothing may always reserve (so one batch larger than its share still
    /// moves). A request larger than the whole budget holds the whole budget, so one oversized
    /// batch can still make progress alone.
    pub(crate) async fn reserve(&self, account: &Arc<Account>, bytes: usize) -> Reservation {
        let n = bytes.clamp(1, self.total);
        loop {
            let freed = account.freed.notified();
            tokio::pin!(freed);
            // Registered before the check, so a release between the check and the wait wakes us.
            freed.as_mut().enable();
            let held = account.held();
            if held == 0 || held + n <= self.fair_share() {
                break;
            }
            freed.await;
        }
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        match self.sem.clone().acquire_many_owned(n32).await {
            Ok(permit) => {
                account
                    .held
                    .fetch_add(permit.num_permits(), Ordering::AcqRel);
                Reservation {
                    permit: Some(permit),
                    account: Some(account.clone()),
                }
            }
            // The semaphore is never closed; an empty reservation is harmless if it were.
            Err(_) => Reservation {
                permit: None,
                account: None,
            },
        }
    }

    /// Bytes currently free.
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.sem.available_permits()
    }
}

impl Reservation {
    /// A reservation holding nothing.
    pub(crate) fn empty() -> Reservation {
        Reservation {
            permit: None,
            account: None,
        }
    }

    /// Moves `bytes` of this reservation into a new one (less if this one holds fewer), on the
    /// same account.
    pub(crate) fn split(&mut self, bytes: usize) -> Reservation {
        let Some(permit) = self.permit.as_mut() else {
            return Reservation {
                permit: None,
                account: None,
            };
        };
        let n = bytes.min(permit.num_permits());
        if n == permit.num_permits() {
            return Reservation {
                permit: self.permit.take(),
                account: self.account.clone(),
            };
        }
        Reservation {
            permit: permit.split(n),
            account: self.account.clone(),
        }
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.permit.as_ref().map_or(0, |p| p.num_permits())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn split_and_drop_return_bytes() {
        let budget = Budget::new(4 << 20, 1024);
        let account = budget.open_account();
        let mut r = budget.reserve(&account, 1 << 20).await;
        assert_eq!(budget.available(), 3 << 20);
        assert_eq!(account.held(), 1 << 20);
        let part = r.split(1000);
        assert_eq!(part.bytes(), 1000);
        drop(r);
        assert_eq!(budget.available(), (4 << 20) - 1000);
        assert_eq!(account.held(), 1000);
        drop(part);
        assert_eq!(budget.available(), 4 << 20);
        assert_eq!(account.held(), 0);
    }

    #[tokio::test]
    async fn oversized_request_takes_whole_budget() {
        let budget = Budget::new(1 << 20, 1024);
        let account = budget.open_account();
        let r = budget.reserve(&account, 10 << 20).await;
        assert_eq!(r.bytes(), 1 << 20);
        assert_eq!(budget.available(), 0);
    }

    #[tokio::test]
    async fn reserve_waits_for_release() {
        let budget = Budget::new(1 << 20, 1024);
        let a = budget.open_account();
        let b = budget.open_account();
        let r = budget.reserve(&a, 1 << 20).await;
        let b2 = budget.clone();
        let waiter = tokio::spawn(async move { b2.reserve(&b, 10).await.bytes() });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(r);
        assert_eq!(waiter.await.unwrap(), 10);
    }

    /// A partition that cannot deliver (its target broker is down) stops at its fair share, and
    /// the others still find room.
    #[tokio::test]
    async fn a_stuck_partition_holds_at_most_its_fair_share() {
        let budget = Budget::new(4 << 20, 64 << 10);
        let stuck = budget.open_account();
        let healthy: Vec<_> = (0..3).map(|_| budget.open_account()).collect();
        assert_eq!(budget.fair_share(), 1 << 20);
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(budget.reserve(&stuck, 256 << 10).await);
        }
        assert_eq!(stuck.held(), 1 << 20);
        let b = budget.clone();
        let s = stuck.clone();
        let fifth = tokio::spawn(async move { b.reserve(&s, 256 << 10).await.bytes() });
        tokio::task::yield_now().await;
        assert!(
            !fifth.is_finished(),
            "the stuck partition is over its share"
        );
        // Everyone else can still reserve their share.
        let mut others = Vec::new();
        for a in &healthy {
            others.push(budget.reserve(a, 1 << 20).await);
        }
        assert_eq!(budget.available(), 0);
        drop(others);
        // One acknowledgement of the stuck partition lets it fetch again.
        held.pop();
        assert_eq!(fifth.await.unwrap(), 256 << 10);
    }

    /// A partition holding nothing may always fetch, even more than its share.
    #[tokio::test]
    async fn an_empty_account_may_exceed_its_share() {
        let budget = Budget::new(1 << 20, 1024);
        let accounts: Vec<_> = (0..16).map(|_| budget.open_account()).collect();
        assert_eq!(budget.fair_share(), 64 << 10);
        let r = budget.reserve(&accounts[0], 512 << 10).await;
        assert_eq!(r.bytes(), 512 << 10);
        drop(accounts);
        assert_eq!(budget.fair_share(), 1 << 20);
    }
}
