//! Waiting for a topic to exist.

use std::time::Duration;

use strait_wire::Client;

use crate::error::{Error, Result};

/// How long the clients wait for their topic by default (on the target cluster the mirror
/// creates it, shortly after it starts).
pub const TOPIC_WAIT: Duration = Duration::from_secs(120);

/// The topic's partition count, once it exists; fails after `wait`.
pub async fn wait_for_topic(client: &Client, topic: &str, wait: Duration) -> Result<i32> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let md = client.metadata(Some(&[topic.to_string()])).await?;
        let reason = match md.topic(topic) {
            Some(t) if t.error.is_none() && !t.partitions.is_empty() => {
                return Ok(t.partitions.len() as i32);
            }
            Some(t) => match t.error {
                Some(e) => format!("{e:?}"),
                None => "no partitions".to_string(),
            },
            None => "not in metadata".to_string(),
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::TopicUnavailable {
                topic: topic.to_string(),
                waited_secs: wait.as_secs(),
                reason,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
