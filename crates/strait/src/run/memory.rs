//! Gives heap memory the allocator keeps back to the operating system.
//!
//! glibc's malloc keeps memory freed below the top of its heaps, in every per-thread arena. A
//! mirror starting at thousands of partitions (each resolving, retrying and starting at once)
//! then showed its start-up peak as RSS for good: 72 MB with every one of 4,000 partitions
//! idle, of which the live heap was well under half. `malloc_trim` returns such pages; run a
//! few times a minute it costs little (one walk of the free lists) and keeps RSS close to what
//! the mirror holds. musl's malloc (the static binary of the container image) returns memory by
//! itself, and other platforms have no such call: there this does nothing.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often freed memory is returned.
pub const TRIM_EVERY: Duration = Duration::from_secs(10);

/// Returns freed heap memory every [`TRIM_EVERY`] until `stop`.
pub async fn return_freed_memory(stop: CancellationToken) {
    let mut every = tokio::time::interval(TRIM_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stop.cancelled() => return,
        }
        // Off the runtime's workers: a trim locks each arena while it walks it.
        let started = std::time::Instant::now();
        if tokio::task::spawn_blocking(trim).await.is_err() {
            return;
        }
        tracing::debug!(elapsed = ?started.elapsed(), "returned freed heap memory");
    }
}

/// Returns the heap's free pages to the operating system now; whether the allocator has such
/// a call (glibc on Linux).
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    {
        // SAFETY: malloc_trim takes no pointer and locks each arena itself; any thread may call
        // it at any time.
        unsafe {
            libc::malloc_trim(0);
        }
        true
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}
