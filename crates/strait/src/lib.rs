//! # strait: the Kafka cross-cluster mirror binary
//!
//! Owns: the configuration (strait.toml, environment overrides, and drop-in translation of
//! MirrorMaker 1 and MirrorMaker 2 configurations), the command line, logging setup, Prometheus
//! metrics fed by the forwarder's observer hook, and the small HTTP server for `/metrics`,
//! `/healthz` and `/readyz`.
//!
//! Does not own: the Kafka protocol (`strait-wire`) or moving record batches (`strait-forward`).
//! This crate turns configuration into the inputs those crates need and reports what they do.

pub mod check;
pub mod cli;
pub mod config;
pub mod error;
pub mod failover;
pub mod import;
pub mod observe;
pub mod run;

pub use config::{Config, Environment, Loaded};
pub use error::{Error, Result};
