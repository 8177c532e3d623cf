//! Retry warnings across partitions, limited to one per interval.
//!
//! A broker that goes away, or a fresh target still electing leaders for thousands of new
//! partitions, makes every partition retry at once: one WARN line per partition and retry
//! buried the log under thousands of identical lines (4,437 in 40 s for 4,000 new partitions).
//! The first retry is logged at once; after that at most one WARN per interval, saying how many
//! retries it stands for; the rest go to debug. Every retry is still counted in the metrics.
//! The policy is the workspace's one [`LogLimiter`], with one key for all partitions of a kind.

use std::fmt::Display;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::log_limit::{LogLimiter, Verdict};

/// How often retry warnings of one kind may reach the log.
pub(crate) const RETRY_WARN_EVERY: Duration = Duration::from_secs(1);

/// Which retries of one kind (produce, fetch) are logged at WARN, shared by the partitions'
/// tasks.
#[derive(Debug)]
pub(crate) struct RetryLog {
    limiter: Mutex<LogLimiter<()>>,
}

impl RetryLog {
    pub(crate) fn new(every: Duration) -> Self {
        RetryLog {
            limiter: Mutex::new(LogLimiter::new(every)),
        }
    }

    fn limiter(&self) -> std::sync::MutexGuard<'_, LogLimiter<()>> {
        self.limiter.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Logs one retry of `partition` after `error` (`what`: "fetch failed, retrying"), at WARN
    /// or at debug as the limiter decides for now.
    pub(crate) fn log(&self, partition: &dyn Display, error: &dyn Display, what: &str) {
        let verdict = self.limiter().check(&(), Instant::now());
        match verdict {
            Verdict::First | Verdict::Again { suppressed: 0 } => {
                tracing::warn!(partition = %partition, error = %error, "{what}")
            }
            Verdict::Again {
                suppressed: held_back,
            } => tracing::warn!(
                partition = %partition, error = %error, held_back,
                "{what} ({held_back} more such retries since the last warning are logged at debug)"
            ),
            Verdict::Quiet => tracing::debug!(partition = %partition, error = %error, "{what}"),
        }
    }

    /// Logs at debug a retry the caller's own cadence keeps from WARN (a partition says a
    /// long outage again only at attempts 1, 2, 4...): the next WARN counts it among the
    /// retries it stands for.
    pub(crate) fn log_debug(&self, partition: &dyn Display, error: &dyn Display, what: &str) {
        self.limiter().hold(&());
        tracing::debug!(partition = %partition, error = %error, "{what}");
    }
}
