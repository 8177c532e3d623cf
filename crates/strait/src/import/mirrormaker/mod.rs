//! Drop-in compatibility with MirrorMaker 1 (`kafka-mirror-maker.sh`) and MirrorMaker 2 dedicated
//! mode (`connect-mirror-maker.sh mm2.properties`).
//!
//! Both translators read the original files, map every setting Strait has an equivalent for into
//! the same [`crate::config::Config`] a strait.toml produces, and report everything else in one
//! warning per file: nothing is dropped silently. Options whose behaviour Strait cannot provide
//! (custom message handlers, replication policies, config providers...) are errors.
//!
//! Client properties are handed to `strait-wire`, which reads Kafka's Java names
//! (`ssl.truststore.location` with type PEM, `ssl.keystore.*`, `sasl.jaas.config`) as well as the
//! librdkafka-style ones (`ssl.ca.location`, `sasl.username`).
//!
//! The environment overrides apply as with strait.toml (`STRAIT_METRICS_LISTEN`, ...), which is
//! also how `[metrics]`, `[tracing]` and `[log]` are set in these modes.

pub mod mm1;
pub mod mm2;

pub use mm1::Mm1Options;
pub use mm2::Mm2Options;

use crate::config::assignor_named;
use crate::config::raw::{Entry, Origin, RawConfig, Section};
use crate::error::{Error, Result};

/// Kafka client properties that `strait_wire::ClientConfig` understands; they go to `[source]` or
/// `[target]` unchanged. Everything else in a MirrorMaker file is mapped or reported.
pub const CLIENT_KEYS: &[&str] = strait_wire::config::KNOWN_KEYS;

/// True for keys passed to the Kafka client unchanged.
pub fn is_client_key(key: &str) -> bool {
    CLIENT_KEYS.contains(&key)
}

/// Which side of the mirror a client configuration belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// The consumer side.
    Source,
    /// The producer side.
    Target,
}

/// Settings that were read but have no effect, and other remarks, collected for the warnings.
#[derive(Debug, Default)]
pub(crate) struct Report {
    pub(crate) ignored: Vec<String>,
    pub(crate) notes: Vec<String>,
}

/// Maps one consumer (source) or producer (target) setting. `shown` is the key as the user wrote
/// it (for the ignored list), `origin` where it came from.
pub(crate) fn map_client_setting(
    raw: &mut RawConfig,
    role: Role,
    key: &str,
    value: &str,
    shown: &str,
    origin: Origin,
    report: &mut Report,
) -> Result<()> {
    if is_client_key(key) {
        let cluster = match role {
            Role::Source => &mut raw.source,
            Role::Target => &mut raw.target,
        };
        cluster.set_property(key, value, origin);
        return Ok(());
    }
    let mirror = |raw: &mut RawConfig, name: &str| {
        raw.set(
            Section::Mirror,
            name,
            Entry::text(value.trim(), origin.clone()),
        );
    };
    match (role, key) {
        (Role::Source, "group.id") => mirror(raw, "group_id"),
        (Role::Source, "isolation.level") => mirror(raw, "isolation"),
        (Role::Source, "group.protocol") => mirror(raw, "group_protocol"),
        (Role::Source, "group.remote.assignor") => mirror(raw, "group_remote_assignor"),
        (Role::Source, "auto.offset.reset") => {
            if value.trim().eq_ignore_ascii_case("none") {
                return Err(Error::Unsupported {
                    what: format!("{shown}=none"),
                    hint: "strait needs a start position for partitions it has not mirrored yet; \
                           use earliest or latest"
                        .into(),
                });
            }
            mirror(raw, "start");
        }
        (Role::Source, "partition.assignment.strategy") => {
            // The Java class names map to Strait's assignors; StickyAssignor is not
            // implemented, so it is dropped with a note rather than failing a drop-in config.
            let (known, unknown): (Vec<&str>, Vec<&str>) = value
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .partition(|n| assignor_named(n).is_some());
            if !unknown.is_empty() {
                let default: Vec<&str> = crate::config::defaults::PARTITION_ASSIGNMENT_STRATEGY
                    .iter()
                    .map(|a| a.name())
                    .collect();
                report.notes.push(format!(
                    "{shown}: {} {} not implemented by strait and {}; {}",
                    unknown.join(", "),
                    if unknown.len() == 1 { "is" } else { "are" },
                    if unknown.len() == 1 {
                        "is left out"
                    } else {
                        "are left out"
                    },
                    if known.is_empty() {
                        format!("using strait's default ({})", default.join(", "))
                    } else {
                        format!("offering {}", known.join(", "))
                    }
                ));
            }
            if !known.is_empty() {
                raw.set(
                    Section::Mirror,
                    "partition_assignment_strategy",
                    Entry::text(known.join(","), origin),
                );
            }
        }
        (Role::Target, "compression.type") => mirror(raw, "compression"),
        // The producer's batch size is the size merged batches grow to (strait never lingers:
        // it merges only batches that already wait).
        (Role::Target, "batch.size") => mirror(raw, "batch_size"),
        (Role::Target, "acks") => {
            let v = value.trim();
            if !(v.eq_ignore_ascii_case("all") || v == "-1") {
                report.notes.push(format!(
                    "{shown}={v} is ignored: strait always writes with acks=all and an idempotent \
                     producer, so no acknowledged record can be lost or duplicated by a retry"
                ));
            }
        }
        (Role::Target, "max.in.flight.requests.per.connection") => {
            match value.trim().parse::<i64>() {
                Ok(n) if n > 5 => {
                    report.notes.push(format!(
                        "{shown}={n} is capped at 5, the most an idempotent producer may have in \
                         flight per partition"
                    ));
                    raw.set(Section::Mirror, "max_in_flight", Entry::text("5", origin));
                }
                _ => mirror(raw, "max_in_flight"),
            }
        }
        _ => report.ignored.push(shown.to_string()),
    }
    Ok(())
}

