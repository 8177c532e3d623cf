//! OpenTelemetry spans for what the mirror forwards, exported over OTLP/HTTP or OTLP/gRPC (protobuf).
//!
//! [`init`] turns the `[tracing]` section into an [`OtelHandle`]: an [`Observer`] for the
//! forwarder plus the flush/shutdown handle. Combine it with the metrics observer through
//! [`Fanout`]. Records are never modified: trace headers are only read, and no span context is
//! ever injected into forwarded records (one batch span's context stamped into every record
//! would merge unrelated traces into one).
//!
//! ## Modes (`tracing.mode`)
//!
//! * **`batch`** (default): one span per forwarded batch, `process <source topic>`, kind
//!   CONSUMER, from the fetch response's arrival (`fetched_at`) to the target's acknowledgement
//!   (`acked_at`): the real time the batch spent inside the mirror. A new root trace, sampled
//!   with probability `tracing.sample_ratio` (trace-id ratio sampler).
//! * **`records`**: the record headers of each forwarded batch are scanned (compressed batches
//!   are decompressed into a scratch copy, capped at [`MAX_SCAN_BYTES`] each and at
//!   [`SCAN_COMPRESSED_BYTES_PER_SECOND`] of compressed input overall) for a producer context
//!   ([`context`]: W3C `traceparent`, Jaeger `uber-trace-id`, B3 `b3`). Each record whose
//!   producer *sampled* its trace gets a `process <source topic>` CONSUMER span parented on the
//!   producer's span, with the batch's real timings, so producer -> mirror -> consumer sit in
//!   one trace (the consumer still sees the producer's unchanged `traceparent`). At most
//!   `tracing.records_per_second` such spans are made per second (a token bucket for the
//!   process, burst of one second; 0 = none); the excess is counted, not traced. Records
//!   without a context or with an unsampled one get no span (`sample_ratio` does not apply).
//! * **`off`**, or no `tracing.otlp_endpoint`: [`init`] returns `None`.
//!
//! ## Attributes (messaging semantic conventions, Development status as of semconv v1.44)
//!
//! `messaging.system` = `kafka`, `messaging.operation.name` = `process`,
//! `messaging.operation.type` = `process`, `messaging.destination.name` (source topic),
//! `messaging.destination.partition.id` (source partition, a string),
//! `messaging.consumer.group.name` (the mirror's group), `messaging.kafka.offset` (the record's
//! source offset; the batch's first source offset on batch spans), `messaging.batch.message_count`
//! (batch spans only), `messaging.kafka.message.tombstone` (records with a null value). Strait's
//! own, outside the `messaging.*` namespace: `strait.flow` (`europe->us`), `strait.source.cluster`,
//! `strait.target.cluster`, `strait.target.topic`, `strait.target.partition`, `strait.path`
//! (`pass_through` / `reencoded` / `merged`), `strait.reencode.reason`, `strait.merge.kind`
//! (`records` / `recompressed`), `strait.batch.compression`,
//! `strait.batch.bytes`, `strait.source.offset.last`, `strait.target.offset` (per record) or
//! `strait.target.offset.base` (per batch; absent when the target reported a duplicate), and
//! `strait.trace_context.format` on record spans. A record's source offset is its batch's first
//! source offset plus its offset delta, exact for pass-through batches; in re-encoded batches
//! compaction gaps are closed, so it can be too low there.
//!
//! ## Cost and back-pressure
//!
//! The observer hook only clones the batch's `Bytes` (records mode) and sends a small job over a
//! bounded channel ([`JOB_QUEUE`] jobs, [`MAX_QUEUED_BYTES`] of batch data) to one worker thread
//! that builds the spans. Finished spans go to a `BatchSpanProcessor` ([`SPAN_QUEUE`] spans,
//! export batches of [`EXPORT_BATCH`], every [`EXPORT_DELAY`]) whose exports run on the mirror's
//! tokio runtime. Nothing on the forwarding path waits: a full queue drops the job or span and
//! counts it ([`OtelStats`]).

