//! # strait-otlp-sink: an OTLP/HTTP trace receiver for tests and the demo
//!
//! Owns: a small HTTP/1.1 server (hyper) that accepts `POST /v1/traces` with an
//! `application/x-protobuf` body (optionally `Content-Encoding: gzip`), decodes the standard
//! `ExportTraceServiceRequest` (types from `opentelemetry-proto`), keeps the spans in memory as
//! [`SpanRecord`]s and answers `200` with an empty `ExportTraceServiceResponse`; and the
//! producer -> mirror -> consumer hop analysis ([`hops`]) that the `strait-otlp-sink` binary
//! prints.
//!
//! Does not own: OTLP/gRPC, OTLP/JSON (answered with `415`), metrics or logs signals, storage
//! beyond memory, or any query API. It is a test double that stands in for Jaeger / an
//! OpenTelemetry Collector on a machine that has neither; it binds to loopback in tests.
//!
//! ```no_run
//! # async fn demo() -> Result<(), strait_otlp_sink::Error> {
//! use std::time::Duration;
//! let sink = strait_otlp_sink::Sink::start("127.0.0.1:0").await?;
//! // point an exporter at sink.endpoint() (http://127.0.0.1:<port>), then:
//! let spans = sink
//!     .wait_for(|s| s.iter().any(|s| s.name == "send my-topic"), Duration::from_secs(10))
//!     .await?;
//! assert_eq!(spans[0].service_name, "hello-world-producer");
//! # Ok(()) }
//! ```

pub mod error;
pub mod hops;
pub mod server;
pub mod span;

pub use error::{Error, Result};
pub use server::Sink;
pub use span::{AttrValue, SpanId, SpanKind, SpanRecord, TraceId};
