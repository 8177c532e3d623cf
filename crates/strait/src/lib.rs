//! # strait: the Kafka cross-cluster mirror binary
//!
//! Owns: the configuration (strait.toml, environment overrides, and drop-in translation of
//! MirrorMaker 1 and MirrorMaker 2 configurations), the command line, the run loop around the
//! forwarder, site failover (offset translation, checkpoints), and observability: Prometheus
//! metrics fed by the forwarder's observer hook, lag, health, logging, OpenTelemetry spans and
//! the small HTTP server for `/metrics`, `/healthz` and `/readyz`.
//!
//! Does not own: the Kafka protocol (`strait-wire`) or moving record batches (`strait-forward`).
//! This crate turns configuration into the inputs those crates need and reports what they do.
//!
//! ## Layout
//!
//! Grouped by concern, lowest first; a module may use the ones above it in this table, never
//! one below (the offline test `module_layout::` fails on any loop, between files or between
//! these concerns):
//!
//! | Module | What it is |
//! |---|---|
//! | [`error`], [`exit`] | The crate's one error enum (what happened, what to fix) and the process exit codes (one table for `--help` and the code). |
//! | [`config`] | The validated configuration of one flow: strait.toml, `[[flows]]`, environment overrides, config providers, Java `.properties` ([`config::properties`]); connecting to its clusters (`config::connect`) and the live configuration a hot reload publishes (`config::live`). |
//! | [`import`] | Other tools' configurations into strait.toml: MirrorMaker 1 and 2 files (`import::mirrormaker`, for `strait mirror-maker` / `mm2`) and Strimzi resources ([`import::strimzi`], `strait import`). |
//! | [`observe`] | Observability: [`observe::metrics`] (Prometheus, the forwarder's observer), [`observe::lag`] (the lag book) and its sampler, [`observe::health`] (readiness, liveness), [`observe::http`] (the endpoints), [`observe::logging`] (the log limiter is forward's [`strait_forward::log_limit`]), [`observe::otel`] (spans), [`observe::progress`] (the catch-up progress line) |
//! | [`failover`] | Site failover: offset maps, MirrorMaker 2 offset syncs, checkpoints and heartbeats, `strait failover` / `offsets`. |
//! | [`run`] | `strait run`: the flows of a process ([`run::flows`]), each flow's mirror loop (`run::mirror`), topic and ACL sync, hot reload ([`run::reload`]), memory trimming. |
//! | [`status`] | `strait status`: reads a running instance's `/readyz` and `/metrics` over HTTP (a leaf: it imports nothing of the crate, so the error enum can carry its error). |
//! | [`check`] | `strait check`: the rights `strait run` needs, tested against both clusters. |
//! | [`cli`] | The command line; `main.rs` parses it, sets up logging and dispatches. |
//!
//! ## One record's path
//!
//! `main.rs` loads the [`Config`] of every flow and calls [`run::flows::run`], which starts the
//! shared `/metrics` endpoint ([`observe::http`]), the checkpointer ([`failover::checkpoint`])
//! and `run::mirror::run` per flow. The mirror connects (`config::connect`), creates the target
//! topics (`run::topics`), joins the source group and hands the assigned partitions to
//! `strait_forward::Forwarder`: it fetches a batch from the source, rewrites it without
//! decompressing, produces it to the target and, once the target acknowledged it, reports it to
//! the observer ([`observe::metrics`], [`observe::otel`], the failover offset maps) and advances
//! the acknowledged position. The group's commit of that position goes through the offset-syncs
//! gate (`failover::syncs`, when checkpoints are on), and the lag sampler
//! (`observe::sampler`) compares it with the source's end offset for `/metrics` and `/readyz`.
//!
//! Visibility: `pub` is what `main.rs` and the tests use; the rest is `pub(crate)`.

pub mod check;
pub mod cli;
pub mod config;
pub mod error;
pub mod exit;
pub mod failover;
pub mod import;
pub mod observe;
pub mod run;
pub mod status;

pub use config::{Config, Environment, Loaded};
pub use error::{Error, Result};