pub mod context;
mod env;
mod export;
mod fanout;
mod http_client;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, TraceContextExt as _, TraceFlags, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider, SpanExporter,
};
use strait_forward::RecordBatch;
use strait_forward::observe::{BatchForwarded, Observer, Path};
use strait_wire::TopicPartition;
use tokio::runtime::Handle;

pub use self::context::{Format, UpstreamContext};
use self::export::{BoundedProcessor, ExportCounters, TokioExporter};
pub use self::fanout::Fanout;
use crate::config::{Config, TracingConfig, TracingMode};
use crate::error::{Error, Result};

/// Jobs (forwarded batches) waiting for the span worker.
pub const JOB_QUEUE: usize = 8192;
/// Batch bytes held for header scans (records mode) waiting for the span worker.
pub const MAX_QUEUED_BYTES: usize = 64 << 20;
/// Largest decompressed records section scanned for trace headers; bigger batches are counted
/// in [`OtelStats::batches_scan_failed`] and get no record spans.
pub const MAX_SCAN_BYTES: usize = 16 << 20;
/// Compressed batch bytes decompressed per second for header scans (records mode), so that
/// tracing cannot take a whole core from forwarding; compressed batches beyond it are counted in
/// [`OtelStats::batches_not_scanned`]. Uncompressed batches are walked in place and always scanned.
pub const SCAN_COMPRESSED_BYTES_PER_SECOND: u32 = 32 << 20;
/// Finished spans waiting for export.
pub const SPAN_QUEUE: usize = 4096;
/// Spans per OTLP export request.
pub const EXPORT_BATCH: usize = 512;
/// How often queued spans are exported.
pub const EXPORT_DELAY: Duration = Duration::from_secs(1);
/// Timeout of one OTLP export request.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for the last spans to be exported.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);
/// The instrumentation scope name of every span Strait makes.
pub const SCOPE: &str = "strait";

/// Which clusters a mirror connects, for span attributes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    /// The source cluster's alias.
    pub source_alias: String,
    /// The target cluster's alias.
    pub target_alias: String,
    /// The consumer group the mirror commits source positions in, if any.
    pub group_id: Option<String>,
}

impl Flow {
    /// The flow of a loaded configuration.
    pub fn from_config(config: &Config) -> Flow {
        Flow {
            source_alias: config.source.alias.clone(),
            target_alias: config.target.alias.clone(),
            group_id: Some(config.mirror.group_id.clone()),
        }
    }
}

/// Counters of the tracing pipeline; a snapshot from [`OtelHandle::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OtelStats {
    /// Batch spans started (batch mode; before sampling).
    pub batch_spans: u64,
    /// Record spans started (records mode).
    pub record_spans: u64,
    /// Spans delivered to the OTLP endpoint.
    pub spans_exported: u64,
    /// Spans dropped because the export queue was full.
    pub spans_dropped: u64,
    /// Spans lost in failed exports (endpoint down, HTTP error, timeout).
    pub spans_export_failed: u64,
    /// Spans waiting for export right now.
    pub spans_queued: u64,
    /// Sampled records that got no span because of `records_per_second`.
    pub records_suppressed: u64,
    /// Records whose producer did not sample the trace.
    pub records_unsampled: u64,
    /// Records without any trace context header.
    pub records_without_context: u64,
    /// Records carrying a W3C `traceparent`.
    pub contexts_w3c: u64,
    /// Records carrying a Jaeger `uber-trace-id` (and no valid `traceparent`).
    pub contexts_jaeger: u64,
    /// Records carrying a B3 `b3` header (and neither of the others).
    pub contexts_b3: u64,
    /// Forwarded batches not traced because the span worker was behind.
    pub batches_not_traced: u64,
    /// Batches whose records could not be scanned (too large decompressed, malformed).
    pub batches_scan_failed: u64,
    /// Compressed batches not scanned because of [`SCAN_COMPRESSED_BYTES_PER_SECOND`].
    pub batches_not_scanned: u64,
}

