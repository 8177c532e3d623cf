//! The test kit's own checks against the brokers it starts: one test binary, one module per scenario (the modules were separate
//! binaries once; linking the whole crate graph once instead of per file is most of the build).
//!
//! `cargo test -p strait-testkit --test kafka -- <module>::` runs one scenario.

mod harness;
mod wan_listener;
