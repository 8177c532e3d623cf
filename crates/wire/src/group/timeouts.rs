//! The consumer protocol's (KIP-848) session timeout and heartbeat interval belong to the
//! group, not to the member: the broker's `group.consumer.session.timeout.ms` and
//! `group.consumer.heartbeat.interval.ms` unless the group overrides them with its own
//! `consumer.session.timeout.ms` / `consumer.heartbeat.interval.ms` (IncrementalAlterConfigs on
//! the group, Kafka 3.8+, within the broker's `group.consumer.min/max.*` bounds). The
//! coordinator reads them at every heartbeat, so setting them after joining takes effect at
//! once.

use std::time::Duration;

use kafka_protocol::ResponseError;

use crate::Client;
use crate::admin::{Admin, AlterConfigOp, ConfigResource};
use crate::error::{Error, Result};
use crate::resource_config::Configs;

/// The group config keys.
const SESSION_KEY: &str = "consumer.session.timeout.ms";
const HEARTBEAT_KEY: &str = "consumer.heartbeat.interval.ms";

/// The broker's bounds for a group's own values, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub session: (u64, u64),
    pub heartbeat: (u64, u64),
    /// False when these are Kafka's defaults because the broker's configuration could not be
    /// read (DescribeConfigs on the cluster denied).
    pub read: bool,
}

impl Bounds {
    /// Kafka 4's defaults: session 45 to 60 s, heartbeat 5 to 15 s.
    const KAFKA_DEFAULTS: Bounds = Bounds {
        session: (45_000, 60_000),
        heartbeat: (5_000, 15_000),
        read: false,
    };