#[derive(Debug, Default)]
struct Counters {
    batch_spans: AtomicU64,
    record_spans: AtomicU64,
    records_suppressed: AtomicU64,
    records_unsampled: AtomicU64,
    records_without_context: AtomicU64,
    contexts: [AtomicU64; 3],
    batches_not_traced: AtomicU64,
    batches_scan_failed: AtomicU64,
    batches_not_scanned: AtomicU64,
    queued_bytes: AtomicUsize,
    export: Arc<ExportCounters>,
}

impl Counters {
    fn snapshot(&self) -> OtelStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        OtelStats {
            batch_spans: get(&self.batch_spans),
            record_spans: get(&self.record_spans),
            spans_exported: get(&self.export.exported),
            spans_dropped: get(&self.export.dropped),
            spans_export_failed: get(&self.export.failed),
            spans_queued: self.export.queued.load(Ordering::Relaxed) as u64,
            records_suppressed: get(&self.records_suppressed),
            records_unsampled: get(&self.records_unsampled),
            records_without_context: get(&self.records_without_context),
            contexts_w3c: get(&self.contexts[0]),
            contexts_jaeger: get(&self.contexts[1]),
            contexts_b3: get(&self.contexts[2]),
            batches_not_traced: get(&self.batches_not_traced),
            batches_scan_failed: get(&self.batches_scan_failed),
            batches_not_scanned: get(&self.batches_not_scanned),
        }
    }
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The running tracing pipeline: the forwarder's [`Observer`] and the export machinery.
///
/// Call [`OtelHandle::shutdown`] when the mirror stops so queued spans are exported.
pub struct OtelHandle {
    observer: Arc<OtelObserver>,
    provider: SdkTracerProvider,
    worker: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for OtelHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtelHandle")
            .field("mode", &self.observer.mode)
            .field("stats", &self.stats())
            .finish()
    }
}

impl OtelHandle {
    /// The observer to give the forwarder (alone or in a [`Fanout`]).
    pub fn observer(&self) -> Arc<dyn Observer> {
        self.observer.clone()
    }

    /// Current counters.
    pub fn stats(&self) -> OtelStats {
        self.counters.snapshot()
    }

    /// Turns the forwarded batches seen so far into spans and exports every queued span.
    ///
    /// Blocks for up to about [`EXPORT_TIMEOUT`]; like [`OtelHandle::shutdown_blocking`] it must
    /// not run on a thread the tokio runtime needs.
    pub fn flush_blocking(&self) -> Result<()> {
        if self.worker.is_some() {
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            if self.observer.jobs.send(Msg::Flush(tx)).is_ok() {
                let _ = rx.recv_timeout(EXPORT_TIMEOUT);
            }
        }
        self.provider
            .force_flush()
            .map_err(|e| Error::Runtime(format!("tracing: exporting queued spans failed: {e}")))
    }

    /// Turns the forwarded batches seen so far into spans and exports every queued span, then
    /// stops. Events reported after this are counted in [`OtelStats::batches_not_traced`].
    ///
    /// Blocks for up to about [`SHUTDOWN_TIMEOUT`]; the exports need the tokio runtime that
    /// [`init`] ran on to be alive and not blocked by this call, so from async code use
    /// [`OtelHandle::shutdown`].
    pub fn shutdown_blocking(mut self) -> Result<OtelStats> {
        if let Some(worker) = self.worker.take() {
            // The worker drains the jobs queued before Stop, then exits.
            let _ = self.observer.jobs.send(Msg::Stop);
            let _ = worker.join();
        }
        let flushed = self.provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT);
        let stats = self.stats();
        flushed.map_err(|e| {
            Error::Runtime(format!(
                "tracing: exporting the last spans failed ({e}); {} span(s) exported, {} lost in failed exports",
                stats.spans_exported, stats.spans_export_failed
            ))
        })?;
        Ok(stats)
    }

    /// [`OtelHandle::shutdown_blocking`] on a blocking thread.
    pub async fn shutdown(self) -> Result<OtelStats> {
        tokio::task::spawn_blocking(move || self.shutdown_blocking())
            .await
            .map_err(|e| Error::Runtime(format!("tracing: the shutdown task failed: {e}")))?
    }
}

