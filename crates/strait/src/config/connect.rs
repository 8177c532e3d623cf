//! Connecting to the two clusters a configuration names.
//!
//! Here rather than in the run loop because the checkpointer (failover) and `strait check`
//! connect the same way, and neither may depend on the run loop.

use strait_wire::Client;

use super::Config;
use crate::error::{Error, Result};

/// Connects to both clusters (fails fast with the connection error if one is unreachable or
/// refuses the credentials).
pub async fn connect(config: &Config) -> Result<(Client, Client)> {
    let source_cfg = config.source.client_config().map_err(Error::Wire)?;
    let target_cfg = config.target.client_config().map_err(Error::Wire)?;
    let source = connect_cluster("source", &config.source.alias, source_cfg).await?;
    let target = connect_cluster("target", &config.target.alias, target_cfg).await?;
    Ok((source, target))
}

async fn connect_cluster(
    side: &'static str,
    alias: &str,
    config: strait_wire::ClientConfig,
) -> Result<Client> {
    Client::connect(config)
        .await
        .map_err(|source| Error::Connect {
            side,
            alias: alias.to_string(),
            source: Box::new(source),
        })
}
