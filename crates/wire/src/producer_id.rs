//! InitProducerId for an idempotent producer (no transactional id).

use kafka_protocol::ResponseError;
use kafka_protocol::messages::InitProducerIdRequest;

use crate::client::Client;
use crate::conn::Connection;
use crate::error::{Error, ErrorClass, Result};

/// A producer id and epoch for idempotent batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProducerIdentity {
    /// The producer id.
    pub producer_id: i64,
    /// The producer epoch.
    pub epoch: i16,
}

impl ProducerIdentity {
    /// The same producer id with the next epoch, after which every partition's sequence restarts
    /// at 0 (what Java's idempotent producer does locally after a batch was rejected, KIP-360:
    /// brokers accept a higher epoch starting at sequence 0). `None` when the epoch is
    /// exhausted: get a new id with [`Client::init_producer_id`].
    pub fn next_epoch(self) -> Option<ProducerIdentity> {
        (self.epoch < i16::MAX).then_some(ProducerIdentity {
            producer_id: self.producer_id,
            epoch: self.epoch + 1,
        })
    }
}

impl Connection {
    /// Sends one InitProducerId request (no transactional id): a new producer id, epoch 0.
    pub async fn init_producer_id(&self) -> Result<ProducerIdentity> {
        let version = self.pick_version::<InitProducerIdRequest>(0..=5)?;
        let req = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000);
        let resp = self.send(req, version).await?;
        match ResponseError::try_from_code(resp.error_code) {
            None => Ok(ProducerIdentity {
                producer_id: resp.producer_id.0,
                epoch: resp.producer_epoch,
            }),
            Some(
                code @ (ResponseError::ClusterAuthorizationFailed
                | ResponseError::TransactionalIdAuthorizationFailed),
            ) => Err(Error::Authorization {
                code,
                principal: self.principal().map(str::to_owned),
                operation: "IdempotentWrite".into(),
                resource: "Cluster:kafka-cluster".into(),
            }),
            Some(code) => Err(Error::broker(
                code,
                format!("InitProducerId on broker {}", self.broker()),
            )),
        }
    }
}

impl Client {
    /// Gets a new producer id and epoch for idempotent produce (any broker answers), retrying
    /// retriable errors within `request.timeout.ms`. The principal needs IdempotentWrite on the
    /// cluster (or Write on a topic).
    pub async fn init_producer_id(&self) -> Result<ProducerIdentity> {
        let mut retry = self.retry();
        loop {
            let r = async { self.any_broker().await?.init_producer_id().await }.await;
            match r {
                Err(e)
                    if e.is_retriable()
                        || e.code().is_some_and(|c| ErrorClass::of(c).is_retriable()) =>
                {
                    if !retry.wait().await {
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }
}