impl Drop for OtelHandle {
    fn drop(&mut self) {
        // Without `shutdown`: stop the worker without waiting for it; the provider flushes
        // what it holds when its last reference goes.
        if self.worker.take().is_some() {
            let _ = self.observer.jobs.try_send(Msg::Stop);
        }
    }
}

/// Starts tracing for `cfg`, or returns `None` when `tracing.mode = "off"` or no
/// `tracing.otlp_endpoint` is set. Must be called inside the tokio runtime that keeps running
/// while the mirror does (exports run on it).
///
/// The endpoint is the OTLP/HTTP base URL (`http://127.0.0.1:4318`); `/v1/traces` is appended
/// unless the URL already ends with it. With `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL=grpc` it is
/// the OTLP/gRPC receiver's (`http://127.0.0.1:4317`, `https://` for TLS). `https://` is verified with the CA of
/// `OTEL_EXPORTER_OTLP_CERTIFICATE`, else `SSL_CERT_FILE`, the system bundle or the built-in
/// roots (`strait-wire`'s client, which also honours `HTTPS_PROXY` / `NO_PROXY`).
pub fn init(cfg: &TracingConfig, flow: &Flow) -> Result<Option<OtelHandle>> {
    init_with(cfg, flow, |name| std::env::var(name).ok())
}

/// [`init`] with the `OTEL_*` variables from `env` (tests inject them).
fn init_with(
    cfg: &TracingConfig,
    flow: &Flow,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<OtelHandle>> {
    let Some(endpoint) = cfg.otlp_endpoint.as_deref() else {
        return Ok(None);
    };
    if cfg.mode == TracingMode::Off {
        return Ok(None);
    }
    let invalid = |why: String| Error::Invalid {
        key: "tracing.otlp_endpoint".into(),
        expected: "the http:// or https:// URL of an OTLP receiver, e.g. \
                   \"http://127.0.0.1:4318\" (OTLP/HTTP; OTLP/gRPC listens on 4317)"
            .into(),
        got: format!("{endpoint:?} ({why})"),
    };
    let runtime = Handle::try_current().map_err(|_| {
        Error::Runtime("tracing: otel::init was called outside the tokio runtime".into())
    })?;
    // OTEL_EXPORTER_OTLP_{HEADERS,TIMEOUT,PROTOCOL,CERTIFICATE} (env.rs); the exporter reads the
    // headers from the process environment itself.
    let standard = env::check(env, EXPORT_TIMEOUT)?;
    let mut tls = strait_wire::config::TlsSettings::default();
    if let Some((var, path)) = standard.ca {
        tls.ca = Some(strait_wire::config::PemSetting {
            source: strait_wire::config::PemSource::File(path),
            key: if var.contains("TRACES") {
                "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"
            } else {
                "OTEL_EXPORTER_OTLP_CERTIFICATE"
            },
        });
    }
    // strait-wire's client: https (rustls) and HTTPS_PROXY / NO_PROXY (http_client.rs).
    // OTLP/gRPC: the same protobuf request as a gRPC call (http_client.rs); its path is the
    // gRPC method's, so the endpoint is used as given.
    let client = http_client::WireHttp {
        tls,
        timeout: standard.timeout,
        grpc: standard.grpc,
    };
    let url = if standard.grpc {
        endpoint.to_owned()
    } else {
        traces_url(endpoint)
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(standard.timeout)
        .build()
        .map_err(|e| invalid(e.to_string()))?;
    Ok(Some(start(cfg, flow, exporter, runtime)))
}

/// [`init`] with the `[tracing]` section and flow of a loaded configuration.
pub fn init_from_config(config: &Config) -> Result<Option<OtelHandle>> {
    init(&config.tracing, &Flow::from_config(config))
}

/// `<base>/v1/traces`, per the OTLP exporter specification's rule for a base endpoint.
fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_string()
    } else {
        format!("{base}/v1/traces")
    }
}

