//! The pipeline's one retry driver: how a partition waits after a failed call to a cluster.
//!
//! A retriable failure waits the usual backoff (`retry_backoff` .. `retry_backoff_max`); an
//! ACL denial waits a slow one (the fix is an operator's grant, which may take minutes) and is
//! reported: to the log and the observer when it starts, in the log at attempts 2, 4, 8..., and
//! as over at the first success; any other error ends the retries. [`Retry::step`] decides
//! (no clock, no sleeping: unit tested with pinned jitter); [`Retry::wait`] also reports and
//! sleeps. The delays are the wire client's [`Backoff`]; the produce window, which keeps its
//! own timers, takes its backoffs from [`backoff`] too.

use std::time::Duration;

use strait_wire::{Backoff, TopicPartition};
use tokio_util::sync::CancellationToken;

use super::io::{FailureAction, IoError};
use super::retry_log::RetryLog;
use crate::Error;
use crate::observe::Observer;

/// First and largest wait between attempts while an ACL denies the mirror.
pub(crate) const DENIED_BACKOFF: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(30));

/// The pipeline's backoff over `(first, largest)`: each delay in [0.5, 1.0) of the doubling
/// one, so partitions failing together spread out but never retry early; at least 1 ms, so a
/// failing partition never spins.
pub(crate) fn backoff((first, largest): (Duration, Duration)) -> Backoff {
    let first = first.max(Duration::from_millis(1));
    Backoff::new(first, largest.max(first)).with_jitter(0.5, 1.0)
}

/// The partition a denial blocks, and who to tell; `None` for the forwarder's producer id,
/// which blocks them all (logged only).
pub(crate) type Blocked<'a> = Option<(&'a dyn Observer, &'a TopicPartition)>;

/// What a denial means for a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnDenied {
    /// Waited out slowly and reported: the partition is blocked until an operator grants.
    WaitSlowly,
    /// Retried like a retriable error (calls made before a partition mirrors, whose retries
    /// are logged as such: a target topic a fresh target has not published yet looks alike).
    AsRetriable,
}

/// What to do after a failed call ([`Retry::step`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Try again after `delay`; `attempts`: failures of this kind in a row, this one included.
    Wait {
        delay: Duration,
        attempts: u32,
        denied: bool,
    },
    /// Not retriable: the error ends the retries.
    GiveUp,
}

/// Why [`Retry::wait`] did not wait.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The stop token was cancelled meanwhile.
    Cancelled,
    /// The error is not retried.
    Failed(IoError),
}

/// Retry state of one kind of call of one partition (see the module doc).
#[derive(Debug, Clone)]
pub(crate) struct Retry {
    backoff: Backoff,
    denied_backoff: Backoff,
    attempts: u32,
    denials: u32,
    on_denied: OnDenied,
}

impl Retry {
    /// Retriable failures wait `retry_backoff` (first, largest); denials as `on_denied` says.
    pub(crate) fn new(retry_backoff: (Duration, Duration), on_denied: OnDenied) -> Self {
        Retry {
            backoff: backoff(retry_backoff),
            denied_backoff: backoff(DENIED_BACKOFF),
            attempts: 0,
            denials: 0,
            on_denied,
        }
    }

    /// Only denials are expected (callers that handle every other error themselves).
    pub(crate) fn denials() -> Self {
        Retry::new(DENIED_BACKOFF, OnDenied::WaitSlowly)
    }

    /// The same, with the jitter drawn from generators seeded with `seed` (tests).
    #[cfg(test)]
    fn seeded(mut self, seed: u64) -> Self {
        self.backoff = self.backoff.with_seed(seed);
        self.denied_backoff = self.denied_backoff.with_seed(seed);
        self
    }

    /// Decides after a call failed with `e`.
    pub(crate) fn step(&mut self, e: &IoError) -> Step {
        let denied = match e.action {
            FailureAction::Retriable => false,
            FailureAction::Denied => self.on_denied == OnDenied::WaitSlowly,
            _ => return Step::GiveUp,
        };
        if denied {
            self.denials += 1;
            Step::Wait {
                delay: self.denied_backoff.next_delay(),
                attempts: self.denials,
                denied,
            }
        } else {
            self.attempts += 1;
            Step::Wait {
                delay: self.backoff.next_delay(),
                attempts: self.attempts,
                denied,
            }
        }
    }

    /// A call succeeded: the backoffs start over, and a denial that was waited out is over
    /// (reported to `blocked`).
    pub(crate) fn succeeded(&mut self, blocked: Blocked<'_>) {
        if self.denials > 0
            && let Some((observer, partition)) = blocked
        {
            report_granted(observer, partition, self.denials);
        }
        self.attempts = 0;
        self.denials = 0;
        self.backoff.reset();
        self.denied_backoff.reset();
    }

