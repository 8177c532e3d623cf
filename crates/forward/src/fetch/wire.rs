//! [`SourceCluster`] over a `strait-wire` [`Client`]: routes from the client's metadata cache,
//! leader hints from fetch answers, single-shot fetches ([`Client::fetch_from`]).

use std::collections::HashMap;
use std::sync::Mutex;

use strait_wire::PartitionLeader;
use strait_wire::fetch::{SessionFetch, SessionFetchResponse};
use strait_wire::{Client, TopicPartition};
use tokio::time::Instant;

use super::{SourceCluster, lock};
use crate::pipeline::io::IoError;
use crate::pipeline::kafka::classify;

/// The source cluster over a `strait-wire` client.
pub(crate) struct WireCluster {
    client: Client,
    /// One metadata refresh at a time, so that the partitions of a topic whose leader moved
    /// share one refresh instead of queueing one each.
    refreshing: tokio::sync::Mutex<()>,
    /// When the last refresh of each topic started.
    refreshed: Mutex<HashMap<String, Instant>>,
    /// New leaders named by brokers (KIP-951), ahead of the metadata: partition -> (leader,
    /// leader epoch).
    hints: Mutex<HashMap<TopicPartition, (i32, i32)>>,
}

impl WireCluster {
    pub(crate) fn new(client: Client) -> Self {
        WireCluster {
            client,
            refreshing: tokio::sync::Mutex::new(()),
            refreshed: Mutex::new(HashMap::new()),
            hints: Mutex::new(HashMap::new()),
        }
    }
}

impl SourceCluster for WireCluster {
    async fn route(
        &self,
        partition: &TopicPartition,
        stale_since: Option<Instant>,
    ) -> Result<PartitionLeader, IoError> {
        let route = match stale_since {
            None => self.client.partition_leader(partition, false).await,
            Some(since) => {
                let _one = self.refreshing.lock().await;
                let fresh = lock(&self.refreshed)
                    .get(partition.topic())
                    .is_some_and(|at| *at > since);
                let started = Instant::now();
                let route = self.client.partition_leader(partition, !fresh).await;
                if !fresh {
                    lock(&self.refreshed).insert(partition.topic().to_owned(), started);
                }
                route
            }
        }
        .map_err(|e| classify(&e))?;
        let mut hints = lock(&self.hints);
        match hints.get(partition) {
            Some(&(leader, epoch)) if epoch > route.leader_epoch => Ok(PartitionLeader {
                leader,
                leader_epoch: epoch,
                topic_id: route.topic_id,
            }),
            Some(_) => {
                // The metadata caught up with the hint.
                hints.remove(partition);
                Ok(route)
            }
            None => Ok(route),
        }
    }

    fn leader_hint(&self, partition: &TopicPartition, leader: i32, leader_epoch: i32) -> bool {
        let md = self.client.cached_metadata();
        if !md.brokers.contains_key(&leader) {
            return false;
        }
        if md
            .partition(partition)
            .is_some_and(|p| p.leader_epoch >= leader_epoch)
        {
            // The metadata already knows (it was refreshed after this fetch was routed).
            return true;
        }
        let mut hints = lock(&self.hints);
        let newer = hints
            .get(partition)
            .is_none_or(|&(_, epoch)| epoch < leader_epoch);
        if newer {
            hints.insert(partition.clone(), (leader, leader_epoch));
        }
        true
    }

    fn unresponsive(&self, node: i32) {
        self.client.unresponsive(node);
    }

    async fn fetch(
        &self,
        node: i32,
        request: SessionFetch,
    ) -> Result<SessionFetchResponse, IoError> {
        self.client
            .fetch_from(node, &request)
            .await
            .map_err(|e| classify(&e))
    }
}