/// Builds the provider around `exporter` and starts the span worker.
fn start<E: SpanExporter + 'static>(
    cfg: &TracingConfig,
    flow: &Flow,
    exporter: E,
    runtime: Handle,
) -> OtelHandle {
    let counters = Arc::new(Counters::default());
    let exporter = TokioExporter::new(exporter, runtime, counters.export.clone());
    let batch = BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(SPAN_QUEUE)
                .with_max_export_batch_size(EXPORT_BATCH)
                .with_scheduled_delay(EXPORT_DELAY)
                .build(),
        )
        .build();
    let started_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(BoundedProcessor::new(
            batch,
            SPAN_QUEUE,
            counters.export.clone(),
        ))
        // Root (batch) spans by trace-id ratio; spans under a producer's context follow the
        // producer's decision (records mode only creates them for sampled contexts).
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            cfg.sample_ratio,
        ))))
        .with_resource(
            Resource::builder()
                .with_service_name(cfg.service_name.clone())
                .with_attributes([
                    KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
                    KeyValue::new(
                        "service.instance.id",
                        format!("strait-{}-{started_ms}", std::process::id()),
                    ),
                ])
                .build(),
        )
        .build();
    let tracer = provider.tracer_with_scope(
        InstrumentationScope::builder(SCOPE)
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    );
    let (jobs, rx) = std::sync::mpsc::sync_channel(JOB_QUEUE);
    let observer = Arc::new(OtelObserver {
        mode: cfg.mode,
        jobs,
        counters: counters.clone(),
    });
    let emitter = Emitter {
        tracer,
        mode: cfg.mode,
        flow: format!("{}->{}", flow.source_alias, flow.target_alias),
        flow_info: flow.clone(),
        bucket: TokenBucket::new(cfg.records_per_second, Instant::now()),
        scan_budget: TokenBucket::new(SCAN_COMPRESSED_BYTES_PER_SECOND, Instant::now()),
        counters: counters.clone(),
    };
    let worker = std::thread::Builder::new()
        .name("strait-otel".into())
        .spawn(move || emitter.run(rx))
        .ok();
    if worker.is_none() {
        // No thread: every event will be counted as not traced.
        tracing::warn!("tracing: cannot start the span worker thread; no spans will be made");
    }
    OtelHandle {
        observer,
        provider,
        worker,
        counters,
    }
}

/// One forwarded batch, owned, for the worker.
struct Job {
    source: TopicPartition,
    target: TopicPartition,
    source_base_offset: i64,
    source_last_offset: i64,
    records: u32,
    bytes: u64,
    path: Path,
    compression: &'static str,
    fetched_at: SystemTime,
    acked_at: SystemTime,
    target_base_offset: i64,
    /// The produced batch, kept only for header scans (records mode).
    batch: Option<Bytes>,
}

enum Msg {
    Forwarded(Box<Job>),
    /// Answer once every job queued before this one has been turned into spans.
    Flush(SyncSender<()>),
    Stop,
}

struct OtelObserver {
    mode: TracingMode,
    jobs: SyncSender<Msg>,
    counters: Arc<Counters>,
}

fn static_codec(c: &str) -> &'static str {
    match c {
        "none" => "none",
        "gzip" => "gzip",
        "snappy" => "snappy",
        "lz4" => "lz4",
        "zstd" => "zstd",
        _ => "other",
    }
}

