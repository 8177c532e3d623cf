//! Free TCP ports on 127.0.0.1 for broker listeners.

use std::collections::HashSet;
use std::net::TcpListener;
use std::sync::{Mutex, OnceLock};

use crate::error::Error;

/// Returns `n` distinct ports that were free a moment ago.
///
/// The ports are bound together (so the kernel hands out distinct ones), then released for the broker to bind.
/// Ports handed out earlier in this process are skipped so that clusters started in parallel threads do not
/// collide; a collision with another process is still possible and is handled by the caller retrying the start.
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>, Error> {
    static HANDED_OUT: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    let handed_out = HANDED_OUT.get_or_init(|| Mutex::new(HashSet::new()));
    let mut seen = handed_out
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut held = Vec::with_capacity(n);
    let mut ports = Vec::with_capacity(n);
    // Bounded: each round either yields a new port or hits one we handed out before.
    for _ in 0..n * 20 {
        if ports.len() == n {
            break;
        }
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| Error::io("binding 127.0.0.1:0 to find a free port", e))?;
        let port = listener
            .local_addr()
            .map_err(|e| Error::io("reading the address of a bound socket", e))?
            .port();
        if seen.insert(port) {
            ports.push(port);
        }
        held.push(listener);
    }
    if ports.len() < n {
        return Err(Error::Invalid(format!(
            "could not find {n} free ports on 127.0.0.1 (found {})",
            ports.len()
        )));
    }
    drop(held);
    Ok(ports)
}
