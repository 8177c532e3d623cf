//! Hot reload: on SIGHUP, or when a configuration file changes, the configuration is loaded and
//! validated again, and what can change in a running mirror is applied without a restart.
//!
//! **Applied live** ([`LIVE_KEYS`]): the topic filters `mirror.topics` / `mirror.topics_exclude`
//! (the mirror rediscovers topics at once: new matches start, and the partitions of topics that
//! no longer match are drained, committed and released when the group is rejoined with the new
//! subscription), the checkpointed group filters `mirror.groups` / `mirror.groups_exclude` (when
//! checkpoints were on at start; turning them on or off needs a restart), and `log.level`
//! (unless `RUST_LOG` is set, which wins as at start). Strait has no rate limits to reload.
//!
//! **Everything else** keeps its old value, and the keys that changed are named in one log
//! line (`changed settings that need a restart: source.bootstrap.servers, ...`). Certificates do
//! not need a reload: `strait-wire` reads the key, certificate and CA files again for each new
//! connection when they changed on disk.
//!
//! **Invalid** configurations are refused with the validation error and the mirror keeps
//! running with the configuration it has. Every attempt counts in
//! `strait_config_reloads_total{result="applied"|"unchanged"|"invalid"}`.
//!
//! The files are polled (their content, every [`POLL_INTERVAL`]) rather than watched with
//! inotify: it needs no dependency, works on every file system, and sees Kubernetes ConfigMap
//! updates (a symbolic link swapped atomically) like any other write.
//!
//! The running mirror reads its live configuration from a `Live` receiver (a
//! `tokio::sync::watch` channel, `config::live`) it finds with `live_for`: one per flow, matched
//! by the flow's source alias, target alias and group id, so that no signature between the
//! process and the mirror changes. A reload that adds or removes flows, or changes what
//! identifies one, names them as needing a restart.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::config::live::{self, Live, flow_key};
use crate::error::Result;

/// The settings applied to a running mirror, as `section.key` of strait.toml.
pub const LIVE_KEYS: &[&str] = &[
    "mirror.topics",
    "mirror.topics_exclude",
    "mirror.groups",
    "mirror.groups_exclude",
    "log.level",
];

/// How often the configuration files are compared with what was loaded last.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// A changed file is read again after this pause, until two reads agree, so that a file still
/// being written is not loaded half-way.
const SETTLE: Duration = Duration::from_millis(300);

/// What a reload changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// Keys applied to the running mirror.
    pub applied: Vec<String>,
    /// Keys that changed but keep their old value until a restart.
    pub restart: Vec<String>,
}

impl Changes {
    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.applied.is_empty() && self.restart.is_empty()
    }
}

/// Every `section.key` whose effective value differs between `old` and `new`, in file order.
/// Only names: secret values never appear.
pub fn changed_keys(old: &Config, new: &Config) -> Vec<String> {
    let table = |c: &Config| -> toml::Table {
        c.to_toml(false)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
            .parse()
            .unwrap_or_default()
    };
    let (old, new) = (table(old), table(new));
    let mut keys = Vec::new();
    let sections: Vec<&String> = old
        .keys()
        .chain(new.keys().filter(|k| !old.contains_key(*k)))
        .collect();
    for section in sections {
        let empty = toml::Table::new();
        let section_of = |t: &toml::Table| -> toml::Table {
            t.get(section)
                .and_then(|v| v.as_table())
                .cloned()
                .unwrap_or_else(|| empty.clone())
        };
        let (a, b) = (section_of(&old), section_of(&new));
        for key in a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))) {
            if a.get(key) != b.get(key) {
                keys.push(format!("{section}.{key}"));
            }
        }
    }
    keys
}

/// The configuration to run with after `new` was loaded over `current`: `current` with the live
/// keys of `new`, and what changed.
pub fn merge(current: &Config, new: &Config) -> (Config, Changes) {
    let mut effective = current.clone();
    let mut changes = Changes::default();
    // Checkpoints switched on or off start or stop a task: that needs a restart.
    let groups_live = current.mirror.groups.is_some() && new.mirror.groups.is_some();
    for key in changed_keys(current, new) {
        let live = match key.as_str() {
            "mirror.topics" | "mirror.topics_exclude" => {
                effective.mirror.topics = new.mirror.topics.clone();
                true
            }
            "mirror.groups" | "mirror.groups_exclude" if groups_live => {
                effective.mirror.groups = new.mirror.groups.clone();
                true
            }
            "log.level" => {
                effective.log.level = new.log.level.clone();
                true
            }
            _ => false,
        };
        if live {
            changes.applied.push(key);
        } else {
            changes.restart.push(key);
        }
    }
    (effective, changes)
}

