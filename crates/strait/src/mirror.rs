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
use strait_forward::pipeline::{Isolation, StartPosition};
use strait_forward::{
    Compression as Codec, Forwarder, GroupPositions, OutOfRangePolicy, Route, Settings,
    WireForwarder, WireSource, WireTarget,
};
use strait_wire::group::{GroupConfig, GroupEvent, GroupMember};
use strait_wire::{Client, TopicPartition};
use tokio_util::sync::CancellationToken;

use crate::config::{self, Config};
use crate::error::{Error, Result};
use crate::http::Readiness;
use crate::topics::{SelectedTopic, Topics};

/// The forwarder settings a config asks for.
pub fn settings(config: &Config) -> Settings {
    let m = &config.mirror;
    let mut s = Settings::default();
    s.max_in_flight = usize::from(m.max_in_flight).clamp(1, 5);
    s.memory_budget = usize::try_from(m.memory_budget.bytes()).unwrap_or(usize::MAX);
    s.commit_interval = m.commit_interval;
    s.isolation = match m.isolation {
        config::Isolation::ReadUncommitted => Isolation::ReadUncommitted,
        _ => Isolation::ReadCommitted,
    };
    s.start = match m.start {
        config::StartPosition::Latest => StartPosition::Latest,
        _ => StartPosition::Earliest,
    };
    s.on_offset_out_of_range = match m.on_offset_out_of_range {
        config::OffsetOutOfRange::Earliest => OutOfRangePolicy::Earliest,
        config::OffsetOutOfRange::Latest => OutOfRangePolicy::Latest,
        _ => OutOfRangePolicy::Fail,
    };
    s.compression = match m.compression {
        config::Compression::None => Some(Codec::None),
        config::Compression::Gzip => Some(Codec::Gzip),
        config::Compression::Snappy => Some(Codec::Snappy),
        config::Compression::Lz4 => Some(Codec::Lz4),
        config::Compression::Zstd => Some(Codec::Zstd),
        _ => None,
    };
    s
}

/// Connects to both clusters (fails fast with the connection error if one is unreachable or
/// refuses the credentials).
pub async fn connect(config: &Config) -> Result<(Client, Client)> {
    let source_cfg = config.source.client_config().map_err(Error::Wire)?;
    let target_cfg = config.target.client_config().map_err(Error::Wire)?;
    let source = Client::connect(source_cfg)
        .await
        .map_err(|e| Error::Runtime(format!("source cluster {}: {e}", config.source.alias)))?;
    let target = Client::connect(target_cfg)
        .await
        .map_err(|e| Error::Runtime(format!("target cluster {}: {e}", config.target.alias)))?;
    Ok((source, target))
}

