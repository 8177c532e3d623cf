//! Getting finished spans out: a bounded queue whose overflow is counted, and an exporter
//! adapter that runs the (async, hyper-based) OTLP exporter on the mirror's tokio runtime.
//!
//! The SDK's `BatchSpanProcessor` exports from its own thread with a plain `block_on`, which a
//! hyper client cannot run on (it needs a tokio reactor), and it does not publish how many spans
//! it dropped. [`TokioExporter`] hands each export to the runtime through a [`Handle`];
//! [`BoundedProcessor`] admits at most `max_queue_size` spans that are not yet handed to the
//! exporter, so the processor's own queue never overflows and every drop is counted here.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{BatchSpanProcessor, Span, SpanData, SpanExporter, SpanProcessor};
use tokio::runtime::Handle;

/// Counters shared by the exporter side.
#[derive(Debug, Default)]
pub(crate) struct ExportCounters {
    /// Spans admitted to the queue and not yet handed to the exporter.
    pub queued: AtomicUsize,
    /// Spans refused because the queue was full.
    pub dropped: AtomicU64,
    /// Spans the exporter delivered.
    pub exported: AtomicU64,
    /// Spans in exports that failed (endpoint down, HTTP error, timeout).
    pub failed: AtomicU64,
}

impl ExportCounters {
    fn admit(&self, capacity: usize) -> bool {
        self.queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                (q < capacity).then_some(q + 1)
            })
            .is_ok()
    }

    fn release(&self, n: usize) {
        let _ = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                Some(q.saturating_sub(n))
            });
    }
}

/// Runs `inner`'s exports as tasks on a tokio runtime.
#[derive(Debug)]
pub(crate) struct TokioExporter<E> {
    inner: Arc<E>,
    handle: Handle,
    counters: Arc<ExportCounters>,
}

impl<E> TokioExporter<E> {
    pub(crate) fn new(inner: E, handle: Handle, counters: Arc<ExportCounters>) -> Self {
        TokioExporter {
            inner: Arc::new(inner),
            handle,
            counters,
        }
    }
}

impl<E: SpanExporter + 'static> SpanExporter for TokioExporter<E> {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let n = batch.len();
        // The spans left the processor's queue: make room for new ones.
        self.counters.release(n);
        let inner = self.inner.clone();
        let counters = self.counters.clone();
        let task = self.handle.spawn(async move { inner.export(batch).await });
        async move {
            let result = match task.await {
                Ok(r) => r,
                Err(e) => Err(OTelSdkError::InternalFailure(format!(
                    "the span export task did not finish (runtime shutting down?): {e}"
                ))),
            };
            let counter = if result.is_ok() {
                &counters.exported
            } else {
                &counters.failed
            };
            counter.fetch_add(n as u64, Ordering::Relaxed);
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        // Called once while the provider is built, before any export holds a clone.
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

/// A `BatchSpanProcessor` behind an admission check that counts drops.
#[derive(Debug)]
pub(crate) struct BoundedProcessor {
    inner: BatchSpanProcessor,
    capacity: usize,
    counters: Arc<ExportCounters>,
}

impl BoundedProcessor {
    /// `inner` must have been built with a queue of at least `capacity` spans.
    pub(crate) fn new(
        inner: BatchSpanProcessor,
        capacity: usize,
        counters: Arc<ExportCounters>,
    ) -> Self {
        BoundedProcessor {
            inner,
            capacity,
            counters,
        }
    }
}

impl SpanProcessor for BoundedProcessor {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.counters.admit(self.capacity) {
            self.inner.on_end(span);
        } else {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn admission_stops_at_capacity_and_release_makes_room() {
        let c = ExportCounters::default();
        assert!(c.admit(2));
        assert!(c.admit(2));
        assert!(!c.admit(2));
        c.release(1);
        assert!(c.admit(2));
        c.release(10);
        assert_eq!(c.queued.load(Ordering::Relaxed), 0);
    }
}
