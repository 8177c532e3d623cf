//! What `/readyz` and `/healthz` answer (docs/operations.md describes it for operators).
//!
//! * **Readiness** ([`Readiness`]): the mirror has started (connected, topics synced, partitions
//!   assigned) and every assigned partition is making progress. A partition is *not ready* while
//!   it is stopped on an error, blocked (an ACL denial it keeps retrying), behind without its
//!   acknowledged position moving for `metrics.stall_timeout`, without a start position for that
//!   long, or without any end offset from the source for that long. The cause does not matter:
//!   a partition behind and not moving is not ready, whatever holds it. It is ready again as soon
//!   as it moves (or catches up).
//! * **Liveness** ([`Liveness`]): a heartbeat task on the main runtime stamps an atomic every
//!   second; the HTTP server runs on its own thread and runtime, so it still answers when the
//!   main runtime is wedged, and `/healthz` fails once the stamp is older than its limit (30 s).
//!   Liveness says nothing about the clusters: a mirror whose target is down is alive (and not
//!   ready); restarting it would not help.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use strait_wire::TopicPartition;
use tokio_util::sync::CancellationToken;

use crate::observe::lag::Lag;

/// `/healthz` fails when the main runtime has not run the heartbeat for this long.
pub const LIVENESS_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the heartbeat stamps.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);

/// Why one partition is not ready.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionProblem {
    /// The source partition.
    pub partition: TopicPartition,
    /// `stopped`, `blocked`, `stalled`, `not_started` or `no_end_offset`.
    pub state: &'static str,
    /// One line for the operator.
    pub reason: String,
    /// Lag in records, when known.
    pub lag_records: Option<i64>,
    /// Seconds since the partition last made progress (or started).
    pub no_progress_seconds: f64,
}

/// Which of the assigned partitions are not ready, and why (one problem per partition, the most
/// serious first: stopped, blocked, stalled, not started, no end offset). `lags` is the lag
/// sampler's view of every assigned partition; `failures` are partitions stopped on an error;
/// `blocked` partitions retrying an authorization failure, with its error code.
pub fn partition_problems(
    lags: &[(TopicPartition, Lag)],
    failures: &[(TopicPartition, String)],
    blocked: &HashMap<TopicPartition, String>,
    stall_timeout: Duration,
) -> Vec<PartitionProblem> {
    let secs = |d: Duration| d.as_secs_f64();
    let mut problems: Vec<PartitionProblem> = Vec::new();
    for (tp, err) in failures {
        if problems.iter().any(|p| p.partition == *tp) {
            continue;
        }
        let lag = lags.iter().find(|(t, _)| t == tp).map(|(_, l)| *l);
        problems.push(PartitionProblem {
            partition: tp.clone(),
            state: "stopped",
            reason: format!("stopped on an error that needs an operator: {err}"),
            lag_records: lag.and_then(|l| l.records),
            no_progress_seconds: lag.map_or(0.0, |l| secs(l.since_progress)),
        });
    }
    for (tp, lag) in lags {
        if problems.iter().any(|p| p.partition == *tp) {
            continue;
        }
        let behind = lag.records.is_none_or(|r| r > 0);
        let (state, reason) = if let Some(code) = blocked.get(tp) {
            (
                "blocked",
                format!(
                    "access denied ({code}); retrying until the grant exists, the partition resumes by itself"
                ),
            )
        } else if lag.acked < 0 && lag.since_progress >= stall_timeout {
            (
                "not_started",
                format!(
                    "no start position after {:.0} s (is the source reachable, may the mirror read its group?)",
                    secs(lag.since_progress)
                ),
            )
        } else if lag.end_age >= stall_timeout && lag.acked >= 0 {
            (
                "no_end_offset",
                format!(
                    "the source has reported no end offset for {:.0} s (is the partition's source leader reachable?)",
                    secs(lag.end_age)
                ),
            )
        } else if behind && lag.acked >= 0 && lag.since_progress >= stall_timeout {
            let how_far = match (lag.records, lag.seconds) {
                (Some(r), Some(s)) => format!("{r} records ({s:.0} s) behind"),
                _ => "behind".to_string(),
            };
            (
                "stalled",
                format!(
                    "{how_far} and no progress for {:.0} s (limit metrics.stall_timeout = {:.0} s)",
                    secs(lag.since_progress),
                    secs(stall_timeout)
                ),
            )
        } else {
            continue;
        };
        problems.push(PartitionProblem {
            partition: tp.clone(),
            state,
            reason,
            lag_records: lag.records,
            no_progress_seconds: secs(lag.since_progress),
        });
    }
    let rank = |s: &str| match s {
        "stopped" => 0,
        "blocked" => 1,
        "stalled" => 2,
        "not_started" => 3,
        _ => 4,
    };
    problems.sort_by(|a, b| {
        (rank(a.state), a.partition.topic(), a.partition.partition()).cmp(&(
            rank(b.state),
            b.partition.topic(),
            b.partition.partition(),
        ))
    });
    problems
}

