//! Coalescing of concurrent keyed lookups: thousands of partitions starting together (or
//! retrying a topic the target has not created yet) each ask for their topic's metadata and
//! configuration. Sent one by one, those requests queue on one connection (a broker serves a
//! connection's requests one at a time) until the last ones time out.
//!
//! A caller puts its keys in `wanted` before it queues for its turn; whoever has the turn next
//! looks up every wanted key in one request, and a caller whose keys were all looked up after
//! it queued takes those answers instead of sending its own request.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long an answer is kept for callers that queued before it was asked for. Dropping it
/// earlier only costs such a caller its own request.
const KEEP: Duration = Duration::from_secs(10);

pub(crate) struct Coalesced<K, V> {
    pending: Mutex<Pending<K, V>>,
    turn: tokio::sync::Mutex<()>,
}

struct Pending<K, V> {
    wanted: HashSet<K>,
    /// Each key's latest answer and when it was asked for.
    answers: HashMap<K, (Instant, V)>,
}

impl<K: Eq + Hash + Clone, V: Clone> Default for Coalesced<K, V> {
    fn default() -> Self {
        Coalesced {
            pending: Mutex::new(Pending {
                wanted: HashSet::new(),
                answers: HashMap::new(),
            }),
            turn: tokio::sync::Mutex::new(()),
        }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> Coalesced<K, V> {
    /// The answers for `keys`, in order, each from a lookup asked after this call began; `None`
    /// for a key the lookup did not answer. `lookup` gets the keys of every caller waiting
    /// (these included) and returns the answers it has; its error is this call's error (the
    /// callers it would have answered then look up their own keys).
    pub(crate) async fn get<E, F, Fut>(&self, keys: &[K], lookup: F) -> Result<Vec<Option<V>>, E>
    where
        F: FnOnce(Vec<K>) -> Fut,
        Fut: Future<Output = Result<Vec<(K, V)>, E>>,
    {
        let queued_at = Instant::now();
        self.pending().wanted.extend(keys.iter().cloned());
        let _turn = self.turn.lock().await;
        let ask = {
            let mut pending = self.pending();
            if let Some(answers) = pending.answered_since(keys, queued_at) {
                return Ok(answers.into_iter().map(Some).collect());
            }
            let mut ask = std::mem::take(&mut pending.wanted);
            ask.extend(keys.iter().cloned());
            ask.into_iter().collect()
        };
        let asked_at = Instant::now();
        let answers = lookup(ask).await?;
        let mut pending = self.pending();
        pending.answers.retain(|_, (at, _)| at.elapsed() < KEEP);
        for (k, v) in answers {
            pending.answers.insert(k, (asked_at, v));
        }
        Ok(keys.iter().map(|k| pending.answer(k, asked_at)).collect())
    }

    fn pending(&self) -> MutexGuard<'_, Pending<K, V>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<K: Eq + Hash + Clone, V: Clone> Pending<K, V> {
    /// `k`'s answer, if it was asked for after `since`.
    fn answer(&self, k: &K, since: Instant) -> Option<V> {
        self.answers
            .get(k)
            .filter(|(at, _)| *at >= since)
            .map(|(_, v)| v.clone())
    }

    /// Every key's answer, if all were asked for after `since`.
    fn answered_since(&self, keys: &[K], since: Instant) -> Option<Vec<V>> {
        keys.iter().map(|k| self.answer(k, since)).collect()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Twenty callers of twenty keys share at most two lookups (the first caller's, and one for
    /// everyone who queued behind it); a failed lookup makes the waiting callers look up their
    /// own keys; a key a lookup does not answer is `None`.
    #[tokio::test]
    async fn waiting_callers_share_one_lookup() {
        let c: Arc<Coalesced<u32, u32>> = Arc::default();
        let lookups = Arc::new(AtomicUsize::new(0));
        let mut callers = tokio::task::JoinSet::new();
        for k in 0..20u32 {
            let (c, lookups) = (c.clone(), lookups.clone());
            callers.spawn(async move {
                let got = c
                    .get(&[k], |keys: Vec<u32>| async move {
                        lookups.fetch_add(1, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        Ok::<_, ()>(keys.into_iter().map(|k| (k, k * 10)).collect())
                    })
                    .await
                    .unwrap();
                assert_eq!(got, vec![Some(k * 10)]);
            });
        }
        while let Some(r) = callers.join_next().await {
            r.unwrap();
        }
        let n = lookups.load(Ordering::SeqCst);
        assert!((1..=2).contains(&n), "{n} lookups for 20 callers");

        // A later call asks again: answers from before it began are not used.
        let again = c
            .get(&[3], |keys: Vec<u32>| async move {
                Ok::<_, ()>(keys.into_iter().map(|k| (k, 7)).collect())
            })
            .await
            .unwrap();
        assert_eq!(again, vec![Some(7)]);

        // An error reaches the caller whose lookup failed; a key left unanswered is `None`.
        let failed = c.get(&[1], |_: Vec<u32>| async {
            Err::<Vec<(u32, u32)>, _>("down")
        });
        assert_eq!(failed.await, Err("down"));
        let partial = c
            .get(&[1, 2], |_: Vec<u32>| async { Ok::<_, ()>(vec![(2, 20)]) })
            .await
            .unwrap();
        assert_eq!(partial, vec![None, Some(20)]);
    }
}
