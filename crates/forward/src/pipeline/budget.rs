//! The memory budget: bytes fetched but not yet acknowledged by the target.
//!
//! A fetch reserves its byte limit before it is sent; when the response arrives each batch takes
//! its own share and the rest is returned at once. A batch's share is returned when the target
//! acknowledges it. A slow target therefore blocks new fetches instead of growing memory.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A shared byte budget.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    sem: Arc<Semaphore>,
    total: usize,
}

/// Bytes held out of the budget; returned on drop.
#[derive(Debug)]
pub(crate) struct Reservation {
    permit: Option<OwnedSemaphorePermit>,
}

impl Budget {
    /// A budget of `total` bytes (at least 1 MiB, at most what a semaphore can count).
    pub(crate) fn new(total: usize) -> Self {
        let total = total.clamp(1 << 20, u32::MAX as usize);
        Budget {
            sem: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Waits until `bytes` are free and holds them. A request larger than the whole budget holds
    /// the whole budget, so one oversized batch can still make progress alone.
    pub(crate) async fn reserve(&self, bytes: usize) -> Reservation {
        let n = bytes.clamp(1, self.total) as u32;
        match self.sem.clone().acquire_many_owned(n).await {
            Ok(permit) => Reservation {
                permit: Some(permit),
            },
            // The semaphore is never closed; an empty reservation is harmless if it were.
            Err(_) => Reservation { permit: None },
        }
    }

    /// Bytes currently free.
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.sem.available_permits()
    }
}

impl Reservation {
    /// Moves `bytes` of this reservation into a new one (less if this one holds fewer).
    pub(crate) fn split(&mut self, bytes: usize) -> Reservation {
        let Some(permit) = self.permit.as_mut() else {
            return Reservation { permit: None };
        };
        let n = bytes.min(permit.num_permits());
        if n == permit.num_permits() {
            return Reservation {
                permit: self.permit.take(),
            };
        }
        Reservation {
            permit: permit.split(n),
        }
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.permit.as_ref().map_or(0, |p| p.num_permits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn split_and_drop_return_bytes() {
        let budget = Budget::new(4 << 20);
        let mut r = budget.reserve(1 << 20).await;
        assert_eq!(budget.available(), 3 << 20);
        let part = r.split(1000);
        assert_eq!(part.bytes(), 1000);
        drop(r);
        assert_eq!(budget.available(), (4 << 20) - 1000);
        drop(part);
        assert_eq!(budget.available(), 4 << 20);
    }

    #[tokio::test]
    async fn oversized_request_takes_whole_budget() {
        let budget = Budget::new(1 << 20);
        let r = budget.reserve(10 << 20).await;
        assert_eq!(r.bytes(), 1 << 20);
        assert_eq!(budget.available(), 0);
    }

    #[tokio::test]
    async fn reserve_waits_for_release() {
        let budget = Budget::new(1 << 20);
        let r = budget.reserve(1 << 20).await;
        let b2 = budget.clone();
        let waiter = tokio::spawn(async move { b2.reserve(10).await.bytes() });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(r);
        assert_eq!(waiter.await.unwrap(), 10);
    }
}