impl OtelObserver {
    /// Queues `job` for the worker, or counts it as not traced when the worker is behind.
    fn submit(&self, job: Job) {
        if let Some(b) = &job.batch {
            let len = b.len();
            let reserved =
                self.counters
                    .queued_bytes
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                        (q + len <= MAX_QUEUED_BYTES).then_some(q + len)
                    });
            if reserved.is_err() {
                bump(&self.counters.batches_not_traced);
                return;
            }
        }
        if let Err(e) = self.jobs.try_send(Msg::Forwarded(Box::new(job))) {
            if let TrySendError::Full(Msg::Forwarded(job))
            | TrySendError::Disconnected(Msg::Forwarded(job)) = e
            {
                release_bytes(&self.counters, &job);
            }
            bump(&self.counters.batches_not_traced);
        }
    }
}

impl Observer for OtelObserver {
    fn batch_forwarded(&self, ev: &BatchForwarded<'_>) {
        self.submit(Job {
            source: ev.source.clone(),
            target: ev.target.clone(),
            source_base_offset: ev.source_base_offset,
            source_last_offset: ev.source_last_offset,
            records: ev.records,
            bytes: ev.bytes,
            path: ev.path,
            compression: static_codec(ev.compression),
            fetched_at: ev.fetched_at,
            acked_at: ev.acked_at,
            target_base_offset: ev.target_base_offset,
            // Bytes is reference-counted: this keeps the batch alive, it does not copy it.
            batch: (self.mode == TracingMode::Records).then(|| ev.batch.clone()),
        });
    }
}

fn release_bytes(counters: &Counters, job: &Job) {
    if let Some(b) = &job.batch {
        counters.queued_bytes.fetch_sub(b.len(), Ordering::AcqRel);
    }
}

/// A per-process rate cap: `rate` tokens per second, at most one second's worth banked.
#[derive(Debug)]
struct TokenBucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(per_second: u32, now: Instant) -> TokenBucket {
        TokenBucket {
            rate: f64::from(per_second),
            tokens: f64::from(per_second),
            last: now,
        }
    }

    fn take(&mut self, now: Instant) -> bool {
        self.take_n(1.0, now)
    }

    /// Takes `n` tokens if there are; a request above the burst size needs a full bucket.
    fn take_n(&mut self, n: f64, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        let n = n.min(self.rate);
        if n > 0.0 && self.tokens >= n {
            self.tokens -= n;
            true
        } else {
            false
        }
    }
}

/// The worker: turns jobs into spans.
struct Emitter {
    tracer: SdkTracer,
    mode: TracingMode,
    flow: String,
    flow_info: Flow,
    bucket: TokenBucket,
    scan_budget: TokenBucket,
    counters: Arc<Counters>,
}

impl Emitter {
    fn run(mut self, rx: Receiver<Msg>) {
        loop {
            match rx.recv() {
                Ok(Msg::Forwarded(job)) => {
                    release_bytes(&self.counters, &job);
                    match self.mode {
                        TracingMode::Batch => self.batch_span(&job),
                        TracingMode::Records => self.record_spans(&job),
                        TracingMode::Off => {}
                    }
                }
                Ok(Msg::Flush(done)) => {
                    let _ = done.send(());
                }
                Ok(Msg::Stop) | Err(_) => return,
            }
        }
    }

    /// Attributes every span of `job` carries.
    fn common(&self, job: &Job) -> Vec<KeyValue> {
        let mut a = vec![
            KeyValue::new("messaging.system", "kafka"),
            KeyValue::new("messaging.operation.name", "process"),
            KeyValue::new("messaging.operation.type", "process"),
            KeyValue::new("messaging.destination.name", job.source.topic().to_string()),
            KeyValue::new(
                "messaging.destination.partition.id",
                job.source.partition().to_string(),
            ),
            KeyValue::new("strait.flow", self.flow.clone()),
            KeyValue::new("strait.source.cluster", self.flow_info.source_alias.clone()),
            KeyValue::new("strait.target.cluster", self.flow_info.target_alias.clone()),
            KeyValue::new("strait.target.topic", job.target.topic().to_string()),
            KeyValue::new("strait.target.partition", i64::from(job.target.partition())),
            KeyValue::new("strait.path", job.path.as_str()),
            KeyValue::new("strait.batch.compression", job.compression),
            KeyValue::new("strait.batch.bytes", job.bytes as i64),
        ];
        if let Path::Reencoded(reason) = job.path {
            a.push(KeyValue::new("strait.reencode.reason", reason.as_str()));
        }
        if let Path::Merged(kind) = job.path {
            a.push(KeyValue::new("strait.merge.kind", kind.as_str()));
        }
        if let Some(group) = &self.flow_info.group_id {
            a.push(KeyValue::new(
                "messaging.consumer.group.name",
                group.clone(),
            ));
        }
        a
    }