#[derive(Debug, Clone, PartialEq)]
enum Lifecycle {
    /// Not mirroring yet (or any more), for this reason.
    NotRunning(String),
    /// Mirroring its assignment.
    Running,
}

#[derive(Debug)]
struct ReadyState {
    lifecycle: Lifecycle,
    assigned: usize,
    problems: Vec<PartitionProblem>,
}

/// Whether the mirror is ready, shared between the mirror, the lag sampler and `/readyz`. Cheap
/// to clone.
#[derive(Debug, Clone)]
pub struct Readiness {
    inner: Arc<Mutex<ReadyState>>,
    /// With several flows ([`Readiness::of_flows`]): each flow's readiness, by flow name.
    flows: Arc<Vec<(String, Readiness)>>,
}

impl Default for Readiness {
    fn default() -> Self {
        Readiness::new("starting: connecting to the source and target clusters")
    }
}

impl Readiness {
    /// Not ready, for `reason`.
    pub fn new(reason: impl Into<String>) -> Readiness {
        Readiness {
            inner: Arc::new(Mutex::new(ReadyState {
                lifecycle: Lifecycle::NotRunning(one_line(reason.into())),
                assigned: 0,
                problems: Vec::new(),
            })),
            flows: Arc::new(Vec::new()),
        }
    }

    /// The readiness of several flows in one process: ready when every flow is ready. The
    /// `/readyz` body adds `"flows": [{"flow", "status", "reason", ...}]`, and the reason and
    /// not-ready partitions name the flow.
    pub fn of_flows(flows: Vec<(String, Readiness)>) -> Readiness {
        Readiness {
            flows: Arc::new(flows),
            ..Readiness::new("starting")
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, ReadyState> {
        // A poisoned lock only means a panic mid-update of plain values.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The mirror runs its assignment: ready unless a partition has a problem.
    pub fn set_ready(&self) {
        self.state().lifecycle = Lifecycle::Running;
    }

    /// Not ready whatever the partitions do, with a one-line reason (starting, shutting down).
    pub fn set_not_ready(&self, reason: impl Into<String>) {
        self.state().lifecycle = Lifecycle::NotRunning(one_line(reason.into()));
    }

    /// The partitions' state, from the lag sampler: `assigned` partitions, these not ready.
    pub fn set_partitions(&self, assigned: usize, problems: Vec<PartitionProblem>) {
        let mut st = self.state();
        st.assigned = assigned;
        st.problems = problems;
    }

    /// True while the mirror runs its assignment, whatever its partitions do (false while
    /// starting, shutting down, or stopped on an error).
    pub fn is_running(&self) -> bool {
        self.state().lifecycle == Lifecycle::Running
    }

    /// True while running with every partition making progress.
    pub fn is_ready(&self) -> bool {
        if !self.flows.is_empty() {
            return self.flows.iter().all(|(_, r)| r.is_ready());
        }
        let st = self.state();
        st.lifecycle == Lifecycle::Running && st.problems.is_empty()
    }

    /// Why it is not ready (empty when ready).
    pub fn reason(&self) -> String {
        if !self.flows.is_empty() {
            return flows_reason(&self.flows);
        }
        reason_of(&self.state())
    }

    /// The `/readyz` body: `{"status": "ready" | "not_ready", "reason", "assigned_partitions",
    /// "not_ready_partitions": [{"topic", "partition", "state", "reason", "lag_records",
    /// "no_progress_seconds"}]}`.
    pub fn to_json(&self) -> String {
        self.report().1
    }

    /// Whether ready, and the `/readyz` body, from one snapshot (they always agree).
    pub fn report(&self) -> (bool, String) {
        if !self.flows.is_empty() {
            return self.flows_report();
        }
        let st = self.state();
        let ready = st.lifecycle == Lifecycle::Running && st.problems.is_empty();
        let reason = reason_of(&st);
        let partitions: Vec<serde_json::Value> = st
            .problems
            .iter()
            .map(|p| {
                json!({
                    "topic": p.partition.topic(),
                    "partition": p.partition.partition(),
                    "state": p.state,
                    "reason": p.reason,
                    "lag_records": p.lag_records,
                    "no_progress_seconds": (p.no_progress_seconds * 10.0).round() / 10.0,
                })
            })
            .collect();
        let body = json!({
            "status": if ready { "ready" } else { "not_ready" },
            "reason": reason,
            "assigned_partitions": st.assigned,
            "not_ready_partitions": partitions,
        });
        (ready, format!("{body}\n"))
    }
}

impl Readiness {
    /// The `/readyz` answer of several flows.
    fn flows_report(&self) -> (bool, String) {
        let mut ready = true;
        let mut assigned = 0u64;
        let mut partitions = Vec::new();
        let mut flows = Vec::new();
        for (name, r) in self.flows.iter() {
            let (flow_ready, body) = r.report();
            ready &= flow_ready;
            let mut v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            assigned += v["assigned_partitions"].as_u64().unwrap_or(0);
            if let Some(list) = v["not_ready_partitions"].as_array_mut() {
                for p in list.iter_mut() {
                    p["flow"] = json!(name);
                }
                partitions.extend(list.iter().cloned());
            }
            v["flow"] = json!(name);
            flows.push(v);
        }
        let body = json!({
            "status": if ready { "ready" } else { "not_ready" },
            "reason": if ready { String::new() } else { flows_reason(&self.flows) },
            "assigned_partitions": assigned,
            "not_ready_partitions": partitions,
            "flows": flows,
        });
        (ready, format!("{body}\n"))
    }
}

/// `flow a->b: <reason>; flow b->a: <reason>` over the flows that are not ready.
fn flows_reason(flows: &[(String, Readiness)]) -> String {
    flows
        .iter()
        .filter(|(_, r)| !r.is_ready())
        .map(|(name, r)| format!("flow {name}: {}", r.reason()))
        .collect::<Vec<_>>()
        .join("; ")
}

fn reason_of(st: &ReadyState) -> String {
    match &st.lifecycle {
        Lifecycle::NotRunning(r) => r.clone(),
        Lifecycle::Running if st.problems.is_empty() => String::new(),
        Lifecycle::Running => {
            let mut states: Vec<&str> = st.problems.iter().map(|p| p.state).collect();
            states.dedup();
            format!(
                "{} of {} assigned partitions are not making progress ({})",
                st.problems.len(),
                st.assigned,
                states.join(", ")
            )
        }
    }
}

fn one_line(s: String) -> String {
    s.lines().next().unwrap_or("").to_string()
}

/// The main runtime's heartbeat, read by `/healthz`. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Liveness {
    inner: Arc<LivenessInner>,
}

#[derive(Debug)]
struct LivenessInner {
    base: Instant,
    /// Milliseconds after `base` of the last beat.
    last_beat_ms: AtomicU64,
    timeout: Duration,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness::new(LIVENESS_TIMEOUT)
    }
}

impl Liveness {
    /// Alive now; dead once no beat came for `timeout`.
    pub fn new(timeout: Duration) -> Liveness {
        Liveness {
            inner: Arc::new(LivenessInner {
                base: Instant::now(),
                last_beat_ms: AtomicU64::new(0),
                timeout,
            }),
        }
    }

