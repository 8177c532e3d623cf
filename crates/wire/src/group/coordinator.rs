//! FindCoordinator: which broker coordinates a consumer group (or a transactional id), with
//! retries while the coordinator is loading or moving, and a per-key cache.

use std::collections::HashMap;
use std::sync::{Arc, MutexGuard, PoisonError};
use std::time::Duration;

use kafka_protocol::ResponseError;
use kafka_protocol::messages::FindCoordinatorRequest;
use kafka_protocol::protocol::StrBytes;

use crate::client::{ConnectionKind, Retry};
use crate::error::{Error, ErrorClass, Result};
use crate::group::with_principal;
use crate::{Client, Connection};

/// How long a coordinator lookup keeps retrying retriable errors (Java's
/// `default.api.timeout.ms` default). A fresh cluster creates `__consumer_offsets` on the first
/// lookup and answers COORDINATOR_NOT_AVAILABLE until it is ready.
pub(crate) const LOOKUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Which kind of coordinator to look up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CoordinatorType {
    /// The group coordinator of a consumer group (key = group id).
    Group,
    /// The transaction coordinator of a transactional producer (key = transactional id).
    Transaction,
}

impl CoordinatorType {
    fn key_type(self) -> i8 {
        match self {
            CoordinatorType::Group => 0,
            CoordinatorType::Transaction => 1,
        }
    }

    /// The ACL every user of this coordinator needs in the end (it implies the Describe that
    /// FindCoordinator checks): Read on a group, Write on a transactional id.
    fn operation(self) -> &'static str {
        match self {
            CoordinatorType::Group => "Read",
            CoordinatorType::Transaction => "Write",
        }
    }

    fn resource(self, key: &str) -> String {
        match self {
            CoordinatorType::Group => format!("Group:{key}"),
            CoordinatorType::Transaction => format!("TransactionalId:{key}"),
        }
    }
}

impl Client {
    /// Finds the coordinator for `key` and returns a connection to it.
    ///
    /// The connection is the client's coordinator connection to that broker, not the data
    /// connection that [`Client::broker`] returns (and fetches and produces use): the
    /// coordinator holds a JoinGroup for up to the rebalance timeout, and a broker answers one
    /// connection's requests in order, so a shared connection would stall the data behind it.
    ///
    /// The answer is cached per (type, key) in the client; a cached coordinator whose
    /// connection cannot be opened is looked up again. Callers that get NOT_COORDINATOR or
    /// COORDINATOR_NOT_AVAILABLE from it call [`Client::forget_coordinator`]. The lookup
    /// retries COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR and
    /// connection errors with backoff for up to 60 s (a fresh cluster creates
    /// `__consumer_offsets` on the first lookup).
    pub async fn coordinator(&self, key_type: CoordinatorType, key: &str) -> Result<Connection> {
        let slot = (key_type.key_type(), key.to_owned());
        let cached = self.coordinators().get(&slot).copied();
        if let Some(node_id) = cached {
            match self.connection(ConnectionKind::Coordinator, node_id).await {
                Ok(conn) => return Ok(conn),
                Err(e) if e.is_retriable() => {
                    tracing::debug!(key, node_id, error = %e, "cached coordinator unreachable; looking it up again");
                    self.forget_coordinator(key_type, key);
                }
                Err(e) => return Err(e),
            }
        }
        let mut retry = Retry::within(LOOKUP_TIMEOUT, self.config());
        loop {
            let attempt = match lookup_once(self, key_type, key).await {
                Ok(node_id) => self
                    .connection(ConnectionKind::Coordinator, node_id)
                    .await
                    .map(|c| (node_id, c)),
                Err(e) => Err(e),
            };
            let err = match attempt {
                Ok((node_id, conn)) => {
                    self.coordinators().insert(slot, node_id);
                    return Ok(conn);
                }
                Err(e) => e,
            };
            let Some(wait) = retry.next_wait().filter(|_| err.is_retriable()) else {
                return Err(err);
            };
            tracing::debug!(key, error = %err, "coordinator lookup failed; retrying");
            tokio::time::sleep(wait).await;
        }
    }

    /// Drops the cached coordinator of `key` (it moved, or its connection broke).
    pub fn forget_coordinator(&self, key_type: CoordinatorType, key: &str) {
        self.coordinators()
            .remove(&(key_type.key_type(), key.to_owned()));
    }

