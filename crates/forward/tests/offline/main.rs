//! strait-forward without a broker: in-memory fakes, Java-written fixture files, property tests: one test binary, one module per scenario (the modules were separate
//! binaries once; linking the whole crate graph once instead of per file is most of the build).
//!
//! `cargo test -p strait-forward --test offline -- <module>::` runs one scenario.

#[path = "../common/mod.rs"]
mod common;

mod copies;
mod eos_mem;
mod java_fixtures;
mod java_verify;
mod merge_props;
mod pipeline_mem;
mod proptests;
