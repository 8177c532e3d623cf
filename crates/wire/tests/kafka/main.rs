//! strait-wire against real Kafka brokers (KRaft, from the testkit): one test binary, one module per scenario (the modules were separate
//! binaries once; linking the whole crate graph once instead of per file is most of the build).
//!
//! `cargo test -p strait-wire --test kafka -- <module>::` runs one scenario.

#[path = "../common/mod.rs"]
mod common;

mod wire_admin;
mod wire_coordinator;
mod wire_failover;
mod wire_group;
mod wire_group_consumer;
mod wire_kafka39;
mod wire_oauth;
mod wire_plaintext;
mod wire_reauth;
mod wire_security;
mod wire_stalled_broker;
mod wire_txn;