    fn coordinators(&self) -> MutexGuard<'_, HashMap<(i8, String), i32>> {
        self.inner
            .coordinators
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// One FindCoordinator round trip: the coordinator's node id, or the error.
async fn lookup_once(client: &Client, key_type: CoordinatorType, key: &str) -> Result<i32> {
    let conn = client.any_broker().await?;
    // v0 cannot name a key type (groups only).
    let min = if key_type == CoordinatorType::Group {
        0
    } else {
        1
    };
    let version = conn.pick_version::<FindCoordinatorRequest>(min..=6)?;
    let mut req = FindCoordinatorRequest::default();
    let key_bytes = StrBytes::from_string(key.to_owned());
    if version >= 4 {
        req.coordinator_keys = vec![key_bytes];
    } else {
        req.key = key_bytes;
    }
    if version >= 1 {
        req.key_type = key_type.key_type();
    }
    let resp = conn.send(req, version).await?;
    let (code, message, node_id) = if version >= 4 {
        let Some(c) = resp
            .coordinators
            .into_iter()
            .find(|c| c.key.as_str() == key)
        else {
            return Err(Error::Broker {
                code: ResponseError::CoordinatorNotAvailable,
                context: format!(
                    "FindCoordinator for '{key}': the response has no entry for the key"
                ),
            });
        };
        (c.error_code, c.error_message, c.node_id.0)
    } else {
        (resp.error_code, resp.error_message, resp.node_id.0)
    };
    match ResponseError::try_from_code(code) {
        None => Ok(node_id),
        Some(
            code @ (ResponseError::GroupAuthorizationFailed
            | ResponseError::TransactionalIdAuthorizationFailed),
        ) => Err(Error::Authorization {
            code,
            principal: conn.principal().or(client.principal()).map(str::to_owned),
            operation: key_type.operation().to_owned(),
            resource: key_type.resource(key),
        }),
        Some(code) => Err(Error::Broker {
            code,
            context: format!(
                "FindCoordinator for {}{}",
                key_type.resource(key),
                message
                    .map(|m| format!(": {}", m.as_str()))
                    .unwrap_or_default()
            ),
        }),
    }
}

/// The coordinator of one key, as used by a long-lived owner (a group member, group offsets).
#[derive(Clone)]
pub(crate) struct CoordinatorCache {
    client: Client,
    key_type: CoordinatorType,
    key: Arc<str>,
}

impl CoordinatorCache {
    pub fn new(client: Client, key_type: CoordinatorType, key: &str) -> CoordinatorCache {
        CoordinatorCache {
            client,
            key_type,
            key: Arc::from(key),
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// The cached coordinator, or a fresh lookup.
    pub async fn get(&self) -> Result<Connection> {
        self.client.coordinator(self.key_type, &self.key).await
    }

    /// Forgets the coordinator (it moved, or its connection broke).
    pub fn invalidate(&self) {
        self.client.forget_coordinator(self.key_type, &self.key);
    }

    /// Runs `attempt` on the coordinator: looks it up again when it moved or its connection
    /// broke, and retries retriable errors with backoff (`retry.backoff.ms` ..
    /// `retry.backoff.max.ms`) until the next wait would end after `within`.
    pub async fn call<T, F, Fut>(&self, api: &str, within: Duration, mut attempt: F) -> Result<T>
    where
        F: FnMut(Connection) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let mut retry = Retry::within(within, self.client.config());
        loop {
            let result = match self.get().await {
                Ok(conn) => attempt(conn.clone())
                    .await
                    .map_err(|e| with_principal(e, &conn)),
                Err(e) => Err(e),
            };
            let err = match result {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if is_coordinator_error(&err) {
                self.invalidate();
            }
            let Some(wait) = retry.next_wait().filter(|_| err.is_retriable()) else {
                return Err(err);
            };
            tracing::debug!(key = &*self.key, api, error = %err, "retrying on the coordinator");
            tokio::time::sleep(wait).await;
        }
    }
}

/// Whether an error means "the coordinator moved or its connection broke: look it up again".
pub(crate) fn is_coordinator_error(e: &Error) -> bool {
    match e.code() {
        // A request that timed out on the coordinator's side may mean it is gone.
        Some(code) => matches!(
            ErrorClass::of(code),
            ErrorClass::Coordinator | ErrorClass::Ambiguous
        ),
        None => e.is_retriable(),
    }
}
