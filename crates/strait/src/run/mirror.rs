//! `strait run`: the mirror's main loop.
//!
//! Connects to both clusters, discovers and creates topics, joins the consumer group
//! `mirror.group_id` on the source (several `strait` processes with the same group id share the
//! partitions through Kafka's own group protocol), and drives the forwarder: partitions assigned
//! by the group are mirrored, revoked ones are drained and committed before the group may move
//! them. A change in the set of matching topics leaves and rejoins the group with the new
//! subscription; partition increases are picked up by the group itself.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use strait_forward::observe::Observer;
use strait_forward::pipeline::{CommitHook, NoCommitHook};
use strait_forward::{
    Compression as Codec, ExactlyOnce, Forwarder, GroupPositions, Route, Settings, WireSource,
    WireTarget,
};
use strait_wire::group::{Assignor, GroupConfig, GroupEvent, GroupMember, GroupProtocol};
use strait_wire::{Client, TopicPartition};
use tokio_util::sync::CancellationToken;

use crate::config::connect::connect;
use crate::config::{self, Config};
use crate::error::{Error, Result};
use crate::failover::copies::ExcludeCopies;
use crate::failover::syncs::{GatedPositions, SyncWriter};
use crate::observe::http::Readiness;
use crate::observe::metrics::{Metrics, RebalanceCause};
use crate::observe::sampler::{Sampler, SamplerSettings};
use crate::run::group_timeouts;
use crate::run::retry::RefreshRetry;
use crate::run::topic_gate::Holds;
use crate::run::topics::{SelectedTopic, Topics};
use strait_forward::log_limit::{self, LogLimiter, Verdict};

/// The forwarder settings a config asks for.
pub fn settings(config: &Config) -> Settings {
    let m = &config.mirror;
    let mut s = Settings::default();
    s.max_in_flight = usize::from(m.max_in_flight).clamp(1, 5);
    s.produce_connections = usize::from(m.produce_connections).clamp(1, 8);
    s.memory_budget = usize::try_from(m.memory_budget.bytes()).unwrap_or(usize::MAX);
    s.max_decompressed_bytes =
        usize::try_from(m.max_decompressed_batch_bytes.bytes()).unwrap_or(usize::MAX);
    s.commit_interval = m.commit_interval;
    s.drain_timeout = m.drain_timeout;
    s.batch_size = usize::try_from(m.batch_size.bytes()).unwrap_or(usize::MAX);
    s.isolation = m.isolation;
    s.start = m.start;
    s.on_offset_out_of_range = m.on_offset_out_of_range;
    // A partition's retries (a new target topic settling, a leader moving) back off as the
    // target's client does: `retry.backoff.ms` .. `retry.backoff.max.ms` of [target].
    if let Ok(target) = config.target.client_config() {
        s.retry_backoff = target.retry_backoff();
        s.retry_backoff_max = target.retry_backoff_max();
    }
    // Exhaustive: a new configuration word must say which codec it means.
    s.compression = match m.compression {
        config::Compression::Keep => None,
        config::Compression::None => Some(Codec::None),
        config::Compression::Gzip => Some(Codec::Gzip),
        config::Compression::Snappy => Some(Codec::Snappy),
        config::Compression::Lz4 => Some(Codec::Lz4),
        config::Compression::Zstd => Some(Codec::Zstd),
    };
    s.exactly_once = m.exactly_once.as_ref().map(|eos| {
        // Positions in the group of the same name on the target, transactional ids prefixed
        // with it: stable across restarts and shared by every instance of the group.
        let mut e = ExactlyOnce::new(m.group_id.clone());
        e.transaction_interval = eos.transaction_interval;
        e.transaction_max_bytes = eos.transaction_max_bytes.0;
        e.transaction_timeout = eos.transaction_timeout;
        e.position_refresh_interval = eos.position_refresh_interval;
        // Past the session timeout the group has revoked a partition from a paused instance.
        e.fenced_backoff = m.session_timeout + Duration::from_secs(5);
        e
    });
    s
}

/// The lag sampler's settings a config asks for.
fn sampler_settings(config: &Config) -> SamplerSettings {
    SamplerSettings {
        interval: config.metrics.lag_interval,
        stall_timeout: config.metrics.stall_timeout,
        isolation: config.mirror.isolation,
    }
}

