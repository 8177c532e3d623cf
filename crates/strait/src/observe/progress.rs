//! The catch-up progress line: during a long catch-up (a backlog at start, or after an outage)
//! an INFO line every [`REPORT_EVERY`] with the total lag, the rate it shrinks at and an ETA,
//! and one line when the mirror has caught up.
//!
//! Pure: [`Progress::observe`] takes the total lag and the time and says what to log; the lag
//! sampler (`observe::sampler::Sampler`) calls it every second and logs.

use std::time::{Duration, Instant};

/// How often the line is logged while catching up.
pub const REPORT_EVERY: Duration = Duration::from_secs(30);

/// What to log.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// The lag shrank over the last window.
    CatchingUp {
        /// Records still to mirror.
        lag_records: i64,
        /// Records per second the lag shrank by over the window.
        rate: f64,
        /// At that rate, when the lag reaches 0.
        eta: Duration,
    },
    /// The lag reached 0 after a catch-up that was reported.
    CaughtUp {
        /// How long the reported catch-up took, from its first line.
        took: Duration,
    },
}

/// The state between two observations.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// The start of the current window: total lag and when.
    window: Option<(i64, Instant)>,
    /// When the first line of the current catch-up was logged.
    reporting_since: Option<Instant>,
}

impl Progress {
    /// The total lag in records at `now`; returns a line to log, if one is due. A window whose
    /// lag did not shrink (the source writes as fast as the mirror, or the target is down) logs
    /// nothing: the lag gauges and `/readyz` say that.
    pub fn observe(&mut self, lag_records: i64, now: Instant) -> Option<Report> {
        if lag_records <= 0 {
            self.window = Some((0, now));
            return self.reporting_since.take().map(|since| Report::CaughtUp {
                took: now.saturating_duration_since(since),
            });
        }
        let (start_lag, start) = *self.window.get_or_insert((lag_records, now));
        let elapsed = now.saturating_duration_since(start);
        if elapsed < REPORT_EVERY {
            return None;
        }
        self.window = Some((lag_records, now));
        let shrunk = start_lag - lag_records;
        if shrunk <= 0 {
            return None;
        }
        let rate = shrunk as f64 / elapsed.as_secs_f64();
        self.reporting_since.get_or_insert(now);
        Some(Report::CatchingUp {
            lag_records,
            rate,
            eta: Duration::from_secs_f64(lag_records as f64 / rate),
        })
    }
}

/// `1h02m`, `4m05s`, `12s`: an ETA as people read it.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shrinking_lag_is_reported_every_window_with_an_eta() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut p = Progress::default();
        // (second, total lag, expected line)
        let table: &[(u64, i64, Option<Report>)] = &[
            (0, 100_000, None),
            (1, 99_000, None),
            (29, 71_000, None),
            // 30 s: 30 000 records less, 1 000/s, 70 000 left: 70 s.
            (
                30,
                70_000,
                Some(Report::CatchingUp {
                    lag_records: 70_000,
                    rate: 1000.0,
                    eta: Duration::from_secs(70),
                }),
            ),
            // Growing again (the target is down): nothing.
            (60, 80_000, None),
            (
                90,
                20_000,
                Some(Report::CatchingUp {
                    lag_records: 20_000,
                    rate: 2000.0,
                    eta: Duration::from_secs(10),
                }),
            ),
            (
                100,
                0,
                Some(Report::CaughtUp {
                    took: Duration::from_secs(70),
                }),
            ),
            // Caught up stays quiet.
            (101, 0, None),
            (200, 0, None),
        ];
        for (s, lag, want) in table {
            assert_eq!(&p.observe(*lag, at(*s)), want, "at {s} s with lag {lag}");
        }
    }

    #[test]
    fn a_lag_that_never_shrinks_logs_nothing() {
        let t0 = Instant::now();
        let mut p = Progress::default();
        for s in 0..200 {
            assert_eq!(p.observe(500, t0 + Duration::from_secs(s)), None);
        }
        assert_eq!(p.observe(0, t0 + Duration::from_secs(201)), None);
    }

    #[test]
    fn human_durations() {
        assert_eq!(human(Duration::from_secs(12)), "12s");
        assert_eq!(human(Duration::from_secs(245)), "4m05s");
        assert_eq!(human(Duration::from_secs(3720)), "1h02m");
    }
}
