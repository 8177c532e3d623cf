//! OpenTelemetry for the demo clients: a tracer whose spans go to an OTLP/HTTP endpoint, and W3C
//! `traceparent` injection/extraction through the SDK's `TraceContextPropagator`.
//!
//! Like the Java clients of the walkthrough (`JAEGER_SAMPLER_TYPE=const`, `PARAM=1`), every trace
//! the demo starts is sampled. Exports run on the tokio runtime (the OTLP exporter's hyper client
//! needs it) while the SDK's batch processor queues spans on its own thread.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracer, SdkTracerProvider, SpanData, SpanExporter,
};
use tokio::runtime::Handle;

use crate::error::{Error, Result};

/// Export outcome counters.
#[derive(Debug, Default)]
struct Counters {
    exported: AtomicU64,
    failed: AtomicU64,
}

/// Runs the wrapped exporter's exports as tasks on a tokio runtime.
#[derive(Debug)]
struct OnRuntime<E> {
    inner: Arc<E>,
    handle: Handle,
    counters: Arc<Counters>,
}

impl<E: SpanExporter + 'static> SpanExporter for OnRuntime<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let n = batch.len() as u64;
        let inner = self.inner.clone();
        let counters = self.counters.clone();
        let task = self.handle.spawn(async move { inner.export(batch).await });
        async move {
            let result = task.await.unwrap_or_else(|e| {
                Err(OTelSdkError::InternalFailure(format!(
                    "export task failed: {e}"
                )))
            });
            let c = if result.is_ok() {
                &counters.exported
            } else {
                &counters.failed
            };
            c.fetch_add(n, Ordering::Relaxed);
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

/// The demo's tracer and its export pipeline.
#[derive(Debug)]
pub struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    counters: Arc<Counters>,
    exporting: bool,
}

impl Telemetry {
    /// A tracer for `service_name` exporting to `endpoint` (an OTLP/HTTP base URL such as
    /// `http://127.0.0.1:4318`; `/v1/traces` is appended), or exporting nowhere when `None`
    /// (spans and `traceparent` headers are still made). Call inside the tokio runtime.
    pub fn init(endpoint: Option<&str>, service_name: &str) -> Result<Telemetry> {
        let counters = Arc::new(Counters::default());
        let mut builder = SdkTracerProvider::builder().with_resource(
            Resource::builder()
                .with_service_name(service_name.to_string())
                .with_attributes([KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))])
                .build(),
        );
        if let Some(endpoint) = endpoint {
            let handle = Handle::try_current()
                .map_err(|_| Error::Tracing("no tokio runtime to export on".into()))?;
            let base = endpoint.trim_end_matches('/');
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(format!("{base}/v1/traces"))
                .with_timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| Error::Tracing(format!("{endpoint:?}: {e}")))?;
            let exporter = OnRuntime {
                inner: Arc::new(exporter),
                handle,
                counters: counters.clone(),
            };
            builder = builder.with_span_processor(
                BatchSpanProcessor::builder(exporter)
                    .with_batch_config(
                        BatchConfigBuilder::default()
                            .with_max_queue_size(4096)
                            .with_max_export_batch_size(512)
                            .with_scheduled_delay(Duration::from_millis(500))
                            .build(),
                    )
                    .build(),
            );
        }
        let provider = builder.build();
        let tracer = provider.tracer("strait-demo");
        Ok(Telemetry {
            provider,
            tracer,
            counters,
            exporting: endpoint.is_some(),
        })
    }

    /// The tracer.
    pub fn tracer(&self) -> &SdkTracer {
        &self.tracer
    }

    /// Exports what is queued and stops; returns (spans exported, spans lost in failed exports).
    pub async fn shutdown(self) -> (u64, u64) {
        let Telemetry {
            provider,
            counters,
            exporting,
            ..
        } = self;
        if exporting {
            // Blocking: the processor's exports need the runtime's other threads meanwhile.
            let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        }
        (
            counters.exported.load(Ordering::Relaxed),
            counters.failed.load(Ordering::Relaxed),
        )
    }
}

/// Record headers being written.
struct HeaderInjector<'a>(&'a mut Vec<(String, Vec<u8>)>);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.retain(|(k, _)| k != key);
        // The propagator writes an empty `tracestate` when there is none; leave it out.
        if value.is_empty() {
            return;
        }
        self.0.push((key.to_string(), value.into_bytes()));
    }
}

/// The `traceparent` (and `tracestate`, if any) headers for the span in `cx`.
pub fn inject(cx: &Context) -> Vec<(String, Vec<u8>)> {
    let mut headers = Vec::new();
    TraceContextPropagator::new().inject_context(cx, &mut HeaderInjector(&mut headers));
    headers
}

/// Record headers being read (names compared case-insensitively, the last duplicate wins).
struct HeaderExtractor(HashMap<String, String>);

impl Extractor for HeaderExtractor {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(&key.to_ascii_lowercase()).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// The producer's context from a record's headers; an empty context if there is none.
pub fn extract<'a>(headers: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>) -> Context {
    let map = headers
        .into_iter()
        .filter_map(|(k, v)| {
            Some((
                std::str::from_utf8(k).ok()?.to_ascii_lowercase(),
                std::str::from_utf8(v?).ok()?.to_string(),
            ))
        })
        .collect();
    TraceContextPropagator::new().extract_with_context(&Context::new(), &HeaderExtractor(map))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use opentelemetry::trace::{TraceContextExt as _, Tracer as _};

    use super::*;

    #[tokio::test]
    async fn a_sampled_span_round_trips_through_traceparent() {
        let t = Telemetry::init(None, "test").unwrap();
        let span = t.tracer().start_with_context("send t", &Context::new());
        let cx = Context::new().with_span(span);
        let headers = inject(&cx);
        assert_eq!(headers.len(), 1);
        assert_eq!(headers[0].0, "traceparent");
        let value = String::from_utf8(headers[0].1.clone()).unwrap();
        let sc = cx.span().span_context().clone();
        assert_eq!(
            value,
            format!("00-{}-{}-01", sc.trace_id(), sc.span_id()),
            "sampled W3C traceparent"
        );
        let back = extract([(b"TraceParent".as_slice(), Some(headers[0].1.as_slice()))]);
        assert_eq!(back.span().span_context().trace_id(), sc.trace_id());
        assert!(back.span().span_context().is_remote());
        let none = extract([(b"other".as_slice(), Some(b"x".as_slice()))]);
        assert!(!none.span().span_context().is_valid());
        t.shutdown().await;
    }
}