/// The target topics the mirror will write, named in the grants a denied producer id advises
/// (`strait check` names them the same way). Best effort: on an error the advice keeps its
/// `<topic>` placeholder and the topic loop reports the error.
async fn written_topics(source: &Client, target: &Client, config: &Config) -> Vec<String> {
    match Topics::new(source.clone(), target.clone(), config.clone())
        .discover()
        .await
    {
        Ok(selected) => selected.into_values().map(|t| t.target).collect(),
        Err(e) => {
            tracing::debug!(error = %e, "cannot list the topics to mirror yet");
            Vec::new()
        }
    }
}

/// The forwarder the mirror runs: source positions in the mirror's group on the source, gated
/// by the offset syncs when checkpoints are on.
pub type MirrorForwarder =
    Forwarder<WireSource, WireTarget, GatedPositions<ExcludeCopies<GroupPositions>>>;

/// Runs the mirror until `shutdown` is cancelled; then drains in-flight batches, commits and
/// leaves the group. With `offset_syncs` (checkpoints on), every commit of source positions
/// first persists the offset syncs that map them.
pub async fn run(
    config: Config,
    observer: Arc<dyn Observer>,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    offset_syncs: Option<Arc<SyncWriter>>,
    shutdown: CancellationToken,
) -> Result<()> {
    // Start-up waits on clusters that may be unreachable: a signal must still end it.
    let (source, target) = tokio::select! {
        c = connect(&config) => c?,
        _ = shutdown.cancelled() => return Ok(()),
    };
    let positions = GroupPositions::new(&source, &config.mirror.group_id);
    // Checkpoints on: the offset maps follow the forwarder's commit path (not its observer).
    let commit_hook: Arc<dyn CommitHook> = match &offset_syncs {
        Some(writer) => writer.maps().clone(),
        None => Arc::new(NoCommitHook),
    };
    let written = tokio::select! {
        w = written_topics(&source, &target, &config) => w,
        _ = shutdown.cancelled() => return Ok(()),
    };
    let settings = settings(&config);
    // Records strait failback copied to this source are not mirrored back (failover/copies.rs).
    let excluded = ExcludeCopies::new(
        positions.clone(),
        &source,
        &config.mirror.group_id,
        settings.excluded.clone(),
    );
    let forwarder = tokio::select! {
        f = Forwarder::with_commit_hook(
            WireSource::new(source.clone()),
            WireTarget::new(target.clone()).with_written_topics(written),
            GatedPositions::new(excluded, offset_syncs),
            settings,
            observer.clone(),
            commit_hook,
        ) => f,
        _ = shutdown.cancelled() => return Ok(()),
    };
    let forwarder: MirrorForwarder = forwarder.map_err(|source| Error::Start {
        alias: config.target.alias.clone(),
        source: Box::new(source),
    })?;
    // Hot reload (crate::run::reload): the topic filters follow the live configuration.
    let topics = Arc::new(
        Topics::new(source.clone(), target, config.clone())
            .with_metrics(metrics.clone())
            .with_live(crate::config::live::live_for(&config))
            .with_gate(),
    );
    // Runs the first topic-config sync beside the group join, releasing each target topic's
    // partitions as its sync ends; ends with the mirror.
    let _settler = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(topics.clone().settle()));
    // Lag and readiness follow the partitions from here on, whatever the mirror loop waits on.
    let sampler_stop = shutdown.child_token();
    let sampler = tokio::spawn(
        Sampler::new(
            source.clone(),
            forwarder.clone(),
            metrics.clone(),
            readiness.clone(),
            sampler_settings(&config),
        )
        .run(sampler_stop.clone()),
    );
    let refresh = config
        .mirror
        .refresh_interval
        .max(Duration::from_millis(100));
    let mirror = Mirror {
        config: &config,
        source: &source,
        topics: &topics,
        forwarder: &forwarder,
        positions: &positions,
        observer: &observer,
        metrics: &metrics,
        readiness: &readiness,
        shutdown: &shutdown,
        refresh,
    };
    let result = mirror.run().await;
    readiness.set_not_ready("shutting down");
    sampler_stop.cancel();
    let _ = sampler.await;
    let drained = forwarder.shutdown().await;
    result?;
    drained.map_err(|e| Error::FinalCommit(Box::new(e)))
}

