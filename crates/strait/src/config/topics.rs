//! Which source topics are mirrored and what they are called on the target.
//!
//! Patterns match the **whole** topic name, as Java's `Pattern.matches` does in MirrorMaker:
//! `orders` selects `orders` but not `orders-eu`; write `orders.*` for the prefix.
//!
//! A topic is mirrored when it matches an include pattern, matches no exclude pattern, is not an
//! internal topic and (with `rename = "prefix"`) did not come from the target cluster. The
//! default exclude list is the one MirrorMaker 2's topic filter uses (internal-looking names and
//! `.replica` topics). The internal-topic rule cannot be switched off, as in MirrorMaker 2: names
//! starting with `__` or `.`, or ending in `.internal` or `-internal` (broker topics such as
//! `__consumer_offsets`, and the MM2/Connect bookkeeping topics) are never mirrored. Heartbeat
//! topics are mirrored like any topic, as MirrorMaker 2 does.

use regex::RegexSet;

use crate::error::{Error, Result};

/// The default `mirror.topics`.
pub const DEFAULT_INCLUDE: &[&str] = &[".*"];

/// The default `mirror.topics_exclude` (MirrorMaker 2's topic-filter defaults).
pub const DEFAULT_EXCLUDE: &[&str] = &[r".*[-.]internal", r".*\.replica", r"__.*"];

/// The default `mirror.topic_configs_exclude`: MirrorMaker 2's `config.properties.exclude`
/// default except `min.insync.replicas`, which Strait copies (lowered to the target topic's
/// replication factor when that is smaller), because it also copies the replication factor.
pub const DEFAULT_CONFIGS_EXCLUDE: &[&str] = &[
    r"follower\.replication\.throttled\.replicas",
    r"leader\.replication\.throttled\.replicas",
    r"message\.timestamp\.difference\.max\.ms",
    r"message\.timestamp\.type",
    r"unclean\.leader\.election\.enable",
];

/// Topic config keys that are never copied to the target: regular expressions matching the
/// whole key, as MirrorMaker 2's `config.properties.exclude`.
#[derive(Debug, Clone)]
pub struct ConfigExclude {
    patterns: Vec<String>,
    set: RegexSet,
}

impl ConfigExclude {
    /// Compiles the patterns; `key` names them in errors.
    pub(crate) fn new(patterns: Vec<String>, key: &str) -> Result<ConfigExclude> {
        let patterns: Vec<String> = patterns
            .into_iter()
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty())
            .collect();
        Ok(ConfigExclude {
            set: compile(&patterns, key)?,
            patterns,
        })
    }

    /// The patterns as written.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// True when the config key `name` must not be copied.
    pub fn excludes(&self, name: &str) -> bool {
        self.set.is_match(name)
    }
}

/// True for names MirrorMaker 2 treats as internal and never replicates.
pub fn is_internal_topic(topic: &str) -> bool {
    topic.starts_with("__")
        || topic.starts_with('.')
        || topic.ends_with(".internal")
        || topic.ends_with("-internal")
}

/// Compiled include and exclude patterns.
#[derive(Debug, Clone)]
pub struct TopicSelection {
    include: Vec<String>,
    exclude: Vec<String>,
    include_set: RegexSet,
    exclude_set: RegexSet,
}

impl TopicSelection {
    /// Compiles the patterns; `include_key`/`exclude_key` name them in errors.
    pub(crate) fn new(
        include: Vec<String>,
        include_key: &str,
        exclude: Vec<String>,
        exclude_key: &str,
    ) -> Result<TopicSelection> {
        Ok(TopicSelection {
            include_set: compile(&include, include_key)?,
            exclude_set: compile(&exclude, exclude_key)?,
            include,
            exclude,
        })
    }

    /// The include patterns as written.
    pub fn include(&self) -> &[String] {
        &self.include
    }

    /// The exclude patterns as written.
    pub fn exclude(&self) -> &[String] {
        &self.exclude
    }

    /// True when `topic` matches an include pattern, no exclude pattern, and is not internal.
    pub fn matches(&self, topic: &str) -> bool {
        !is_internal_topic(topic)
            && self.include_set.is_match(topic)
            && !self.exclude_set.is_match(topic)
    }
}

fn compile(patterns: &[String], key: &str) -> Result<RegexSet> {
    for p in patterns {
        // Check one by one first so the error names the bad pattern.
        if let Err(e) = regex::Regex::new(&anchor(p)) {
            return Err(Error::Regex {
                key: key.to_string(),
                pattern: p.clone(),
                reason: first_line(&e.to_string()),
            });
        }
    }
    RegexSet::new(patterns.iter().map(|p| anchor(p))).map_err(|e| Error::Regex {
        key: key.to_string(),
        pattern: patterns.join(", "),
        reason: first_line(&e.to_string()),
    })
}

fn anchor(p: &str) -> String {
    format!("^(?:{p})$")
}

fn first_line(s: &str) -> String {
    // The regex crate's messages are multi-line with a caret diagram; keep the summary line last.
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(s)
        .trim()
        .to_string()
}

/// How target topics are named.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rename {
    /// Same name as on the source (MirrorMaker 1, MM2's `IdentityReplicationPolicy`). One-way
    /// only: there is no cycle detection with identical names.
    Identity,
    /// `<source alias><separator><topic>` (MM2's `DefaultReplicationPolicy`, e.g. `europe.orders`).
    Prefix {
        /// The separator, `.` by default.
        separator: String,
    },
}

