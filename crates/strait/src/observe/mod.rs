//! Observability: metrics, lag, health, logging, tracing export and the HTTP endpoints.

pub mod health;
pub mod http;
pub mod lag;
pub mod logging;
pub mod metrics;
pub mod otel;
pub mod progress;
pub(crate) mod sampler;
pub mod startup;
