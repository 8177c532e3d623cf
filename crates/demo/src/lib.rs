//! The demo producer and consumer of Strait's reference scenario, as a library so that the
//! scenario test can run them in-process; the `strait-demo` binary is a thin CLI over it.
//!
//! Owns: the two demo clients (traced "Hello world - N" producer and traced group consumer).
//! Does not own: the Kafka protocol (strait-wire), batch parsing (strait-forward) or the mirror.

pub mod consume;
pub mod error;
pub mod produce;
pub mod props;
pub mod record;
pub mod telemetry;
pub mod topic;