/// Where the configuration comes from: how to load it again, and the files to watch.
pub struct Source {
    files: Vec<PathBuf>,
    load: Box<dyn Fn() -> Result<Vec<Config>> + Send + Sync>,
}

impl Source {
    /// `load` reads and validates the configuration as at start and returns every flow; a
    /// change of a file in `files` triggers it.
    pub fn new(
        files: Vec<PathBuf>,
        load: impl Fn() -> Result<Vec<Config>> + Send + Sync + 'static,
    ) -> Source {
        Source {
            files,
            load: Box::new(load),
        }
    }
}

/// Loads the configuration again when asked and publishes the live part of it to each flow.
pub struct Reloader {
    /// Each running flow's key and channel, in start order.
    flows: Vec<(String, watch::Sender<Arc<Config>>)>,
    source: Source,
    /// The files' contents at the last load (`None`: unreadable).
    seen: Vec<Option<Vec<u8>>>,
}

impl Reloader {
    /// A reloader for the flows a process started with (one, without flows); registers
    /// their live configurations for `config::live::live_for`.
    pub fn new(flows: Vec<Config>, source: Source) -> Reloader {
        let seen = read_all(&source.files);
        let flows = flows.into_iter().map(live::publish).collect();
        Reloader {
            flows,
            source,
            seen,
        }
    }

    /// A receiver of the live configuration of the `i`-th flow.
    pub fn subscribe(&self, i: usize) -> Option<Live> {
        self.flows.get(i).map(|(_, tx)| tx.subscribe())
    }

    /// Merges `loaded` over the running flows: the new live configuration of each, and what
    /// changed (flows added or removed need a restart).
    fn plan(&self, loaded: Vec<Config>) -> Result<(Vec<Option<Config>>, Changes)> {
        let several = self.flows.len() > 1 || loaded.len() > 1;
        let mut new: HashMap<String, Config> =
            loaded.into_iter().map(|c| (flow_key(&c), c)).collect();
        let mut changes = Changes::default();
        let mut updates = Vec::new();
        for (key, tx) in &self.flows {
            let Some(next) = new.remove(key) else {
                changes.restart.push(format!("flow {key} (removed)"));
                updates.push(None);
                continue;
            };
            let current = tx.borrow().clone();
            let (effective, c) = merge(&current, &next);
            let name = |k: String| match several {
                true => format!("{key}: {k}"),
                false => k,
            };
            if c.applied.iter().any(|k| k == "log.level") {
                crate::observe::logging::set_level(&effective.log)?;
            }
            changes.restart.extend(c.restart.into_iter().map(name));
            updates.push((!c.applied.is_empty()).then_some(effective));
            changes.applied.extend(c.applied.into_iter().map(name));
        }
        let mut added: Vec<String> = new
            .into_keys()
            .map(|k| format!("flow {k} (added)"))
            .collect();
        added.sort();
        changes.restart.extend(added);
        Ok((updates, changes))
    }

    /// Loads and validates the configuration again and applies what can be applied; `why` (the
    /// trigger) goes into the log. An invalid configuration changes nothing.
    pub fn reload(&mut self, why: &str) -> Result<Changes> {
        self.seen = read_all(&self.source.files);
        let outcome = (self.source.load)().and_then(|loaded| self.plan(loaded));
        let result = match outcome {
            Ok((updates, changes)) => {
                for ((_, tx), update) in self.flows.iter().zip(updates) {
                    if let Some(effective) = update {
                        tx.send_replace(Arc::new(effective));
                    }
                }
                if !changes.applied.is_empty() {
                    tracing::info!(
                        trigger = why,
                        "configuration reloaded; applied: {}",
                        changes.applied.join(", ")
                    );
                } else if changes.restart.is_empty() {
                    tracing::info!(trigger = why, "configuration reloaded; nothing changed");
                }
                if !changes.restart.is_empty() {
                    tracing::warn!(
                        trigger = why,
                        "changed settings that need a restart: {} (the running mirror keeps \
                         their previous values)",
                        changes.restart.join(", ")
                    );
                }
                Ok(changes)
            }
            Err(e) => {
                tracing::error!(
                    trigger = why,
                    error = %e,
                    "configuration reload refused: the new configuration is invalid; the mirror \
                     keeps running with the previous one. Fix the file (`strait check --offline` \
                     shows the problem) and save it again or send SIGHUP"
                );
                Err(e)
            }
        };
        crate::observe::metrics::record_config_reload(match &result {
            Ok(c) if c.applied.is_empty() => "unchanged",
            Ok(_) => "applied",
            Err(_) => "invalid",
        });
        result
    }