/// What the mirror's loops share, set up once by [`run`] and kept across group rejoins.
struct Mirror<'a> {
    config: &'a Config,
    source: &'a Client,
    topics: &'a Topics,
    forwarder: &'a MirrorForwarder,
    positions: &'a GroupPositions,
    observer: &'a Arc<dyn Observer>,
    metrics: &'a Metrics,
    readiness: &'a Readiness,
    shutdown: &'a CancellationToken,
    /// `mirror.refresh_interval`, at least 100 ms.
    refresh: Duration,
}

/// What outlives one group membership: the refresh backoff, the log limits and the group
/// protocol the first join chose.
struct Pacing {
    retry: RefreshRetry,
    stopped: StoppedPartitions,
    /// `auto` is resolved by the first join; rejoins keep that answer instead of asking the
    /// coordinator again (a lookup that fails then would end the mirror).
    protocol: GroupProtocol,
    /// `mirror.session_timeout` still to be set on the consumer protocol's group (once).
    group_timeouts: bool,
}

enum Next {
    Stop,
    Rejoin,
}

/// How long leaving the group may take at shutdown or rejoin.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(5);

impl Mirror<'_> {
    /// Syncs topics, joins the group with the matching ones and mirrors what it assigns, until
    /// shutdown; rejoins when the set of matching topics changes.
    async fn run(&self) -> Result<()> {
        let mut first = true;
        let mut pacing = Pacing {
            retry: RefreshRetry::new(self.refresh),
            stopped: StoppedPartitions::default(),
            protocol: self.config.mirror.group_protocol,
            group_timeouts: group_timeouts::wanted(self.config),
        };
        loop {
            let synced = tokio::select! {
                s = self.topics.sync() => s,
                _ = self.shutdown.cancelled() => return Ok(()),
            };
            let selected = match synced {
                Ok(s) => {
                    refresh_succeeded(&mut pacing.retry);
                    s
                }
                // At start a bad setup (no ACL, no topic creation right) is fatal and says why;
                // later a failing refresh is retried with backoff before (re)joining the group.
                Err(e) if first => return Err(e),
                Err(e) => {
                    let delay = refresh_failed(&mut pacing.retry, &e);
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => continue,
                        _ = self.shutdown.cancelled() => return Ok(()),
                    }
                }
            };
            first = false;
            if selected.is_empty() {
                self.readiness.set_ready();
                tracing::info!(
                    "no source topic matches mirror.topics yet; checking again in {:?}",
                    self.refresh
                );
                tokio::select! {
                    _ = tokio::time::sleep(self.refresh) => continue,
                    _ = self.topics.filters_changed() => continue,
                    _ = self.shutdown.cancelled() => return Ok(()),
                }
            }
            tracing::info!(topics = ?selected.keys().collect::<Vec<_>>(), "mirroring");
            let group = group_config(
                self.config,
                selected.keys().cloned().collect(),
                pacing.protocol,
            )?;
            let mut member = tokio::select! {
                m = GroupMember::join(self.source, group) => m.map_err(Error::Wire)?,
                _ = self.shutdown.cancelled() => return Ok(()),
            };
            pacing.protocol = member.protocol();
            if pacing.protocol == GroupProtocol::Consumer && pacing.group_timeouts {
                pacing.group_timeouts = false;
                group_timeouts::apply(self.source, self.config);
            }
            tracing::info!(
                group = %self.config.mirror.group_id,
                protocol = pacing.protocol.name(),
                "joining the consumer group"
            );
            let outcome = self.member_loop(&mut member, &selected, &mut pacing).await;
            self.release_and_leave(member).await;
            match outcome? {
                Next::Stop => return Ok(()),
                Next::Rejoin => continue,
            }
        }
    }

    /// Releases every partition (so the next owner starts from our final commit), then leaves
    /// the group, bounded: an unreachable coordinator expires the membership by itself.
    async fn release_and_leave(&self, member: GroupMember) {
        let owned: Vec<TopicPartition> = self
            .forwarder
            .assigned()
            .into_iter()
            .map(|r| r.source)
            .collect();
        tracing::debug!(
            partitions = owned.len(),
            "releasing partitions before leaving the group"
        );
        if let Err(e) = self.forwarder.revoke(&owned).await {
            tracing::warn!(error = %e, "final commit before leaving the group failed");
        }
        tracing::debug!("leaving the group");
        match tokio::time::timeout(LEAVE_TIMEOUT, member.close()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "leaving the consumer group failed; the coordinator will expire the membership");
            }
            Err(_) => {
                tracing::warn!(
                    "leaving the consumer group took longer than {LEAVE_TIMEOUT:?}; the coordinator will expire the membership"
                );
            }
        }
    }

    /// Follows one group membership: starts assigned partitions, drains revoked ones, and
    /// refreshes the topics every interval (at once when the live filters change).
    async fn member_loop(
        &self,
        member: &mut GroupMember,
        selected: &BTreeMap<String, SelectedTopic>,
        pacing: &mut Pacing,
    ) -> Result<Next> {
        // The next refresh: one interval after a success, a growing backoff after failures.
        let mut next_refresh = tokio::time::Instant::now() + self.refresh;
        let mut reported: Option<Vec<TopicPartition>> = None;
        let protocol = member.protocol().name();
        let mut joined = false;
        // Assigned partitions whose target topic is held (`run/topic_gate.rs`): started once
        // it is released.
        let mut holds = self.topics.holds();
        let mut held: Vec<Route> = Vec::new();
        loop {
            tokio::select! {
                event = member.next_event() => match event {
                    // `partitions` are added to what this instance mirrors: the whole assignment
                    // on the classic eager protocol (everything was revoked before), only the new
                    // ones on the consumer protocol and cooperative classic, or none when only
                    // the member epoch moved on.
                    Some(GroupEvent::Assigned { generation, partitions }) => {
                        self.metrics.record_generation(generation.generation_id);
                        self.positions.set_generation(generation);
                        if !partitions.is_empty() {
                            let cause = if joined { RebalanceCause::Assigned } else { RebalanceCause::Joined };
                            joined = true;
                            self.metrics.record_group_rebalance(protocol, cause, &partitions, std::time::Instant::now());
                        }
                        let routes = routes(&partitions, selected)?;
                        let (ready, waiting) = split(&mut holds, routes);
                        if !waiting.is_empty() {
                            tracing::info!(
                                partitions = waiting.len(),
                                "partitions wait for their target topic's first config sync; each \
                                 starts when its topic's sync is done"
                            );
                        }
                        held.extend(waiting);
                        self.forwarder.assign(ready).await?;
                        // Held partitions are this instance's too: announced with the others.
                        let owned: Vec<TopicPartition> = self
                            .forwarder
                            .assigned()
                            .into_iter()
                            .chain(held.iter().cloned())
                            .map(|r| r.source)
                            .collect();
                        // What this instance mirrors now (operators and tests read it), logged
                        // and counted as a rebalance once per change (an Assigned that only
                        // announces a new member epoch changes nothing); the group logs what
                        // each rebalance moved.
                        if !partitions.is_empty() || reported.as_ref() != Some(&owned) {
                            tracing::info!(partitions = owned.len(), "assigned");
                            self.observer.rebalance(&owned);
                            reported = Some(owned);
                        }
                        self.readiness.set_ready();
                    }
                    Some(GroupEvent::Revoked { partitions, lost, done }) => {
                        tracing::info!(partitions = partitions.len(), lost, "revoked");
                        held.retain(|r| !partitions.contains(&r.source));
                        self.metrics.record_revoked(partitions.len());
                        let started = std::time::Instant::now();
                        let cause = if lost { RebalanceCause::Lost } else { RebalanceCause::Revoked };
                        self.metrics.record_group_rebalance(protocol, cause, &partitions, started);
                        if let Err(e) = self.forwarder.revoke(&partitions).await {
                            // A lost membership cannot commit; the next owner re-mirrors from the
                            // last successful commit (duplicates, never a gap).
                            tracing::warn!(error = %e, "commit on revoke failed");
                        }
                        done.done();
                        let elapsed = started.elapsed();
                        if !lost {
                            self.metrics.record_drained(partitions.len(), elapsed);
                        }
                        tracing::info!(partitions = partitions.len(), ?elapsed, "released the revoked partitions");
                    }
                    Some(GroupEvent::Failed(e)) => return Err(Error::Wire(e)),
                    Some(_) => {}
                    None => return Ok(Next::Rejoin),
                },
                changed = holds.changed(), if !held.is_empty() => {
                    let ready = match changed {
                        Ok(()) => {
                            let (ready, waiting) = split(&mut holds, std::mem::take(&mut held));
                            held = waiting;
                            ready
                        }
                        // The topics are gone with the mirror: nothing holds them any more.
                        Err(_) => std::mem::take(&mut held),
                    };
                    if !ready.is_empty() {
                        tracing::debug!(partitions = ready.len(), waiting = held.len(), "starting partitions whose target topics are ready");
                        self.forwarder.assign(ready).await?;
                    }
                }
                // A reload of the topic filters rediscovers at once.
                _ = refresh_due(next_refresh, self.topics) => {
                    let synced = tokio::select! {
                        s = self.topics.sync() => s,
                        _ = self.shutdown.cancelled() => return Ok(Next::Stop),
                    };
                    match synced {
                        Ok(now) => {
                            refresh_succeeded(&mut pacing.retry);
                            next_refresh = tokio::time::Instant::now() + self.refresh;
                            if now.keys().ne(selected.keys()) {
                                tracing::info!("the set of matching topics changed; rejoining the group");
                                return Ok(Next::Rejoin);
                            }
                        }
                        Err(e) => {
                            next_refresh =
                                tokio::time::Instant::now() + refresh_failed(&mut pacing.retry, &e);
                        }
                    }
                    pacing.stopped.report(
                        crate::error::failure_messages(&self.forwarder.failures()),
                        std::time::Instant::now(),
                    );
                }
                _ = self.shutdown.cancelled() => return Ok(Next::Stop),
            }
        }
    }
}

