//! `mirror.session_timeout` on the consumer group protocol (KIP-848): there the session timeout
//! is the group's, not the member's, so a configured value is set as the group's own
//! `consumer.session.timeout.ms` (with a heartbeat interval to match). Not fatal when the broker
//! refuses it: the group keeps the broker's default, and the warning says why and what to do.

use std::time::Duration;

use strait_wire::Client;
use strait_wire::group::set_consumer_group_timeouts;

use crate::config::{Config, defaults};

/// The group's heartbeat interval for `session`: a tenth of it, at least 500 ms, as the classic
/// protocol's (the broker clamps it into its own bounds).
pub(crate) fn heartbeat_for(session: Duration) -> Duration {
    (session / 10).max(Duration::from_millis(500))
}

/// Whether the mirror sets its group's timeouts: only when `mirror.session_timeout` is not the
/// default (so a mirror without the setting needs no AlterConfigs right).
pub(crate) fn wanted(config: &Config) -> bool {
    config.mirror.session_timeout != defaults::SESSION_TIMEOUT
}

/// Sets the group's session timeout in the background (the membership does not wait for it:
/// the coordinator applies it at the next heartbeat) and logs the outcome.
pub(crate) fn apply(source: &Client, config: &Config) {
    let client = source.clone();
    let group = config.mirror.group_id.clone();
    let session = config.mirror.session_timeout;
    tokio::spawn(async move {
        match set_consumer_group_timeouts(&client, &group, session, heartbeat_for(session)).await {
            Ok(()) => tracing::info!(
                group = %group,
                session_timeout = ?session,
                "set the consumer group's session timeout (consumer.session.timeout.ms)"
            ),
            Err(e) => tracing::warn!(
                group = %group,
                "mirror.session_timeout = {session:?} is not applied to the consumer group, which \
                 keeps the broker's group.consumer.session.timeout.ms: {e}. Setting it needs \
                 ALTER_CONFIGS on Group:{group} and a value within the broker's \
                 group.consumer.min/max.session.timeout.ms"
            ),
        }
    });
}