    /// True when a watched file's content differs from the last load, once it stopped changing.
    async fn files_changed(&mut self) -> bool {
        let mut now = read_all(&self.source.files);
        if now == self.seen {
            return false;
        }
        loop {
            tokio::time::sleep(SETTLE).await;
            let again = read_all(&self.source.files);
            if again == now {
                return true;
            }
            now = again;
        }
    }

    /// Reloads on SIGHUP and on file changes until `shutdown`.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut hangup = hangups();
        tracing::info!(
            files = ?self.source.files,
            "hot reload: SIGHUP or a change of the configuration files reloads the configuration"
        );
        let mut poll = tokio::time::interval(POLL_INTERVAL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                Some(()) = next_hangup(&mut hangup) => {
                    let _ = self.reload("SIGHUP");
                }
                _ = poll.tick() => {
                    if self.files_changed().await {
                        let _ = self.reload("file changed");
                    }
                }
            }
        }
    }
}

/// The contents of `files` (`None` for a file that cannot be read now).
fn read_all(files: &[PathBuf]) -> Vec<Option<Vec<u8>>> {
    files.iter().map(|f| std::fs::read(f).ok()).collect()
}

#[cfg(unix)]
type Hangups = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangups = ();

/// SIGHUP's stream; installing it also stops SIGHUP from terminating the process.
#[cfg(unix)]
fn hangups() -> Hangups {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot handle SIGHUP; configuration files are still watched");
            None
        }
    }
}

#[cfg(not(unix))]
fn hangups() -> Hangups {}

