//! # strait-otlp-sink: an OTLP/HTTP trace receiver for tests and the demo
//!
//! Owns: a small HTTP/1.1 server (hyper) that accepts `POST /v1/traces` with an
//! `application/x-protobuf` body (optionally `Content-Encoding: gzip`), decodes the standard
//! `ExportTraceServiceRequest` (types from `opentelemetry-proto`), keeps the spans in memory as
//! [`SpanRecord`]s and answers `200` with an empty `ExportTraceServiceResponse`; and the
//! producer -> mirror -> consumer hop analysis ([`hops`]) that the `strait-otlp-sink` binary
//! prints.
//!
//! Also owns [`jaeger`]: running a real Jaeger v2 all-in-one on free loopback ports and reading
//! its traces back through the query API as the same [`SpanRecord`]s, so tests and the demo check
//! and summarise what Jaeger stored with the same code.
//!
//! The receiver does not own OTLP/gRPC, OTLP/JSON (answered with `415`), metrics or logs
//! signals, storage beyond memory, or any query API. It is the brokerless, Go-free reader of the
//! exact OTLP payload (Strait's exporter tests run against it in `scripts/test.sh --fast`); the
//! real Jaeger is what the reference scenario is checked against.
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
pub mod jaeger;
pub mod server;
pub mod span;

pub use error::{Error, Result};
pub use server::Sink;
pub use span::{AttrValue, SpanId, SpanKind, SpanRecord, TraceId};
