//! The strait-forward pipeline against real Kafka brokers: one test binary, one module per scenario (the modules were separate
//! binaries once; linking the whole crate graph once instead of per file is most of the build).
//!
//! `cargo test -p strait-forward --test kafka -- <module>::` runs one scenario.

#[path = "../broker/mod.rs"]
mod broker;

mod forward_edge;
mod forward_fetch_leaders;
mod forward_recompress;
mod forward_restart;