/// The group membership `mirror.*` asks for, subscribed to `topics`, with `protocol` (the
/// configured one, or what the first join resolved `auto` to).
fn group_config(
    config: &Config,
    topics: Vec<String>,
    protocol: GroupProtocol,
) -> Result<GroupConfig> {
    GroupConfig::new(config.mirror.group_id.clone(), topics)
        .and_then(|g| g.with_session_timeout(config.mirror.session_timeout))
        .and_then(|g| {
            g.with_heartbeat_interval(group_timeouts::heartbeat_for(config.mirror.session_timeout))
        })
        .and_then(|g| match &config.mirror.instance_id {
            Some(id) => g.with_group_instance_id(id.clone()),
            None => Ok(g),
        })
        .and_then(|g| g.with_assignors(&assignors(&config.mirror)))
        .and_then(|g| g.with_remote_assignor(config.mirror.group_remote_assignor.clone()))
        .map(|g| {
            let g = g.with_protocol(protocol);
            // Dynamic members always leave; a static one only when removed for good.
            match config.mirror.instance_id {
                Some(_) => g.with_leave_on_close(config.mirror.leave_group_on_shutdown),
                None => g,
            }
        })
        .map_err(Error::Wire)
}

/// `routes` that may start now, and those whose target topic is held (marking the holds seen).
fn split(
    holds: &mut tokio::sync::watch::Receiver<Holds>,
    routes: Vec<Route>,
) -> (Vec<Route>, Vec<Route>) {
    holds.borrow_and_update().split(routes)
}

