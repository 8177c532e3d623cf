//! `strait run`: every flow of the configuration in one process.
//!
//! A flow is one source cluster -> one target cluster with its own [`Config`]: its own consumer
//! group, forwarder, lag sampler, checkpointer and ACL sync ([`run_flow`]). The process around
//! them is shared: one shutdown token (a signal ends every flow; each drains within its
//! `mirror.drain_timeout`, and they drain at the same time), one `/metrics`, `/healthz` and
//! `/readyz` listener (from the first flow's `[metrics]`, which the flows form shares).
//!
//! With one flow (the `[source]`/`[target]` form), everything is as it always was: unlabelled
//! metrics, and a fatal error ends the process (its supervisor restarts it).
//!
//! With several flows, each flow's metrics carry `source` and `target` labels, `/readyz` is ready
//! only when every flow is (its body lists each flow), and a flow that stops on an error is
//! restarted **in the process** after a backoff (1 s doubling to 5 min) while the other flows keep
//! running, as MirrorMaker 2 keeps its other flows running. Exiting instead would stop the
//! healthy flows too (and under a supervisor, restart them again and again for one bad flow);
//! staying up without a restart would leave the failed flow dead silently. While the flow is
//! down, `/readyz` answers 503 naming it and its error, and each failure is logged as an error
//! with the flow's name. If the process is asked to stop while a flow is down, it exits with that
//! flow's error code (1, or 2 for a configuration error), so the failure is never reported as a
//! clean exit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use strait_forward::observe::Observer;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::config::Config;
use crate::config::flows::flow_name;
use crate::error::{Error, Result};
use crate::observe::http::{self, Liveness, Readiness};
use crate::observe::metrics::Metrics;
use crate::observe::otel::OtelHandle;

/// First delay before a failed flow is restarted (several flows only).
const RESTART_FIRST: Duration = Duration::from_secs(1);
/// Longest delay between restarts of a failed flow.
const RESTART_MAX: Duration = Duration::from_secs(300);
/// A flow that ran this long before failing starts over at [`RESTART_FIRST`].
const RESTART_RESET_AFTER: Duration = Duration::from_secs(300);

/// The longest `mirror.drain_timeout` of `flows`: they drain at the same time.
pub fn drain_timeout(flows: &[Config]) -> Duration {
    flows
        .iter()
        .map(|c| c.mirror.drain_timeout)
        .max()
        .unwrap_or(crate::config::defaults::DRAIN_TIMEOUT)
}

/// Starts the telemetry endpoints, runs every flow until `shutdown` is cancelled, and shuts
/// down cleanly. `labelled`: the flows form (metrics get `source`/`target` labels, failed flows
/// restart in the process), even with a single flow.
pub async fn run(flows: Vec<Config>, labelled: bool, shutdown: CancellationToken) -> Result<()> {
    let Some(first) = flows.first().cloned() else {
        return Err(Error::Runtime("no flow to run".into()));
    };
    let several = labelled || flows.len() > 1;
    let mut flow_metrics = Vec::new();
    let mut flow_readiness = Vec::new();
    for c in &flows {
        let mut m = match several {
            true => Metrics::for_flow(&c.source.alias, &c.target.alias),
            false => Metrics::new(),
        };
        if c.metrics.mm2_compat {
            m = m.with_mm2_compat(&c.source.alias, &c.target.alias);
        }
        flow_metrics.push(Arc::new(m));
        flow_readiness.push(Readiness::default());
    }
    let (metrics, readiness) = match several {
        true => (
            Arc::new(Metrics::of_flows(flow_metrics.clone())),
            Readiness::of_flows(
                flows
                    .iter()
                    .map(flow_name)
                    .zip(flow_readiness.clone())
                    .collect(),
            ),
        ),
        false => (flow_metrics[0].clone(), flow_readiness[0].clone()),
    };
    let server = match first.metrics.listen {
        Some(addr) => {
            let listener = http::bind(addr).await?;
            tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
            Some(http::spawn(
                listener,
                metrics,
                readiness,
                Liveness::default(),
                shutdown.clone(),
            )?)
        }
        None => None,
    };
    let mut otel: Vec<OtelHandle> = Vec::new();
    let mut tasks = Vec::new();
    for ((config, m), r) in flows.into_iter().zip(flow_metrics).zip(flow_readiness) {
        let handle = crate::observe::otel::init_from_config(&config)?;
        let tracer = handle.as_ref().map(OtelHandle::observer);
        otel.extend(handle);
        let stop = shutdown.clone();
        tasks.push(match several {
            true => {
                let span = tracing::info_span!("flow", flow = %flow_name(&config));
                tokio::spawn(supervise(config, tracer, m, r, stop).instrument(span))
            }
            false => tokio::spawn(run_flow(config, tracer, m, r, stop)),
        });
    }
    // Every flow runs to the end (a shutdown, or its own error when it is alone); the first
    // error decides the exit code.
    let mut result = Ok(());
    for task in tasks {
        let outcome = task.await.unwrap_or_else(|e| {
            Err(Error::Runtime(format!(
                "a flow's task ended abnormally: {e}"
            )))
        });
        if let (Err(e), true) = (outcome, result.is_ok()) {
            result = Err(e);
        }
    }
    for h in otel {
        match h.shutdown().await {
            Ok(stats) => tracing::info!(?stats, "tracing stopped"),
            Err(e) => tracing::warn!(error = %e, "tracing did not shut down cleanly"),
        }
    }
    shutdown.cancel();
    if let Some(server) = server {
        server.stopped().await;
    }
    result
}

