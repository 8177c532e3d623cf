//! # strait: the Kafka cross-cluster mirror binary
//!
//! Owns: the configuration (strait.toml, environment overrides, and drop-in translation of
//! MirrorMaker 1 and MirrorMaker 2 configurations), the command line, logging setup, Prometheus
//! metrics fed by the forwarder's observer hook, and the small HTTP server for `/metrics`,
//! `/healthz` and `/readyz`.
//!
//! Does not own: the Kafka protocol (`strait-wire`) or moving record batches (`strait-forward`).
//! This crate turns configuration into the inputs those crates need and reports what they do.

pub mod acls;
pub mod check;
pub mod cli;
pub mod config;
pub mod error;
pub mod exit;
pub mod failover;
pub mod flows;
pub mod health;
pub mod http;
pub mod import;
pub mod lag;
pub mod log_limit;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod mirror;
pub mod mirrormaker;
pub mod otel;
pub mod progress;
pub mod reload;
pub mod retry;
pub mod status;
pub mod topics;

pub use config::{Config, Environment, Loaded};
pub use error::{Error, Result};
