//! Retry warnings across partitions, limited to one per interval.
//!
//! A broker that goes away, or a fresh target still electing leaders for thousands of new
//! partitions, makes every partition retry at once: one WARN line per partition and retry
//! buried the log under thousands of identical lines (4,437 in 40 s for 4,000 new partitions).
//! The first retry is logged at once; after that at most one WARN per interval, saying how many
//! retries it stands for; the rest go to debug. Every retry is still counted in the metrics.

use std::fmt::Display;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often retry warnings of one kind may reach the log.
pub(crate) const RETRY_WARN_EVERY: Duration = Duration::from_secs(1);

/// Which retries of one kind (produce, fetch) are logged at WARN. Time is passed in.
#[derive(Debug)]
pub(crate) struct RetryLog {
    every: Duration,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    last: Option<Instant>,
    held_back: u64,
}

/// What to do with one retry's log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryLine {
    /// Log at WARN; `held_back` retries since the last WARN went to debug.
    Warn { held_back: u64 },
    /// Log at debug.
    Debug,
}

impl RetryLog {
    pub(crate) fn new(every: Duration) -> Self {
        RetryLog {
            every,
            state: Mutex::new(State::default()),
        }
    }

    /// Decides for a retry seen at `now`.
    pub(crate) fn line(&self, now: Instant) -> RetryLine {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let due = s
            .last
            .is_none_or(|last| now.saturating_duration_since(last) >= self.every);
        if due {
            s.last = Some(now);
            RetryLine::Warn {
                held_back: std::mem::take(&mut s.held_back),
            }
        } else {
            s.held_back += 1;
            RetryLine::Debug
        }
    }
}

impl RetryLog {
    /// Logs one retry of `partition` after `error` (`what`: "fetch failed, retrying"), at WARN
    /// or at debug as [`line`](Self::line) decides for now.
    pub(crate) fn log(&self, partition: &dyn Display, error: &dyn Display, what: &str) {
        match self.line(Instant::now()) {
            RetryLine::Warn { held_back: 0 } => {
                tracing::warn!(partition = %partition, error = %error, "{what}")
            }
            RetryLine::Warn { held_back } => tracing::warn!(
                partition = %partition, error = %error, held_back,
                "{what} ({held_back} more such retries since the last warning are logged at debug)"
            ),
            RetryLine::Debug => tracing::debug!(partition = %partition, error = %error, "{what}"),
        }
    }

    /// Logs at debug a retry the caller's own cadence keeps from WARN (a partition says a
    /// long outage again only at attempts 1, 2, 4...): the next WARN counts it among the
    /// retries it stands for.
    pub(crate) fn log_debug(&self, partition: &dyn Display, error: &dyn Display, what: &str) {
        self.hold();
        tracing::debug!(partition = %partition, error = %error, "{what}");
    }

    /// Counts one retry logged at debug without asking for a WARN.
    fn hold(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.held_back += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_interval_counting_what_it_held_back() {
        let log = RetryLog::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(log.line(t0), RetryLine::Warn { held_back: 0 });
        for i in 1..=999u64 {
            assert_eq!(log.line(t0 + Duration::from_micros(i)), RetryLine::Debug);
        }
        assert_eq!(
            log.line(t0 + Duration::from_millis(999)),
            RetryLine::Debug,
            "still inside the interval"
        );
        assert_eq!(
            log.line(t0 + Duration::from_secs(1)),
            RetryLine::Warn { held_back: 1000 }
        );
        assert_eq!(
            log.line(t0 + Duration::from_secs(5)),
            RetryLine::Warn { held_back: 0 },
            "a lone retry after a quiet spell is logged at once"
        );
        log.hold();
        log.hold();
        assert_eq!(
            log.line(t0 + Duration::from_secs(10)),
            RetryLine::Warn { held_back: 2 },
            "retries the caller sent to debug itself are counted too"
        );
    }
}