    /// After a call failed with `e`: reports a denial (see the module doc) or hands a retriable
    /// failure to `log` (with the attempts in a row), then sleeps before the next attempt.
    pub(crate) async fn wait(
        &mut self,
        e: IoError,
        blocked: Blocked<'_>,
        log: impl FnOnce(&IoError, u32),
        stop: &CancellationToken,
    ) -> Result<(), Stop> {
        let delay = match self.step(&e) {
            Step::GiveUp => return Err(Stop::Failed(e)),
            Step::Wait {
                delay,
                attempts,
                denied: true,
            } => {
                report_denied(blocked, &e, attempts);
                delay
            }
            Step::Wait {
                delay, attempts, ..
            } => {
                log(&e, attempts);
                delay
            }
        };
        if sleep(delay, stop).await {
            Ok(())
        } else {
            Err(Stop::Cancelled)
        }
    }

    /// Waits the next retriable backoff without a failure to report (a fetch that must ask for
    /// more). False if `stop` was cancelled first.
    pub(crate) async fn pause(&mut self, stop: &CancellationToken) -> bool {
        sleep(self.backoff.next_delay(), stop).await
    }
}

/// Calls `f` (a call for `partition`) until it succeeds, a non-retriable error occurs, or
/// `stop` is cancelled ([`Error::Stopped`]). Denials are retried like retriable errors. Each
/// retry is logged through `log` (across partitions at most one WARN a second), by this
/// partition at attempts 1, 2, 4, 8...: a long outage does not flood the log.
pub(crate) async fn call<R, F, Fut>(
    retry_backoff: (Duration, Duration),
    log: &RetryLog,
    partition: &TopicPartition,
    stop: &CancellationToken,
    mut f: F,
) -> Result<R, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<R, IoError>>,
{
    let mut retry = Retry::new(retry_backoff, OnDenied::AsRetriable);
    loop {
        // Boxed: a cluster call's future can be several KiB, and held inline it would make
        // every partition's task that much larger for its whole life.
        let e = match Box::pin(f()).await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        let said = |e: &IoError, attempts: u32| {
            let error = format!("{e} ({}, attempt {attempts})", e.code);
            if attempts.is_power_of_two() {
                log.log(partition, &error, "retrying");
            } else {
                log.log_debug(partition, &error, "retrying");
            }
        };
        match retry.wait(e, None, said, stop).await {
            Ok(()) => {}
            Err(Stop::Cancelled) => return Err(Error::Stopped),
            Err(Stop::Failed(e)) => return Err(Error::Io(e)),
        }
    }
}

/// Sleeps `delay`; false if `stop` was cancelled first.
async fn sleep(delay: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        () = tokio::time::sleep(delay) => true,
        () = stop.cancelled() => false,
    }
}

/// Says that an ACL denies the mirror: to the observer and the log when it starts (`attempts`
/// 1), then in the log at attempts 2, 4, 8...
pub(crate) fn report_denied(blocked: Blocked<'_>, e: &IoError, attempts: u32) {
    let name = blocked.map(|(_, p)| p.to_string());
    if attempts == 1 {
        if let Some((observer, p)) = blocked {
            observer.partition_blocked(p, Some(&e.code));
        }
        tracing::error!(partition = name, error = %e, code = %e.code,
            "access denied; retrying until the grant exists (mirroring resumes by itself)");
    } else if attempts.is_power_of_two() {
        tracing::warn!(partition = name, code = %e.code, attempts, "still denied; retrying");
    }
}

