//! The `strait` binary end to end against real Kafka clusters: one test binary, one module per scenario (the modules were separate
//! binaries once; linking the whole crate graph once instead of per file is most of the build).
//!
//! A workspace member of its own (`strait-e2e`, the cross-crate suite): each crate keeps its own
//! layer's tests. `cargo build -p strait && cargo test -p strait-e2e --test kafka -- <module>::`
//! runs one scenario (the tests drive the built binary, see `common::strait_bin`).

#[path = "../common/mod.rs"]
mod common;

mod acl_deny;
mod acl_heal;
mod acl_sync;
mod active_active;
mod check;
mod checkpoint_failover;
mod crash;
mod crash_loop;
mod eos_denied;
mod eos_failover;
mod eos_kills;
mod eos_latency;
mod eos_retention;
mod failback;
mod failover;
mod failover_handover;
mod failover_kills;
mod failover_sources;
mod hot_reload;
mod import_seed_mirrors;
mod leave_on_shutdown;
mod scale;
mod scale_incremental;
mod scale_topics;
mod scenario;
mod secrets;
mod shutdown;
mod signals;
mod startup_gate;
mod switchover;
mod topic_configs;
mod topic_configs_acl;
mod topics;
mod wan;