impl Rename {
    /// `identity` or `prefix`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Rename::Identity => "identity",
            Rename::Prefix { .. } => "prefix",
        }
    }

    /// The target topic for `topic` mirrored from the cluster called `source_alias`.
    pub fn target_topic(&self, source_alias: &str, topic: &str) -> String {
        match self {
            Rename::Identity => topic.to_string(),
            Rename::Prefix { separator } => format!("{source_alias}{separator}{topic}"),
        }
    }

    /// The name `topic` had on the cluster it was first written to: `orders` for `us.orders` and
    /// `eu.us.orders` (MirrorMaker 2's `ReplicationPolicy.originalTopic`); `topic` itself with
    /// identity naming.
    pub fn original_topic<'t>(&self, topic: &'t str) -> &'t str {
        match self {
            Rename::Identity => topic,
            Rename::Prefix { separator } => {
                let mut rest = topic;
                while let Some((_, tail)) = rest.split_once(separator.as_str()) {
                    if tail.trim_end_matches(separator.as_str()).is_empty() {
                        break;
                    }
                    rest = tail;
                }
                rest
            }
        }
    }

    /// With prefixes, true when `topic` is itself a mirror of a topic that came from
    /// `target_alias` (`us.orders`, `asia.us.orders` seen on the source while mirroring to `us`):
    /// mirroring it back would loop. Always false for identity naming, which cannot tell.
    ///
    /// MirrorMaker 2's rule (`MirrorSourceConnector.isCycle` over
    /// `DefaultReplicationPolicy.topicSource`/`upstreamTopic`): a name is remote when splitting
    /// it at the separator gives at least two parts (Java's `split` drops trailing empty parts,
    /// so `us.` and `us..` are not remote); its first part is the cluster it came from; the rest
    /// is checked again, hop by hop.
    pub fn is_cycle(&self, topic: &str, target_alias: &str) -> bool {
        match self {
            Rename::Identity => false,
            Rename::Prefix { separator } => {
                let mut rest = topic;
                while let Some((alias, tail)) = rest.split_once(separator.as_str()) {
                    if tail.trim_end_matches(separator.as_str()).is_empty() {
                        return false; // only trailing separators: not a remote topic
                    }
                    if alias == target_alias {
                        return true;
                    }
                    rest = tail;
                }
                false
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sel(include: &[&str], exclude: &[&str]) -> TopicSelection {
        TopicSelection::new(
            include.iter().map(|s| s.to_string()).collect(),
            "mirror.topics",
            exclude.iter().map(|s| s.to_string()).collect(),
            "mirror.topics_exclude",
        )
        .unwrap()
    }

    #[test]
    fn defaults_exclude_what_mirrormaker_2_excludes() {
        let s = sel(DEFAULT_INCLUDE, DEFAULT_EXCLUDE);
        for t in [
            "my-topic",
            "orders",
            "heartbeats",
            "europe.orders",
            "mm2-foo",
        ] {
            assert!(s.matches(t), "{t}");
        }
        for t in [
            "__consumer_offsets",
            "__transaction_state",
            "_schemas-internal",
            "mm2-offset-syncs.us.internal",
            "europe.checkpoints.internal",
            "connect-offsets-internal",
            "orders.replica",
            ".hidden",
        ] {
            assert!(!s.matches(t), "{t}");
        }
    }

    #[test]
    fn patterns_match_the_whole_name() {
        let s = sel(&["orders", "pay.*"], &["payments-test"]);
        assert!(s.matches("orders"));
        assert!(!s.matches("orders-eu"));
        assert!(s.matches("payments"));
        assert!(!s.matches("payments-test"));
        // The internal rule holds even with an empty exclude list.
        let s = sel(&[".*"], &[]);
        assert!(!s.matches("__consumer_offsets"));
    }

    #[test]
    fn bad_patterns_name_the_key() {
        let err = TopicSelection::new(vec!["(".into()], "mirror.topics", vec![], "x")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("mirror.topics: invalid regular expression \"(\""),
            "{err}"
        );
    }

    #[test]
    fn renaming_and_cycles() {
        let p = Rename::Prefix {
            separator: ".".into(),
        };
        assert_eq!(p.target_topic("europe", "orders"), "europe.orders");
        assert_eq!(Rename::Identity.target_topic("europe", "orders"), "orders");
        assert!(p.is_cycle("us.orders", "us"));
        assert!(p.is_cycle("asia.us.orders", "us"));
        assert!(!p.is_cycle("orders", "us"));
        assert!(!p.is_cycle("usa.orders", "us"));
        assert!(!Rename::Identity.is_cycle("us.orders", "us"));
        // Active-active a <-> b: what each flow sees on its source.
        assert!(
            p.is_cycle("b.x", "b"),
            "b's x mirrored to a is not sent back to b"
        );
        assert!(
            !p.is_cycle("a.x", "b"),
            "a topic named a.x on a is mirrored to b (as a.a.x)"
        );
        assert!(p.is_cycle("a.b.x", "b"));
        assert!(p.is_cycle("b.heartbeats", "b"));
        assert!(!p.is_cycle("heartbeats", "b"));
        // Java's split drops trailing empty parts: these are not remote topics.
        assert!(!p.is_cycle("us.", "us"));
        assert!(!p.is_cycle("us..", "us"));
        assert!(p.is_cycle("us.x.", "us"));
        assert_eq!(p.original_topic("eu.us.orders"), "orders");
        assert_eq!(p.original_topic("heartbeats"), "heartbeats");
        assert_eq!(p.original_topic("us."), "us.");
        assert_eq!(Rename::Identity.original_topic("us.orders"), "us.orders");
        let dash = Rename::Prefix {
            separator: "__".into(),
        };
        assert_eq!(dash.target_topic("eu", "t"), "eu__t");
        assert!(dash.is_cycle("us__t", "us"));
    }
}