/// One flow of several: runs it, and restarts it after a backoff when it stops on an error,
/// until `shutdown`.
async fn supervise(
    config: Config,
    tracer: Option<Arc<dyn Observer>>,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> Result<()> {
    let name = flow_name(&config);
    let mut delay = RESTART_FIRST;
    // The last failure while the flow has not run since: a shutdown then exits non-zero.
    let mut down: Option<Error> = None;
    loop {
        let started = Instant::now();
        let run = run_flow(
            config.clone(),
            tracer.clone(),
            metrics.clone(),
            readiness.clone(),
            shutdown.clone(),
        );
        tokio::pin!(run);
        let mut check = tokio::time::interval(Duration::from_millis(500));
        let outcome = loop {
            tokio::select! {
                outcome = &mut run => break outcome,
                _ = check.tick() => {
                    if down.is_some() && readiness.is_running() {
                        tracing::info!(flow = %name, "flow runs again");
                        down = None;
                    }
                }
            }
        };
        let e = match (outcome, down.take()) {
            (Ok(()), None) => return Ok(()),
            // Stopped (a shutdown) while still coming back from a failure.
            (Ok(()), Some(e)) => return Err(e),
            (Err(e), _) => e,
        };
        if shutdown.is_cancelled() {
            tracing::error!(flow = %name, error = %e, "flow failed while shutting down");
            return Err(e);
        }
        if started.elapsed() >= RESTART_RESET_AFTER {
            delay = RESTART_FIRST;
        }
        tracing::error!(
            flow = %name, error = %e,
            "flow stopped on an error; restarting it in {delay:?} (the other flows keep running; \
             /readyz reports this flow not ready until it runs again)"
        );
        readiness.set_not_ready(format!("stopped on an error, restarting in {delay:?}: {e}"));
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shutdown.cancelled() => return Err(e),
        }
        down = Some(e);
        delay = (delay * 2).min(RESTART_MAX);
    }
}