/// Resolves at `at`, or earlier when the live topic filters change.
async fn refresh_due(at: tokio::time::Instant, topics: &Topics) {
    tokio::select! {
        _ = tokio::time::sleep_until(at) => {}
        _ = topics.filters_changed() => {}
    }
}

/// The group's assignors, most preferred first, from `mirror.partition_assignment_strategy`.
fn assignors(m: &config::Mirror) -> Vec<Assignor> {
    m.partition_assignment_strategy.clone()
}

/// Logs a failed refresh (rate-limited) and returns the delay before the next attempt.
fn refresh_failed(retry: &mut RefreshRetry, e: &Error) -> Duration {
    let plan = retry.failed(&e.to_string(), std::time::Instant::now());
    match plan.log {
        Verdict::Quiet => tracing::debug!(
            error = %e, failures = plan.failures,
            "topic refresh failed again; retrying in {:.1?}", plan.delay
        ),
        verdict => tracing::error!(
            error = %e, failures = plan.failures, "{}",
            refresh_message(verdict, plan.delay, retry.max_delay())
        ),
    }
    plan.delay
}

/// The log message for a failed topic refresh (the error is a field of the line).
fn refresh_message(verdict: Verdict, delay: Duration, max: Duration) -> String {
    let every = config::format_duration(log_limit::DEFAULT_EVERY);
    let max = config::format_duration(max);
    match verdict {
        Verdict::Again { suppressed } => format!(
            "topic refresh still failing ({suppressed} identical failures not logged in the last \
             {every}); retrying in {delay:.1?}"
        ),
        _ => format!(
            "topic refresh failed; retrying in {delay:.1?}, then less and less often (at least \
             every {max}); the same error is logged again every {every} with a count"
        ),
    }
}

