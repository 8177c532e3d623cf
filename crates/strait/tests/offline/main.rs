//! The `strait` binary without a broker: command line, advice, metrics over HTTP, Strimzi import: one test binary, one module per scenario (the modules were separate
//! binaries once; linking the whole crate graph once instead of per file is most of the build).
//!
//! `cargo test -p strait --test offline -- <module>::` runs one scenario.

// The end-to-end suite's helpers (top-level tests/, package strait-e2e); here for StraitCommand.
#[path = "../../../../tests/common/mod.rs"]
mod common;

mod advice;
mod cli;
mod compose;
mod import_strimzi;
mod metrics_http;
mod module_layout;
mod status;
