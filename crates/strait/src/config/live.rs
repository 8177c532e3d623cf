//! The live configuration of each running flow: what a hot reload ([`crate::run::reload`])
//! publishes and what the mirror and the checkpointer read while they run.
//!
//! It lives here, below both, so that the readers (the run loop, failover) do not depend on the
//! reloader that writes it. Each flow's channel is found by the flow's source alias, target alias
//! and group id ([`live_for`]), so no signature between the process and the mirror changes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::watch;

use super::Config;

/// The live configuration of a running mirror: read it (`borrow()`) when deciding, and await
/// `changed()` to act on a reload at once.
pub type Live = watch::Receiver<Arc<Config>>;

/// What identifies a flow across reloads.
pub(crate) fn flow_key(c: &Config) -> String {
    format!(
        "{}->{} (group {})",
        c.source.alias, c.target.alias, c.mirror.group_id
    )
}

/// The live configuration of every published flow, by [`flow_key`].
fn registry() -> std::sync::MutexGuard<'static, HashMap<String, Live>> {
    static LIVE: OnceLock<Mutex<HashMap<String, Live>>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Publishes `config` as the live configuration of its flow; the returned sender updates it.
pub(crate) fn publish(config: Config) -> (String, watch::Sender<Arc<Config>>) {
    let key = flow_key(&config);
    let (tx, rx) = watch::channel(Arc::new(config));
    registry().insert(key.clone(), rx);
    (key, tx)
}

/// The live configuration of the flow `config` started as, if one was published for it.
pub fn live_for(config: &Config) -> Option<Live> {
    registry().get(&flow_key(config)).cloned()
}