/// One flow: its checkpointer and ACL sync (when configured) around the mirror, until `shutdown`.
pub async fn run_flow(
    config: Config,
    tracer: Option<Arc<dyn Observer>>,
    metrics: Arc<Metrics>,
    readiness: Readiness,
    shutdown: CancellationToken,
) -> Result<()> {
    let mut observers: Vec<Arc<dyn Observer>> = vec![metrics.clone()];
    observers.extend(tracer);
    // Where the start-up's time goes, in the log (a few INFO lines, then nothing).
    observers.push(Arc::new(crate::observe::startup::StartupLog::new(
        std::time::Instant::now(),
    )));
    // Checkpoints (opt-in, mirror.groups): the offset maps are fed by the forwarder's commit
    // path (mirror::run hands the sync writer's maps to it as its commit hook); persisted
    // history is replayed before the mirror starts.
    let mut checkpointer = None;
    let mut offset_syncs = None;
    if config.mirror.groups.is_some() {
        let maps = Arc::new(if config.mirror.exactly_once.is_some() {
            crate::failover::OffsetMaps::transactional()
        } else {
            crate::failover::OffsetMaps::default()
        });
        let started = tokio::select! {
            c = crate::failover::checkpoint::Checkpointer::start(config.clone(), maps) => c?,
            _ = shutdown.cancelled() => return Ok(()),
        };
        let stop = CancellationToken::new();
        let started = started.with_metrics(metrics.clone());
        offset_syncs = Some(started.sync_writer());
        checkpointer = Some((tokio::spawn(started.run(stop.clone())), stop));
    }
    // ACL sync and mirror protection (opt-in): a background task that never stops the mirror.
    let acl_sync = crate::run::acls::spawn(&config, shutdown.child_token());
    let observer: Arc<dyn Observer> = if observers.len() == 1 {
        metrics.clone()
    } else {
        Arc::new(crate::observe::otel::Fanout::new(observers))
    };
    let result =
        crate::run::mirror::run(config, observer, metrics, readiness, offset_syncs, shutdown).await;
    // After the mirror's final commit: the last round persists what it acknowledged last.
    if let Some((task, stop)) = checkpointer {
        stop.cancel();
        let _ = task.await;
    }
    if let Some(task) = acl_sync {
        task.abort();
    }
    result
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn one_exposition_for_several_flows() {
        let ab = Arc::new(Metrics::for_flow("a", "b"));
        let ba = Arc::new(Metrics::for_flow("b", "a"));
        ab.record_committed(&Arc::from("x"), 0, 10);
        ba.record_committed(&Arc::from("x"), 0, 20);
        let all = Metrics::of_flows(vec![ab, ba]);
        for text in [all.encode_openmetrics(), all.encode_prometheus()] {
            // Each family described once, followed by every flow's samples.
            assert_eq!(
                text.matches("# TYPE strait_committed_offset gauge").count(),
                1,
                "{text}"
            );
            let lines: Vec<&str> = text.lines().collect();
            let at = lines
                .iter()
                .position(|l| l.starts_with("# TYPE strait_committed_offset"))
                .unwrap();
            let samples: Vec<&str> = lines[at + 1..]
                .iter()
                .take_while(|l| !l.starts_with('#'))
                .copied()
                .collect();
            assert_eq!(samples.len(), 2, "{samples:?}");
            assert!(
                samples[0].contains("source=\"a\",target=\"b\"") && samples[0].ends_with(" 10"),
                "{samples:?}"
            );
            assert!(
                samples[1].contains("source=\"b\",target=\"a\"") && samples[1].ends_with(" 20"),
                "{samples:?}"
            );
        }
        let om = all.encode_openmetrics();
        assert!(om.ends_with("# EOF\n"));
        assert_eq!(om.matches("# EOF").count(), 1);
    }

    #[test]
    fn ready_when_every_flow_is() {
        let (ab, ba) = (Readiness::default(), Readiness::default());
        let all = Readiness::of_flows(vec![
            ("a->b".into(), ab.clone()),
            ("b->a".into(), ba.clone()),
        ]);
        assert!(!all.is_ready());
        ab.set_ready();
        assert!(!all.is_ready());
        assert!(
            all.reason().starts_with("flow b->a: starting"),
            "{}",
            all.reason()
        );
        ba.set_ready();
        let (ready, body) = all.report();
        assert!(ready && all.is_ready(), "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "ready");
        assert_eq!(v["flows"][0]["flow"], "a->b");
        assert_eq!(v["flows"][1]["status"], "ready");
        ba.set_not_ready("stopped on an error, restarting in 1s: boom");
        let (ready, body) = all.report();
        assert!(!ready);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            v["reason"],
            "flow b->a: stopped on an error, restarting in 1s: boom"
        );
        assert_eq!(v["flows"][1]["status"], "not_ready");
    }

    #[test]
    fn drains_take_the_longest_flow() {
        let loaded = Config::from_toml_str(
            "[clusters.a]\n\"bootstrap.servers\" = \"a:1\"\n[clusters.b]\n\"bootstrap.servers\" = \"b:1\"\n\
             [[flows]]\nsource = \"a\"\ntarget = \"b\"\ndrain_timeout = \"30s\"\n\
             [[flows]]\nsource = \"b\"\ntarget = \"a\"\n",
            std::path::Path::new("t.toml"),
            &crate::config::Environment::default(),
        )
        .unwrap();
        assert_eq!(drain_timeout(&loaded.flows), Duration::from_secs(30));
    }
}