    fn batch_span(&self, job: &Job) {
        bump(&self.counters.batch_spans);
        let mut attributes = self.common(job);
        attributes.extend([
            KeyValue::new("messaging.batch.message_count", i64::from(job.records)),
            KeyValue::new("messaging.kafka.offset", job.source_base_offset),
            KeyValue::new("strait.source.offset.last", job.source_last_offset),
        ]);
        if job.target_base_offset >= 0 {
            attributes.push(KeyValue::new(
                "strait.target.offset.base",
                job.target_base_offset,
            ));
        }
        // A root span: an empty parent context, never the thread's current one.
        self.emit(job, attributes, &Context::new());
    }

    fn record_spans(&mut self, job: &Job) {
        let Some(bytes) = &job.batch else { return };
        let batch = match RecordBatch::parse(bytes.clone()) {
            Ok(b) if !b.is_control() => b,
            Ok(_) => return,
            Err(_) => {
                bump(&self.counters.batches_scan_failed);
                return;
            }
        };
        if batch.compression() != strait_forward::Compression::None
            && !self.scan_budget.take_n(bytes.len() as f64, Instant::now())
        {
            bump(&self.counters.batches_not_scanned);
            return;
        }
        let decoded = match batch.decode_records(MAX_SCAN_BYTES) {
            Ok(d) => d,
            Err(_) => {
                bump(&self.counters.batches_scan_failed);
                return;
            }
        };
        let mut common: Option<Vec<KeyValue>> = None;
        for record in decoded.iter() {
            let Ok(record) = record else {
                bump(&self.counters.batches_scan_failed);
                return;
            };
            let Some(upstream) = context::extract(record.headers()) else {
                bump(&self.counters.records_without_context);
                continue;
            };
            let slot = match upstream.format {
                Format::W3c => 0,
                Format::Jaeger => 1,
                Format::B3 => 2,
            };
            bump(&self.counters.contexts[slot]);
            if !upstream.sampled {
                bump(&self.counters.records_unsampled);
                continue;
            }
            if !self.bucket.take(Instant::now()) {
                bump(&self.counters.records_suppressed);
                continue;
            }
            bump(&self.counters.record_spans);
            let delta = i64::from(record.offset_delta());
            let mut attributes = common.get_or_insert_with(|| self.common(job)).clone();
            attributes.extend([
                KeyValue::new("messaging.kafka.offset", job.source_base_offset + delta),
                KeyValue::new("strait.trace_context.format", upstream.format.as_str()),
            ]);
            if job.target_base_offset >= 0 {
                attributes.push(KeyValue::new(
                    "strait.target.offset",
                    job.target_base_offset + delta,
                ));
            }
            if record.value().is_none() {
                attributes.push(KeyValue::new("messaging.kafka.message.tombstone", true));
            }
            let parent = Context::new().with_remote_span_context(SpanContext::new(
                upstream.trace_id,
                upstream.span_id,
                TraceFlags::SAMPLED,
                true,
                upstream.trace_state,
            ));
            self.emit(job, attributes, &parent);
        }
    }

    fn emit(&self, job: &Job, attributes: Vec<KeyValue>, parent: &Context) {
        let mut span = self
            .tracer
            .span_builder(format!("process {}", job.source.topic()))
            .with_kind(SpanKind::Consumer)
            .with_start_time(job.fetched_at)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, parent);
        span.end_with_timestamp(job.acked_at);
    }
}

#[cfg(test)]
mod tests;