fn refresh_succeeded(retry: &mut RefreshRetry) {
    let failures = retry.succeeded();
    if failures > 0 {
        tracing::info!(failures, "topic refresh works again");
    }
}

/// The log message for a stopped partition (the partition and error are fields of the line).
fn stopped_message(verdict: Verdict) -> String {
    let every = config::format_duration(log_limit::DEFAULT_EVERY);
    match verdict {
        Verdict::Again { suppressed } => format!(
            "partition is still stopped and needs attention ({suppressed} identical reports not \
             logged in the last {every})"
        ),
        _ => format!(
            "partition is stopped and needs attention (while it stays stopped with this error, it \
             is reported again every {every} with a count)"
        ),
    }
}

/// Reports partitions stopped on an error: each (partition, error) once at once, then at a slow
/// rate with the number of refreshes it was still stopped at, instead of one line per partition
/// per refresh interval.
#[derive(Debug)]
pub(crate) struct StoppedPartitions {
    log: LogLimiter<(TopicPartition, String)>,
}

impl Default for StoppedPartitions {
    fn default() -> Self {
        StoppedPartitions {
            log: LogLimiter::new(log_limit::DEFAULT_EVERY),
        }
    }
}

impl StoppedPartitions {
    /// Logs what is due among the currently stopped partitions; forgets those no longer stopped,
    /// so that a partition that stops again is reported at once.
    pub(crate) fn report(
        &mut self,
        failures: Vec<(TopicPartition, String)>,
        now: std::time::Instant,
    ) {
        for (tp, err, verdict) in self.due(failures, now) {
            tracing::error!(partition = %tp, error = %err, "{}", stopped_message(verdict));
        }
    }

    /// The (partition, error, verdict) lines to log now.
    fn due(
        &mut self,
        failures: Vec<(TopicPartition, String)>,
        now: std::time::Instant,
    ) -> Vec<(TopicPartition, String, Verdict)> {
        let current: std::collections::HashSet<(TopicPartition, String)> =
            failures.into_iter().collect();
        self.log.retain(|k| current.contains(k));
        let mut due: Vec<(TopicPartition, String, Verdict)> = current
            .into_iter()
            .filter_map(|key| {
                let verdict = self.log.check(&key, now);
                verdict.should_log().then_some((key.0, key.1, verdict))
            })
            .collect();
        due.sort_by(|a, b| (a.0.topic(), a.0.partition()).cmp(&(b.0.topic(), b.0.partition())));
        due
    }
}