/// `what: ignoring N settings ...: a, b, c (why)` or nothing.
pub(crate) fn ignored_warning(what: &str, ignored: &[String], why: &str) -> Option<String> {
    if ignored.is_empty() {
        return None;
    }
    let n = ignored.len();
    let s = if n == 1 { "" } else { "s" };
    Some(format!(
        "{what}: ignoring {n} setting{s} strait does not use: {} ({why})",
        ignored.join(", ")
    ))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn client_keys_are_the_ones_strait_wire_knows() {
        // strait-wire lists its known keys when it rejects an unknown one.
        let err = strait_wire::ClientConfig::from_properties([
            ("bootstrap.servers", "a:1"),
            ("no.such.key", "x"),
        ])
        .unwrap_err()
        .to_string();
        let known = err
            .split("Known properties: ")
            .nth(1)
            .expect("strait-wire lists the known properties");
        let mut known: Vec<&str> = known.split(", ").map(str::trim).collect();
        let mut ours = CLIENT_KEYS.to_vec();
        known.sort_unstable();
        ours.sort_unstable();
        assert_eq!(ours, known);
    }

    #[test]
    fn client_keys() {
        assert!(is_client_key("bootstrap.servers"));
        assert!(!is_client_key("group.id"));
    }

    #[test]
    fn consumer_and_producer_settings_map_to_mirror_keys() {
        let mut raw = RawConfig::default();
        let mut report = Report::default();
        let o = || Origin::Compat("f:1".into());
        for (role, k, v) in [
            (Role::Source, "bootstrap.servers", "a:1"),
            (Role::Source, "group.id", "g"),
            (Role::Source, "auto.offset.reset", "earliest"),
            (Role::Source, "isolation.level", "read_uncommitted"),
            (Role::Source, "group.protocol", "consumer"),
            (Role::Source, "group.remote.assignor", "range"),
            (Role::Source, "enable.auto.commit", "false"),
            (Role::Target, "bootstrap.servers", "b:1"),
            (Role::Target, "compression.type", "lz4"),
            (Role::Target, "acks", "1"),
            (Role::Target, "max.in.flight.requests.per.connection", "10"),
            (Role::Target, "linger.ms", "5"),
        ] {
            map_client_setting(&mut raw, role, k, v, k, o(), &mut report).unwrap();
        }
        assert_eq!(raw.source.property("bootstrap.servers"), Some("a:1"));
        assert_eq!(raw.target.property("bootstrap.servers"), Some("b:1"));
        let text = |k| match &raw.get(Section::Mirror, k).unwrap().value {
            crate::config::raw::RawValue::Text(s) => s.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(text("group_id"), "g");
        assert_eq!(text("start"), "earliest");
        assert_eq!(text("isolation"), "read_uncommitted");
        assert_eq!(text("group_protocol"), "consumer");
        assert_eq!(text("group_remote_assignor"), "range");
        assert_eq!(text("compression"), "lz4");
        assert_eq!(text("max_in_flight"), "5");
        assert_eq!(report.ignored, ["enable.auto.commit", "linger.ms"]);
        assert_eq!(report.notes.len(), 2);
        let err = map_client_setting(
            &mut raw,
            Role::Source,
            "auto.offset.reset",
            "none",
            "auto.offset.reset",
            o(),
            &mut report,
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("not supported: auto.offset.reset=none")
        );
    }

    #[test]
    fn partition_assignment_strategy_maps_java_class_names() {
        let o = || Origin::Compat("consumer.properties:3".into());
        let text = |raw: &RawConfig| match raw
            .get(Section::Mirror, "partition_assignment_strategy")
            .map(|e| &e.value)
        {
            Some(crate::config::raw::RawValue::Text(s)) => Some(s.clone()),
            None => None,
            other => panic!("{other:?}"),
        };
        let key = "partition.assignment.strategy";
        let mut raw = RawConfig::default();
        let mut report = Report::default();
        map_client_setting(
            &mut raw,
            Role::Source,
            key,
            "org.apache.kafka.clients.consumer.RoundRobinAssignor, org.apache.kafka.clients.consumer.RangeAssignor",
            key,
            o(),
            &mut report,
        )
        .unwrap();
        assert_eq!(
            text(&raw).as_deref(),
            Some(
                "org.apache.kafka.clients.consumer.RoundRobinAssignor,org.apache.kafka.clients.consumer.RangeAssignor"
            )
        );
        assert!(report.notes.is_empty() && report.ignored.is_empty());

        // Java's default list (range, cooperative-sticky) maps as it is (eager, as in Java,
        // until only the cooperative one is offered).
        let mut raw = RawConfig::default();
        let both = "org.apache.kafka.clients.consumer.RangeAssignor,org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
        map_client_setting(&mut raw, Role::Source, key, both, key, o(), &mut report).unwrap();
        assert_eq!(text(&raw).as_deref(), Some(both));
        assert!(report.notes.is_empty(), "{:?}", report.notes);

        // Only sticky: strait's default stays.
        let mut raw = RawConfig::default();
        let mut report = Report::default();
        map_client_setting(
            &mut raw,
            Role::Source,
            key,
            "org.apache.kafka.clients.consumer.StickyAssignor",
            key,
            o(),
            &mut report,
        )
        .unwrap();
        assert_eq!(text(&raw), None);
        assert!(
            report.notes[0].ends_with("using strait's default (roundrobin, range)"),
            "{:?}",
            report.notes
        );
    }
}