    /// Records a beat at `now`.
    pub fn beat_at(&self, now: Instant) {
        let ms = u64::try_from(now.saturating_duration_since(self.inner.base).as_millis())
            .unwrap_or(u64::MAX);
        self.inner.last_beat_ms.fetch_max(ms, Ordering::AcqRel);
    }

    /// Records a beat now.
    pub fn beat(&self) {
        self.beat_at(Instant::now());
    }

    /// Time since the last beat, as of `now`.
    pub fn age(&self, now: Instant) -> Duration {
        let last = self.inner.base
            + Duration::from_millis(self.inner.last_beat_ms.load(Ordering::Acquire));
        now.saturating_duration_since(last)
    }

    /// True while the last beat is younger than the timeout.
    pub fn is_alive(&self, now: Instant) -> bool {
        self.age(now) < self.inner.timeout
    }

    /// Beats every second from a task on the current runtime until `stop` is cancelled. Call it
    /// from the runtime whose health `/healthz` should report (the mirror's).
    pub fn spawn_heartbeat(&self, stop: CancellationToken) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(HEARTBEAT_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => me.beat(),
                    () = stop.cancelled() => return,
                }
            }
        })
    }

    /// The `/healthz` body: `{"status": "ok" | "wedged", "heartbeat_age_seconds",
    /// "timeout_seconds", "reason"}`.
    pub fn to_json(&self, now: Instant) -> String {
        let age = self.age(now).as_secs_f64();
        let alive = self.is_alive(now);
        let timeout = self.inner.timeout.as_secs_f64();
        let reason = if alive {
            String::new()
        } else {
            format!(
                "the mirror's runtime has not run its heartbeat for {age:.1} s (limit {timeout:.0} s): \
                 it is wedged; restart the process"
            )
        };
        let body = json!({
            "status": if alive { "ok" } else { "wedged" },
            "heartbeat_age_seconds": (age * 10.0).round() / 10.0,
            "timeout_seconds": timeout,
            "reason": reason,
        });
        format!("{body}\n")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p).unwrap()
    }

    fn lag(acked: i64, records: Option<i64>, since: u64, end_age: u64) -> Lag {
        Lag {
            acked,
            records,
            seconds: records.map(|r| r as f64 / 10.0),
            since_progress: Duration::from_secs(since),
            end_age: Duration::from_secs(end_age),
        }
    }

    #[test]
    fn partition_problems_table() {
        let limit = Duration::from_secs(60);
        let none = HashMap::new();
        // (name, lag, stopped?, blocked?, expected state or None for ready)
        #[rustfmt::skip]
        #[allow(clippy::type_complexity)]
        let cases: &[(&str, Lag, bool, bool, Option<&str>)] = &[
            ("caught up", lag(10, Some(0), 0, 1), false, false, None),
            ("behind but moving", lag(10, Some(500), 5, 1), false, false, None),
            ("behind, stuck under the limit", lag(10, Some(500), 59, 1), false, false, None),
            ("behind, stuck at the limit", lag(10, Some(500), 60, 1), false, false, Some("stalled")),
            ("caught up and idle for long", lag(10, Some(0), 0, 5), false, false, None),
            ("stopped, even when caught up", lag(10, Some(0), 0, 1), true, false, Some("stopped")),
            ("blocked at once", lag(10, Some(5), 1, 1), false, true, Some("blocked")),
            ("stopped wins over blocked", lag(10, Some(5), 100, 1), true, true, Some("stopped")),
            ("not started in time", lag(-1, None, 61, 61), false, false, Some("not_started")),
            ("not started yet", lag(-1, None, 10, 10), false, false, None),
            ("source silent", lag(10, Some(0), 0, 60), false, false, Some("no_end_offset")),
            ("end unknown, stuck", lag(10, None, 70, 10), false, false, Some("stalled")),
        ];
        for (name, l, stopped, blocked, want) in cases {
            let failures = if *stopped {
                vec![(tp(0), "record too large".to_string())]
            } else {
                vec![]
            };
            let blocked_map: HashMap<TopicPartition, String> = if *blocked {
                [(tp(0), "TOPIC_AUTHORIZATION_FAILED".to_string())].into()
            } else {
                none.clone()
            };
            let got = partition_problems(&[(tp(0), *l)], &failures, &blocked_map, limit);
            assert_eq!(got.first().map(|p| p.state), *want, "{name}: {got:?}");
            assert!(got.len() <= 1, "{name}: one problem per partition");
        }
    }

    #[test]
    fn readiness_needs_running_and_no_problems() {
        let r = Readiness::default();
        assert!(!r.is_ready());
        assert!(r.reason().starts_with("starting"));
        r.set_ready();
        assert!(r.is_ready());
        assert_eq!(r.reason(), "");
        let problems = partition_problems(
            &[
                (tp(0), lag(10, Some(0), 0, 0)),
                (tp(1), lag(10, Some(5), 0, 0)),
            ],
            &[(tp(1), "the record is too large\nsecond line".to_string())],
            &HashMap::new(),
            Duration::from_secs(60),
        );
        r.set_partitions(2, problems);
        assert!(!r.is_ready());
        assert_eq!(
            r.reason(),
            "1 of 2 assigned partitions are not making progress (stopped)"
        );
        let body: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(body["status"], "not_ready");
        assert_eq!(body["assigned_partitions"], 2);
        assert_eq!(body["not_ready_partitions"][0]["topic"], "t");
        assert_eq!(body["not_ready_partitions"][0]["partition"], 1);
        assert_eq!(body["not_ready_partitions"][0]["state"], "stopped");
        assert_eq!(body["not_ready_partitions"][0]["lag_records"], 5);
        // It resumes (revoked and assigned again, or healed): ready again.
        r.set_partitions(2, vec![]);
        assert!(r.is_ready());
        let body: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(body["status"], "ready");
        r.set_not_ready("shutting down\nmore");
        assert!(!r.is_ready());
        assert_eq!(r.reason(), "shutting down");
    }

    #[test]
    fn liveness_follows_the_heartbeat() {
        let l = Liveness::new(Duration::from_secs(30));
        let t0 = Instant::now();
        l.beat_at(t0);
        assert!(l.is_alive(t0 + Duration::from_secs(29)));
        assert!(!l.is_alive(t0 + Duration::from_secs(30)));
        let body: serde_json::Value =
            serde_json::from_str(&l.to_json(t0 + Duration::from_secs(31))).unwrap();
        assert_eq!(body["status"], "wedged");
        assert!(body["reason"].as_str().unwrap().contains("wedged"));
        l.beat_at(t0 + Duration::from_secs(31));
        assert!(l.is_alive(t0 + Duration::from_secs(32)));
        // An older beat never moves the stamp back.
        l.beat_at(t0);
        assert!(l.is_alive(t0 + Duration::from_secs(32)));
    }
}