/// The next SIGHUP (never, where there is none).
#[cfg(unix)]
async fn next_hangup(h: &mut Hangups) -> Option<()> {
    match h {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(not(unix))]
async fn next_hangup(_: &mut Hangups) -> Option<()> {
    std::future::pending().await
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::config::Environment;

    fn config(mirror: &str, extra: &str) -> Config {
        Config::from_toml_str(
            &format!(
                "[source]\n\"bootstrap.servers\" = \"a:1\"\n[target]\n\"bootstrap.servers\" = \
                 \"b:1\"\n[mirror]\n{mirror}\n{extra}"
            ),
            std::path::Path::new("t.toml"),
            &Environment::default(),
        )
        .unwrap()
        .config
    }

    #[test]
    fn filters_and_log_level_apply_the_rest_needs_a_restart() {
        let old = config(
            "topics = [\"a\"]\ngroups = [\"g\"]",
            "[log]\nlevel = \"info\"",
        );
        let new = config(
            "topics = [\"b\"]\ntopics_exclude = [\"x\"]\ngroups = [\"h\"]\nsession_timeout = \"7s\"",
            "[log]\nlevel = \"debug\"",
        );
        let (effective, changes) = merge(&old, &new);
        assert_eq!(
            changes.applied,
            [
                "mirror.topics",
                "mirror.topics_exclude",
                "mirror.groups",
                "log.level"
            ]
        );
        assert_eq!(changes.restart, ["mirror.session_timeout"]);
        assert!(effective.selects("b") && !effective.selects("a") && !effective.selects("x"));
        assert!(effective.mirror.groups.as_ref().unwrap().matches("h"));
        assert_eq!(effective.log.level, "debug");
        assert_eq!(effective.mirror.session_timeout, old.mirror.session_timeout);
        assert!(merge(&old, &old).1.is_empty());
    }

    #[test]
    fn client_properties_are_named_never_their_values() {
        let old = config("", "");
        let mut new = old.clone();
        new.source
            .properties
            .push(("sasl.password".into(), "hunter2-secret".into()));
        new.target.properties[0].1 = "c:1".into();
        let (_, changes) = merge(&old, &new);
        assert!(changes.applied.is_empty());
        assert_eq!(
            changes.restart,
            ["source.sasl.password", "target.bootstrap.servers"]
        );
    }

    #[test]
    fn switching_checkpoints_on_needs_a_restart() {
        let (effective, changes) = merge(&config("", ""), &config("groups = [\"g\"]", ""));
        assert!(changes.applied.is_empty());
        assert!(changes.restart.contains(&"mirror.groups".to_string()));
        assert!(effective.mirror.groups.is_none());
    }

    /// Config provider references are resolved again at each reload (issue 32 item 2): a
    /// rotated secret is seen (and named, never shown), a reference that no longer resolves is
    /// refused.
    #[tokio::test]
    async fn references_are_resolved_again_on_reload() {
        let dir = tempfile::tempdir().unwrap();
        let (path, secret) = (dir.path().join("strait.toml"), dir.path().join("password"));
        std::fs::write(&secret, "first-secret").unwrap();
        std::fs::write(
            &path,
            format!(
                "[source]\n\"bootstrap.servers\" = \"a:1\"\n\"security.protocol\" = \
                 \"SASL_PLAINTEXT\"\n\"sasl.mechanism\" = \"PLAIN\"\n\"sasl.username\" = \"u\"\n\
                 \"sasl.password\" = \"${{directory:{}:password}}\"\n\
                 [target]\n\"bootstrap.servers\" = \"b:1\"\n",
                dir.path().display()
            ),
        )
        .unwrap();
        let load_path = path.clone();
        let source = Source::new(vec![path.clone()], move || {
            Ok(vec![
                Config::load(&load_path, &Environment::default())?.config,
            ])
        });
        let initial = Config::load(&path, &Environment::default()).unwrap().config;
        assert_eq!(
            initial.source.property("sasl.password"),
            Some("first-secret")
        );
        let reloader = Reloader::new(vec![initial], source);
        // What `reload` does before it applies and counts (the counters are the process's, and
        // another test asserts on them).
        let reload = || (reloader.source.load)().and_then(|loaded| reloader.plan(loaded));
        std::fs::write(&secret, "second-secret").unwrap();
        let (_, changes) = reload().unwrap();
        assert_eq!(changes.restart, ["source.sasl.password"]);
        std::fs::remove_file(&secret).unwrap();
        let e = reload().map(|_| ()).unwrap_err().to_string();
        assert!(
            e.starts_with("source.sasl.password: ${directory:") && e.contains("cannot read"),
            "{e}"
        );
        assert!(!e.contains("secret\""), "{e}");
    }

    #[tokio::test]
    async fn invalid_files_are_refused_and_change_nothing() {
        let dir = std::env::temp_dir().join(format!("strait-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("strait.toml");
        let text = |topics: &str| {
            format!(
                "[source]\n\"bootstrap.servers\" = \"a:1\"\n[target]\n\"bootstrap.servers\" = \
                 \"b:1\"\n[mirror]\ntopics = [\"{topics}\"]\n"
            )
        };
        std::fs::write(&path, text("a")).unwrap();
        let load_path = path.clone();
        let source = Source::new(vec![path.clone()], move || {
            Ok(vec![
                Config::load(&load_path, &Environment::default())?.config,
            ])
        });
        let initial = Config::load(&path, &Environment::default()).unwrap().config;
        let metrics = crate::observe::metrics::Metrics::new();
        let mut reloader = Reloader::new(vec![initial.clone()], source);
        let live = reloader.subscribe(0).unwrap();
        assert!(
            crate::config::live::live_for(&initial).is_some(),
            "the mirror finds its channel"
        );
        assert!(!reloader.files_changed().await);

        std::fs::write(&path, text("(")).unwrap();
        assert!(reloader.files_changed().await);
        let e = reloader.reload("test").unwrap_err().to_string();
        assert!(e.contains("mirror.topics"), "{e}");
        assert!(live.borrow().selects("a"), "the old filters stay");
        assert!(
            !reloader.files_changed().await,
            "refused content is not retried"
        );

        std::fs::write(&path, text("b")).unwrap();
        assert!(reloader.files_changed().await);
        let changes = reloader.reload("test").unwrap();
        assert_eq!(changes.applied, ["mirror.topics"]);
        assert!(live.has_changed().unwrap());
        assert!(live.borrow().selects("b") && !live.borrow().selects("a"));
        let text = metrics.encode_prometheus();
        assert!(
            text.contains("strait_config_reloads_total{result=\"invalid\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("strait_config_reloads_total{result=\"applied\"} 1"),
            "{text}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