/// Runs the mirror until `shutdown` is cancelled; then drains in-flight batches, commits and
/// leaves the group.
pub async fn run(
    config: Config,
    observer: Arc<dyn Observer>,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> Result<()> {
    let (source, target) = connect(&config).await?;
    let positions = GroupPositions::new(&source, &config.mirror.group_id);
    let forwarder: Arc<WireForwarder> = Arc::new(
        Forwarder::new(
            WireSource::new(source.clone()),
            WireTarget::new(target.clone()),
            positions.clone(),
            settings(&config),
            observer.clone(),
        )
        .await
        .map_err(|e| Error::Runtime(format!("target cluster {}: {e}", config.target.alias)))?,
    );
    let topics = Topics::new(source.clone(), target, config.clone());
    let refresh = config
        .mirror
        .refresh_interval
        .max(Duration::from_millis(100));
    let result = mirror_loop(
        &config, &source, &topics, &forwarder, &positions, &observer, &readiness, &shutdown,
        refresh,
    )
    .await;
    readiness.set_not_ready("shutting down");
    let drained = forwarder.shutdown().await;
    result?;
    drained.map_err(|e| Error::Runtime(format!("final commit failed: {e}")))
}

#[allow(clippy::too_many_arguments)]
async fn mirror_loop(
    config: &Config,
    source: &Client,
    topics: &Topics,
    forwarder: &Arc<WireForwarder>,
    positions: &GroupPositions,
    observer: &Arc<dyn Observer>,
    readiness: &Readiness,
    shutdown: &CancellationToken,
    refresh: Duration,
) -> Result<()> {
    let mut first = true;
    loop {
        let selected = match topics.sync().await {
            Ok(s) => s,
            // At start a bad setup (no ACL, no topic creation right) is fatal and says why;
            // later a failing refresh keeps the current topics and retries.
            Err(e) if first => return Err(e),
            Err(e) => {
                tracing::error!(error = %e, "topic refresh failed; retrying in {refresh:?}");
                BTreeMap::new()
            }
        };
        first = false;
        if selected.is_empty() {
            readiness.set_ready();
            tracing::info!(
                "no source topic matches mirror.topics yet; checking again in {refresh:?}"
            );
            tokio::select! {
                _ = tokio::time::sleep(refresh) => continue,
                _ = shutdown.cancelled() => return Ok(()),
            }
        }
        tracing::info!(topics = ?selected.keys().collect::<Vec<_>>(), "mirroring");
        let names: Vec<String> = selected.keys().cloned().collect();
        let group = GroupConfig::new(config.mirror.group_id.clone(), names.clone())
            .and_then(|g| g.with_session_timeout(config.mirror.session_timeout))
            .and_then(|g| {
                g.with_heartbeat_interval(
                    (config.mirror.session_timeout / 10).max(Duration::from_millis(500)),
                )
            })
            .and_then(|g| match &config.mirror.instance_id {
                Some(id) => g.with_group_instance_id(id.clone()),
                None => Ok(g),
            })
            .map_err(Error::Wire)?;
        let mut member = GroupMember::join(source, group)
            .await
            .map_err(Error::Wire)?;
        let outcome = member_loop(
            &mut member,
            &selected,
            topics,
            forwarder,
            positions,
            observer,
            readiness,
            shutdown,
            refresh,
        )
        .await;
        // Release everything before leaving, so the next owner starts from our final commit.
        let owned: Vec<TopicPartition> =
            forwarder.assigned().into_iter().map(|r| r.source).collect();
        tracing::debug!(
            partitions = owned.len(),
            "releasing partitions before leaving the group"
        );
        if let Err(e) = forwarder.revoke(&owned).await {
            tracing::warn!(error = %e, "final commit before leaving the group failed");
        }
        tracing::debug!("leaving the group");
        if let Err(e) = member.close().await {
            tracing::warn!(error = %e, "leaving the consumer group failed; the coordinator will expire the membership");
        }
        match outcome? {
            Next::Stop => return Ok(()),
            Next::Rejoin => continue,
        }
    }
}

enum Next {
    Stop,
    Rejoin,
}

#[allow(clippy::too_many_arguments)]
async fn member_loop(
    member: &mut GroupMember,
    selected: &BTreeMap<String, SelectedTopic>,
    topics: &Topics,
    forwarder: &Arc<WireForwarder>,
    positions: &GroupPositions,
    observer: &Arc<dyn Observer>,
    readiness: &Readiness,
    shutdown: &CancellationToken,
    refresh: Duration,
) -> Result<Next> {
    let mut tick = tokio::time::interval(refresh);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            event = member.next_event() => match event {
                Some(GroupEvent::Assigned { generation, partitions }) => {
                    positions.set_generation(generation);
                    let routes = routes(&partitions, selected)?;
                    tracing::info!(partitions = partitions.len(), "assigned");
                    observer.rebalance(&partitions);
                    forwarder.assign(routes).await.map_err(|e| Error::Runtime(e.to_string()))?;
                    tracing::debug!("partitions started");
                    readiness.set_ready();
                }
                Some(GroupEvent::Revoked { partitions, lost, done }) => {
                    tracing::info!(partitions = partitions.len(), lost, "revoked");
                    if let Err(e) = forwarder.revoke(&partitions).await {
                        // A lost membership cannot commit; the next owner re-mirrors from the
                        // last successful commit (duplicates, never a gap).
                        tracing::warn!(error = %e, "commit on revoke failed");
                    }
                    done.done();
                }
                Some(GroupEvent::Failed(e)) => return Err(Error::Wire(e)),
                Some(_) => {}
                None => return Ok(Next::Rejoin),
            },
            _ = tick.tick() => {
                let synced = tokio::select! {
                    s = topics.sync() => s,
                    _ = shutdown.cancelled() => return Ok(Next::Stop),
                };
                match synced {
                    Ok(now) if now.keys().ne(selected.keys()) => {
                        tracing::info!("the set of matching topics changed; rejoining the group");
                        return Ok(Next::Rejoin);
                    }
                    Ok(_) => {}
                    Err(e) => tracing::error!(error = %e, "topic refresh failed; retrying in {refresh:?}"),
                }
                for (tp, err) in forwarder.failures() {
                    tracing::error!(partition = %tp, error = %err, "partition is stopped and needs attention");
                }
            }
            _ = shutdown.cancelled() => return Ok(Next::Stop),
        }
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

/// `strait check`: connects, and prints the plan (topics, partitions, target names).
pub async fn check(config: &Config) -> Result<String> {
    use std::fmt::Write;
    let (source, target) = connect(config).await?;
    let topics = Topics::new(source.clone(), target.clone(), config.clone());
    let selected = topics.discover().await?;
    let names: Vec<String> = selected.values().map(|t| t.target.clone()).collect();
    let target_md = target.metadata(Some(&names)).await.map_err(Error::Wire)?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "source {} and target {} are reachable",
        config.source.alias, config.target.alias
    );
    match target.init_producer_id().await {
        Ok(_) => {
            let _ = writeln!(
                out,
                "target: the mirror's principal may produce (InitProducerId succeeded)"
            );
        }
        Err(e) => {
            return Err(Error::Runtime(format!(
                "target cluster {}: {e}",
                config.target.alias
            )));
        }
    }
    let positions = GroupPositions::new(&source, &config.mirror.group_id);
    if !selected.is_empty() {
        let sample: Vec<TopicPartition> = selected
            .values()
            .filter_map(|t| TopicPartition::new(&t.source, 0).ok())
            .collect();
        use strait_forward::pipeline::Positions;
        positions.load(&sample).await.map_err(|e| {
            Error::Runtime(format!(
                "source consumer group {}: {e}",
                config.mirror.group_id
            ))
        })?;
        let _ = writeln!(
            out,
            "source: consumer group {} is readable",
            config.mirror.group_id
        );
    }
    let _ = writeln!(out, "plan ({} topics):", selected.len());
    for t in selected.values() {
        let state = match target_md.topic(&t.target).filter(|ti| ti.error.is_none()) {
            Some(ti) if ti.partitions.len() as i64 >= i64::from(t.partitions) => {
                "exists".to_string()
            }
            Some(ti) => format!("exists with {} partitions, will grow", ti.partitions.len()),
            None if config.mirror.create_topics => "will be created".to_string(),
            None => "MISSING (mirror.create_topics = false)".to_string(),
        };
        let _ = writeln!(
            out,
            "  {} [{} partitions] -> {} ({state})",
            t.source, t.partitions, t.target
        );
    }
    Ok(out)
}
