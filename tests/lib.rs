//! `strait-e2e`: the end-to-end tests of the `strait` binary against real Kafka clusters, the
//! cross-crate suite at the top of the workspace. Nothing here but the tests: `kafka/main.rs`
//! (one module per scenario) and their helpers in `common/mod.rs`.
//!
//! Run one scenario: `cargo build -p strait && cargo test -p strait-e2e --test kafka -- failover::`.
