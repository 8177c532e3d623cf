//! The thin async driver of the lag book ([`crate::observe::lag`]): lists the source's end
//! offsets every `metrics.lag_interval`, evaluates the lag of the forwarder's partitions every
//! second into the gauges, and decides readiness ([`crate::observe::health`]).
//!
//! Apart from [`crate::observe::lag`] so that the pure book depends on nothing here: health and
//! metrics read the book, and this driver reads all three.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strait_forward::Forwarder;
use strait_forward::pipeline::{Positions, Source, Target};
use strait_wire::{Client, Isolation, OffsetSpec, TopicPartition};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::observe::health::{self, Readiness};
use crate::observe::metrics::Metrics;
use crate::observe::progress::{self, Progress};

/// How often the book is evaluated (gauges and readiness), independently of the listing interval.
const EVALUATE_EVERY: Duration = Duration::from_secs(1);

/// Settings of the [`Sampler`].
#[derive(Debug, Clone, Copy)]
pub struct SamplerSettings {
    /// How often end offsets are listed on the source (`metrics.lag_interval`).
    pub interval: Duration,
    /// How long a partition may make no progress while behind before it is not ready
    /// (`metrics.stall_timeout`).
    pub stall_timeout: Duration,
    /// The fetch isolation: `read_committed` lists the last stable offset.
    pub isolation: Isolation,
}

/// The thin async driver: lists end offsets on the source every `interval`, and every second
/// evaluates the lag of the forwarder's partitions into the gauges and readiness.
pub struct Sampler<S: Source, T: Target, P: Positions> {
    source: Client,
    forwarder: Forwarder<S, T, P>,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    settings: SamplerSettings,
}

impl<S: Source, T: Target, P: Positions> Sampler<S, T, P> {
    /// A sampler over the mirror's source client and forwarder.
    pub fn new(
        source: Client,
        forwarder: Forwarder<S, T, P>,
        metrics: Arc<Metrics>,
        readiness: Readiness,
        settings: SamplerSettings,
    ) -> Self {
        Sampler {
            source,
            forwarder,
            metrics,
            readiness,
            settings,
        }
    }

    /// Runs until `stop` is cancelled.
    pub async fn run(self, stop: CancellationToken) {
        tokio::select! {
            () = self.list_loop() => {}
            () = self.evaluate_loop() => {}
            () = stop.cancelled() => {}
        }
    }

    async fn evaluate_loop(&self) {
        let mut tick = tokio::time::interval(EVALUATE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut progress = Progress::default();
        loop {
            tick.tick().await;
            let acked = self.forwarder.acknowledged_positions();
            let now = Instant::now();
            let lags = self.metrics.update_lag(&acked, now);
            let total: i64 = lags.iter().filter_map(|(_, l)| l.records).sum();
            log_progress(progress.observe(total, now));
            let problems = health::partition_problems(
                &lags,
                &crate::error::failure_messages(&self.forwarder.failures()),
                &self.metrics.blocked_partitions(),
                self.settings.stall_timeout,
            );
            self.readiness.set_partitions(acked.len(), problems);
        }
    }

    async fn list_loop(&self) {
        let mut tick = tokio::time::interval(self.settings.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut refresh = false;
        loop {
            tick.tick().await;
            let partitions: Vec<TopicPartition> = self
                .forwarder
                .assigned()
                .into_iter()
                .map(|r| r.source)
                .collect();
            if partitions.is_empty() {
                continue;
            }
            refresh = self.list_once(&partitions, refresh).await;
        }
    }

    /// Lists the end offsets of `partitions`, one request per leader, all leaders at once, each
    /// bounded by the listing interval; returns whether some partition needs fresher metadata.
    async fn list_once(&self, partitions: &[TopicPartition], refresh: bool) -> bool {
        if refresh {
            let mut topics: Vec<String> = partitions.iter().map(|tp| tp.topic().into()).collect();
            topics.sort();
            topics.dedup();
            if let Err(e) = self.source.metadata(Some(&topics)).await {
                tracing::debug!(error = %e, "lag sampler: source metadata refresh failed");
            }
        }
        let md = self.source.cached_metadata();
        let mut by_leader: HashMap<i32, Vec<(TopicPartition, OffsetSpec, i32)>> = HashMap::new();
        let mut stale = false;
        for tp in partitions {
            match md.leader(tp) {
                Some(leader) => {
                    by_leader
                        .entry(leader)
                        .or_default()
                        .push((tp.clone(), OffsetSpec::Latest, -1))
                }
                None => stale = true,
            }
        }
        let bound = self.settings.interval.max(Duration::from_secs(1));
        let mut set = JoinSet::new();
        for (leader, asks) in by_leader {
            let client = self.source.clone();
            let isolation = self.settings.isolation;
            set.spawn(async move {
                let answer = tokio::time::timeout(bound, async {
                    client
                        .broker(leader)
                        .await?
                        .list_offsets(&asks, isolation)
                        .await
                })
                .await;
                (leader, answer)
            });
        }
        while let Some(joined) = set.join_next().await {
            let Ok((leader, answer)) = joined else {
                continue;
            };
            match answer {
                Ok(Ok(listed)) => {
                    let now = Instant::now();
                    for (tp, r) in listed {
                        match r {
                            Ok(l) => {
                                if let Some(end) = l.offset {
                                    self.metrics.record_end_offset(&tp, end, now);
                                }
                            }
                            Err(code) => {
                                tracing::debug!(partition = %tp, leader, error = ?code, "lag sampler: ListOffsets refused");
                                stale = true;
                            }
                        }
                    }
                }
                Ok(Err(e)) => {
                    tracing::debug!(leader, error = %e, "lag sampler: ListOffsets failed");
                    stale = true;
                }
                Err(_) => {
                    tracing::debug!(leader, "lag sampler: ListOffsets timed out");
                    stale = true;
                }
            }
        }
        stale
    }
}

/// The catch-up progress line ([`crate::observe::progress`]).
fn log_progress(report: Option<progress::Report>) {
    match report {
        Some(progress::Report::CatchingUp {
            lag_records,
            rate,
            eta,
        }) => tracing::info!(
            lag_records,
            records_per_second = rate.round(),
            eta = %progress::human(eta),
            "catching up: {lag_records} records behind, {:.0} records/s faster than the source \
             writes, caught up in about {}",
            rate,
            progress::human(eta)
        ),
        Some(progress::Report::CaughtUp { took }) => tracing::info!(
            took = %progress::human(took),
            "caught up: no lag left"
        ),
        None => {}
    }
}