/// Says that a denial of `attempts` attempts is over.
pub(crate) fn report_granted(observer: &dyn Observer, partition: &TopicPartition, attempts: u32) {
    tracing::info!(partition = %partition, attempts, "access granted again; resuming");
    observer.partition_blocked(partition, None);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn failed(action: FailureAction) -> IoError {
        IoError::new(action, "CODE", "injected")
    }

    /// The delays a seeded backoff over `range` hands out: what the driver must wait.
    fn pinned(range: (Duration, Duration), seed: u64, n: usize) -> Vec<Duration> {
        let mut b = backoff(range).with_seed(seed);
        (0..n).map(|_| b.next_delay()).collect()
    }

    fn delays(r: &mut Retry, e: &IoError, n: usize) -> Vec<Step> {
        (0..n).map(|_| r.step(e)).collect()
    }

    fn waits(delays: Vec<Duration>, denied: bool) -> Vec<Step> {
        delays
            .into_iter()
            .zip(1..)
            .map(|(delay, attempts)| Step::Wait {
                delay,
                attempts,
                denied,
            })
            .collect()
    }

    #[derive(Default)]
    struct Blocks(Mutex<Vec<Option<String>>>);

    impl Observer for Blocks {
        fn partition_blocked(&self, _: &TopicPartition, error_code: Option<&str>) {
            self.0.lock().unwrap().push(error_code.map(str::to_string));
        }
    }

    #[test]
    fn retriable_failures_wait_the_seeded_backoff_and_a_success_starts_over() {
        let range = (100 * MS, 1000 * MS);
        let mut r = Retry::new(range, OnDenied::WaitSlowly).seeded(7);
        let e = failed(FailureAction::Retriable);
        assert_eq!(delays(&mut r, &e, 6), waits(pinned(range, 7, 6), false));
        r.succeeded(None);
        let again = r.step(&e);
        let Step::Wait {
            delay, attempts, ..
        } = again
        else {
            panic!("{again:?}")
        };
        assert_eq!(attempts, 1);
        assert!(delay < 100 * MS && delay >= 50 * MS, "{delay:?}");
    }

    #[test]
    fn denials_wait_slowly_and_are_reported_until_a_success() {
        let tp = TopicPartition::new("t", 0).unwrap();
        let blocks = Blocks::default();
        let mut r = Retry::new((100 * MS, 1000 * MS), OnDenied::WaitSlowly).seeded(3);
        let e = failed(FailureAction::Denied);
        assert_eq!(
            delays(&mut r, &e, 7),
            waits(pinned(DENIED_BACKOFF, 3, 7), true)
        );
        r.succeeded(Some((&blocks, &tp)));
        assert_eq!(*blocks.0.lock().unwrap(), [None], "the grant is reported");
        // Nothing was denied since: a success reports nothing.
        r.succeeded(Some((&blocks, &tp)));
        assert_eq!(blocks.0.lock().unwrap().len(), 1);
    }

    #[test]
    fn calls_retry_denials_like_retriable_errors() {
        let range = (100 * MS, 1000 * MS);
        let mut r = Retry::new(range, OnDenied::AsRetriable).seeded(5);
        let e = failed(FailureAction::Denied);
        assert_eq!(delays(&mut r, &e, 4), waits(pinned(range, 5, 4), false));
    }

    #[test]
    fn other_errors_end_the_retries() {
        for action in [
            FailureAction::Fatal,
            FailureAction::OffsetOutOfRange,
            FailureAction::Fenced,
            FailureAction::Abortable,
            FailureAction::TooLarge,
        ] {
            let mut r = Retry::new((MS, MS), OnDenied::WaitSlowly);
            assert_eq!(r.step(&failed(action)), Step::GiveUp, "{action:?}");
        }
    }

    #[test]
    fn a_zero_backoff_still_waits() {
        let mut r = Retry::new((Duration::ZERO, Duration::ZERO), OnDenied::WaitSlowly);
        let step = r.step(&failed(FailureAction::Retriable));
        let Step::Wait { delay, .. } = step else {
            panic!("{step:?}")
        };
        assert!(delay >= MS / 2 && delay <= MS, "{delay:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn wait_reports_a_denial_once_sleeps_and_stops_when_told() {
        let tp = TopicPartition::new("t", 0).unwrap();
        let blocks = Blocks::default();
        let mut r = Retry::denials().seeded(1);
        let never = CancellationToken::new();
        let t0 = tokio::time::Instant::now();
        for _ in 0..2 {
            let e = failed(FailureAction::Denied);
            r.wait(e, Some((&blocks, &tp)), |_, _| {}, &never)
                .await
                .unwrap();
        }
        let want: Duration = pinned(DENIED_BACKOFF, 1, 2).into_iter().sum();
        // Paused time is exact up to tokio's timer, which rounds each sleep up to the ms.
        let slept = t0.elapsed();
        assert!(
            slept >= want && slept <= want + 2 * MS,
            "{slept:?} for {want:?}"
        );
        assert_eq!(*blocks.0.lock().unwrap(), [Some("CODE".to_string())]);
        let fatal = r
            .wait(failed(FailureAction::Fatal), None, |_, _| {}, &never)
            .await;
        assert!(matches!(fatal, Err(Stop::Failed(e)) if e.action == FailureAction::Fatal));
        let stop = CancellationToken::new();
        stop.cancel();
        let stopped = r
            .wait(failed(FailureAction::Retriable), None, |_, _| {}, &stop)
            .await;
        assert!(matches!(stopped, Err(Stop::Cancelled)));
    }
}