fn routes(
    partitions: &[TopicPartition],
    selected: &BTreeMap<String, SelectedTopic>,
) -> Result<Vec<Route>> {
    partitions
        .iter()
        .map(|tp| {
            let target_topic = selected
                .get(tp.topic())
                .map_or_else(|| tp.topic().to_string(), |t| t.target.clone());
            let target = TopicPartition::new(&target_topic, tp.partition()).map_err(Error::Wire)?;
            Ok(Route {
                source: tp.clone(),
                target,
            })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn stopped(partitions: std::ops::Range<i32>, err: &str) -> Vec<(TopicPartition, String)> {
        partitions
            .map(|p| (TopicPartition::new("my-topic", p).unwrap(), err.to_string()))
            .collect()
    }

    #[test]
    fn the_group_offers_round_robin_first_by_default() {
        let loaded = Config::from_toml_str(
            "[source]\n\"bootstrap.servers\" = \"a:1\"\n[target]\n\"bootstrap.servers\" = \"b:1\"\n",
            std::path::Path::new("t.toml"),
            &config::Environment::default(),
        )
        .unwrap();
        assert_eq!(
            assignors(&loaded.config.mirror),
            [Assignor::RoundRobin, Assignor::Range]
        );
    }

    #[test]
    fn partitions_retry_at_the_target_clients_backoff() {
        let settings_of = |target_extra: &str| {
            let loaded = Config::from_toml_str(
                &format!(
                    "[source]\n\"bootstrap.servers\" = \"a:1\"\n[target]\n\"bootstrap.servers\" = \"b:1\"\n{target_extra}"
                ),
                std::path::Path::new("t.toml"),
                &config::Environment::default(),
            )
            .unwrap();
            let s = settings(&loaded.config);
            (s.retry_backoff, s.retry_backoff_max)
        };
        // The Java clients' defaults: a new target topic's partitions are retried at least
        // once a second while the broker creates their logs.
        assert_eq!(
            settings_of(""),
            (Duration::from_millis(100), Duration::from_secs(1))
        );
        assert_eq!(
            settings_of("\"retry.backoff.ms\" = \"50\"\n\"retry.backoff.max.ms\" = \"5000\"\n"),
            (Duration::from_millis(50), Duration::from_secs(5))
        );
    }

    #[test]
    fn stopped_partitions_are_reported_once_then_slowly_with_the_count() {
        // 12 partitions stopped for 10 minutes, checked every 10 s: 720 lines before.
        let t0 = std::time::Instant::now();
        let mut s = StoppedPartitions::default();
        let mut lines = Vec::new();
        for tick in 0..60u64 {
            let now = t0 + Duration::from_secs(10 * tick);
            lines.extend(s.due(stopped(0..12, "TOPIC_AUTHORIZATION_FAILED"), now));
        }
        assert_eq!(lines.len(), 24, "12 at once, 12 after 5 minutes");
        assert!(lines[..12].iter().all(|l| l.2 == Verdict::First));
        assert!(
            lines[12..]
                .iter()
                .all(|l| l.2 == Verdict::Again { suppressed: 29 }),
            "{:?}",
            lines[12]
        );
        assert_eq!(lines[0].0.partition(), 0);
        assert_eq!(lines[11].0.partition(), 11);
    }

    #[test]
    fn repeated_errors_are_logged_with_their_count() {
        assert_eq!(
            stopped_message(Verdict::First),
            "partition is stopped and needs attention (while it stays stopped with this error, it \
             is reported again every 5m with a count)"
        );
        assert_eq!(
            stopped_message(Verdict::Again { suppressed: 29 }),
            "partition is still stopped and needs attention (29 identical reports not logged in \
             the last 5m)"
        );
        assert_eq!(
            refresh_message(
                Verdict::First,
                Duration::from_millis(750),
                Duration::from_secs(60)
            ),
            "topic refresh failed; retrying in 750.0ms, then less and less often (at least every \
             1m); the same error is logged again every 5m with a count"
        );
        assert_eq!(
            refresh_message(
                Verdict::Again { suppressed: 6 },
                Duration::from_secs(42),
                Duration::from_secs(60)
            ),
            "topic refresh still failing (6 identical failures not logged in the last 5m); \
             retrying in 42.0s"
        );
    }

    #[test]
    fn a_partition_that_resumes_and_stops_again_is_reported_at_once() {
        let t0 = std::time::Instant::now();
        let mut s = StoppedPartitions::default();
        assert_eq!(s.due(stopped(0..2, "e"), t0).len(), 2);
        assert!(
            s.due(stopped(0..2, "e"), t0 + Duration::from_secs(10))
                .is_empty()
        );
        // Partition 1 resumed; partition 0 now fails differently.
        assert_eq!(
            s.due(stopped(0..1, "other"), t0 + Duration::from_secs(20))
                .len(),
            1
        );
        let again = s.due(stopped(0..2, "e"), t0 + Duration::from_secs(30));
        assert_eq!(again.len(), 2, "{again:?}");
        assert!(again.iter().all(|l| l.2 == Verdict::First));
    }
}