    /// The bounds a broker's configuration names, Kafka's defaults for what it does not.
    fn from_broker(configs: &Configs) -> Bounds {
        let ms = |key: &str, default: u64| {
            configs
                .value(key)
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        let d = Bounds::KAFKA_DEFAULTS;
        Bounds {
            session: (
                ms("group.consumer.min.session.timeout.ms", d.session.0),
                ms("group.consumer.max.session.timeout.ms", d.session.1),
            ),
            heartbeat: (
                ms("group.consumer.min.heartbeat.interval.ms", d.heartbeat.0),
                ms("group.consumer.max.heartbeat.interval.ms", d.heartbeat.1),
            ),
            read: true,
        }
    }

    fn describe_session(&self) -> String {
        let (lo, hi) = self.session;
        let source = if self.read {
            "the broker's"
        } else {
            "Kafka's default"
        };
        format!(
            "{source} group.consumer.min.session.timeout.ms ({lo} ms) and \
             group.consumer.max.session.timeout.ms ({hi} ms)"
        )
    }
}

/// The changes that give the group `session` and about `heartbeat` (clamped into the broker's
/// bounds and below the session timeout; left at the broker's default when no value fits).
/// A session timeout outside bounds read from the broker is an error that names them (with
/// assumed bounds the broker decides).
pub(crate) fn changes(
    group: &str,
    session: Duration,
    heartbeat: Duration,
    bounds: &Bounds,
) -> Result<Vec<AlterConfigOp>> {
    let session_ms = u64::try_from(session.as_millis()).unwrap_or(u64::MAX);
    let (lo, hi) = bounds.session;
    if bounds.read && (session_ms < lo || session_ms > hi) {
        return Err(out_of_bounds(group, session_ms, bounds));
    }
    let mut ops = vec![AlterConfigOp::Set {
        name: SESSION_KEY.to_owned(),
        value: session_ms.to_string(),
    }];
    let (hlo, hhi) = bounds.heartbeat;
    let hb = u64::try_from(heartbeat.as_millis())
        .unwrap_or(u64::MAX)
        .clamp(hlo, hhi.max(hlo));
    if hb < session_ms {
        ops.push(AlterConfigOp::Set {
            name: HEARTBEAT_KEY.to_owned(),
            value: hb.to_string(),
        });
    }
    Ok(ops)
}

fn out_of_bounds(group: &str, session_ms: u64, bounds: &Bounds) -> Error {
    Error::Broker {
        code: ResponseError::InvalidConfig,
        context: format!(
            "{SESSION_KEY} = {session_ms} ms for Group:{group} is outside {}; choose a session \
             timeout within them or change the broker's bounds",
            bounds.describe_session()
        ),
    }
}

/// Sets the consumer group `group`'s session timeout to `session` and its heartbeat interval
/// to about `heartbeat` (see [`changes`]). Needs AlterConfigs on the group; reading the
/// broker's bounds (for the heartbeat and for messages) needs DescribeConfigs on the cluster
/// and falls back to Kafka's defaults without it.
pub async fn set_consumer_group_timeouts(
    client: &Client,
    group: &str,
    session: Duration,
    heartbeat: Duration,
) -> Result<()> {
    let admin = Admin::new(client);
    let bounds = broker_bounds(client, &admin).await;
    let ops = changes(group, session, heartbeat, &bounds)?;
    let session_ms = session.as_millis();
    match admin
        .incremental_alter_configs(&ConfigResource::Group(group.to_owned()), &ops)
        .await
    {
        Ok(()) => {
            tracing::debug!(group, ?ops, "set the consumer group's timeouts");
            Ok(())
        }
        // The broker's own check (e.g. a controller with other bounds than the broker read).
        Err(Error::Broker {
            code: ResponseError::InvalidConfig,
            context,
        }) => Err(Error::Broker {
            code: ResponseError::InvalidConfig,
            context: format!(
                "{context} (asked {SESSION_KEY} = {session_ms} ms; bounds: {})",
                bounds.describe_session()
            ),
        }),
        Err(e) => Err(e),
    }
}

/// The bounds of the first broker the metadata lists, or Kafka's defaults if it cannot be read.
async fn broker_bounds(client: &Client, admin: &Admin) -> Bounds {
    let id = match client.metadata(None).await {
        Ok(md) => md.brokers.keys().next().copied(),
        Err(_) => None,
    };
    let Some(id) = id else {
        return Bounds::KAFKA_DEFAULTS;
    };
    match admin.describe_configs(&ConfigResource::Broker(id)).await {
        Ok(configs) => Bounds::from_broker(&configs),
        Err(e) => {
            tracing::debug!(error = %e, "cannot read the broker's group timeout bounds; assuming Kafka's defaults");
            Bounds::KAFKA_DEFAULTS
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn values(ops: &[AlterConfigOp]) -> Vec<(String, String)> {
        ops.iter()
            .map(|o| match o {
                AlterConfigOp::Set { name, value } => (name.clone(), value.clone()),
                AlterConfigOp::Delete { name } => (name.clone(), String::new()),
            })
            .collect()
    }

    const LOW: Bounds = Bounds {
        session: (1_000, 60_000),
        heartbeat: (500, 15_000),
        read: true,
    };

    #[test]
    fn sets_the_session_and_a_heartbeat_within_bounds() {
        let ops = changes(
            "g",
            Duration::from_secs(6),
            Duration::from_millis(600),
            &LOW,
        )
        .unwrap();
        assert_eq!(
            values(&ops),
            [
                (SESSION_KEY.to_owned(), "6000".to_owned()),
                (HEARTBEAT_KEY.to_owned(), "600".to_owned())
            ]
        );
        // Kafka's default minimum heartbeat (5 s) still fits below a 6 s session.
        let bounds = Bounds {
            session: (6_000, 60_000),
            ..Bounds::KAFKA_DEFAULTS
        };
        let ops = changes(
            "g",
            Duration::from_secs(6),
            Duration::from_millis(600),
            &bounds,
        )
        .unwrap();
        assert_eq!(values(&ops)[1].1, "5000");
    }

    #[test]
    fn leaves_the_heartbeat_when_none_fits_below_the_session() {
        let bounds = Bounds {
            session: (1_000, 60_000),
            heartbeat: (5_000, 15_000),
            read: true,
        };
        let ops = changes("g", Duration::from_secs(3), Duration::from_secs(1), &bounds).unwrap();
        assert_eq!(values(&ops), [(SESSION_KEY.to_owned(), "3000".to_owned())]);
    }

    #[test]
    fn a_session_out_of_bounds_names_them() {
        let read = Bounds {
            read: true,
            ..Bounds::KAFKA_DEFAULTS
        };
        let e = changes(
            "mirror",
            Duration::from_secs(6),
            Duration::from_secs(1),
            &read,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("Group:mirror"), "{e}");
        assert!(
            e.contains("the broker's group.consumer.min.session.timeout.ms (45000 ms)"),
            "{e}"
        );
        // Assumed bounds (the broker's were not readable): the broker decides.
        assert!(
            changes(
                "mirror",
                Duration::from_secs(6),
                Duration::from_secs(1),
                &Bounds::KAFKA_DEFAULTS
            )
            .is_ok()
        );
        let e = changes(
            "mirror",
            Duration::from_secs(90),
            Duration::from_secs(1),
            &LOW,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("the broker's") && e.contains("max.session.timeout.ms (60000 ms)"),
            "{e}"
        );
    }

    #[test]
    fn bounds_come_from_the_broker_config() {
        let configs = Configs {
            entries: vec![crate::resource_config::ConfigEntry {
                name: "group.consumer.min.session.timeout.ms".to_owned(),
                value: Some("2000".to_owned()),
                source: crate::resource_config::ConfigSource::StaticBroker,
                read_only: true,
                sensitive: false,
            }],
        };
        let b = Bounds::from_broker(&configs);
        assert_eq!(b.session, (2_000, 60_000));
        assert_eq!(b.heartbeat, (5_000, 15_000));
        assert!(b.read);
    }
}
