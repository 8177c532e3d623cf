//! A real Jaeger v2 all-in-one (OTLP in, in-memory storage, query API out) for the tests and the
//! demo: finding or building the binary ([`binary`]), running it on free loopback ports
//! ([`JaegerProcess`], killed on drop), and reading traces back through the query API
//! ([`Query`]), as [`SpanRecord`]s, so that [`crate::hops`] analyses them exactly like spans the
//! in-process [`crate::Sink`] received.
//!
//! The API read is Jaeger's `/api/traces?service=S` and `/api/services` (the JSON the Jaeger UI
//! uses), served by `github.com/jaegertracing/jaeger/cmd/jaeger` v1.75.0 (= Jaeger v2), which
//! `scripts/install-jaeger.sh` builds. That module carries no UI assets; the query API is what it
//! serves. (Jaeger removed the `/api/traces` search after v2.20, in favour of `/api/v3/traces`; a
//! version bump past that needs this module to move to v3.)
//!
//! The JSON model: a trace is `{traceID, spans: [...], processes: {id: {serviceName, tags}}}`; a
//! span has `operationName`, `references` (`CHILD_OF` = the OTLP parent, `FOLLOWS_FROM` = an OTLP
//! link), `startTime` and `duration` in microseconds, and `tags` that carry the OTLP attributes
//! plus `span.kind` and `otel.scope.name`.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Empty};
use hyper::Request;
use hyper::header::HOST;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::net::TcpStream;

use crate::error::{Error, Result};
use crate::span::{AttrValue, LinkRecord, SpanId, SpanKind, SpanRecord, TraceId};

/// The Jaeger configuration the tests and the demo run (ports from `STRAIT_JAEGER_*` variables).
pub const CONFIG_YAML: &str = include_str!("../jaeger.yaml");

/// The variable that names a Jaeger v2 binary to use instead of the one
/// `scripts/install-jaeger.sh` builds.
pub const BINARY_ENV: &str = "STRAIT_JAEGER";

/// How long one query may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(20);

/// The Jaeger binary: `$STRAIT_JAEGER` if set, else what `scripts/install-jaeger.sh` prints
/// (it returns at once when the binary is cached, and builds it from the Go module proxy the
/// first time, which takes minutes).
pub fn binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os(BINARY_ENV).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(Error::JaegerBinary {
                detail: format!("{BINARY_ENV}={} is not a file", path.display()),
            })
        };
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-jaeger.sh");
    let out = Command::new("bash")
        .arg(&script)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| Error::JaegerBinary {
            detail: format!("running {}: {e}", script.display()),
        })?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().last().map(str::trim) {
        Some(path) if out.status.success() && Path::new(path).is_file() => Ok(PathBuf::from(path)),
        _ => Err(Error::JaegerBinary {
            detail: format!(
                "{} exited with {} (its messages are above)",
                script.display(),
                out.status
            ),
        }),
    }
}

/// Ports that were free a moment ago (bound together, so distinct, then released).
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let bind_err = |source| Error::Bind {
        addr: "127.0.0.1:0".into(),
        source,
    };
    let held = (0..n)
        .map(|_| TcpListener::bind(("127.0.0.1", 0)).map_err(bind_err))
        .collect::<Result<Vec<_>>>()?;
    held.iter()
        .map(|l| l.local_addr().map(|a| a.port()).map_err(bind_err))
        .collect()
}

/// A running Jaeger v2 all-in-one on loopback, with [`CONFIG_YAML`] and free ports. Dropping it
/// kills the process.
#[derive(Debug)]
pub struct JaegerProcess {
    child: Option<Child>,
    pid: u32,
    otlp_http: SocketAddr,
    otlp_grpc: SocketAddr,
    query: SocketAddr,
    log: PathBuf,
}

impl JaegerProcess {
    /// Starts `binary` with its configuration and log in `dir`, and waits (up to 2 minutes: the
    /// machine may be loaded) until both the OTLP/HTTP receiver and the query API accept
    /// connections. A start that fails because another process took a chosen port meanwhile is
    /// retried with new ports.
    pub async fn start(binary: &Path, dir: &Path) -> Result<JaegerProcess> {
        let config = dir.join("jaeger.yaml");
        std::fs::write(&config, CONFIG_YAML).map_err(|e| Error::JaegerStart {
            detail: format!("writing {}: {e}", config.display()),
            log: config.clone(),
        })?;
        let mut last = None;
        for attempt in 1..=3 {
            let log = dir.join(format!("jaeger.{attempt}.log"));
            match JaegerProcess::start_once(binary, &config, &log).await {
                Ok(j) => return Ok(j),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or(Error::JaegerStart {
            detail: "no attempt made".into(),
            log: dir.to_path_buf(),
        }))
    }

    async fn start_once(binary: &Path, config: &Path, log: &Path) -> Result<JaegerProcess> {
        let failed = |detail: String| Error::JaegerStart {
            detail,
            log: log.to_path_buf(),
        };
        let ports = free_ports(4)?;
        let addr = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
        let out = std::fs::File::create(log)
            .map_err(|e| failed(format!("creating {}: {e}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(|e| failed(format!("opening {}: {e}", log.display())))?;
        let child = Command::new(binary)
            .arg("--config")
            .arg(config)
            .env("STRAIT_JAEGER_HOST", "127.0.0.1")
            .env("STRAIT_JAEGER_OTLP_HTTP_PORT", ports[0].to_string())
            .env("STRAIT_JAEGER_OTLP_GRPC_PORT", ports[1].to_string())
            .env("STRAIT_JAEGER_QUERY_PORT", ports[2].to_string())
            .env("STRAIT_JAEGER_QUERY_GRPC_PORT", ports[3].to_string())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| failed(format!("starting {}: {e}", binary.display())))?;
        let mut jaeger = JaegerProcess {
            pid: child.id(),
            child: Some(child),
            otlp_http: addr(ports[0]),
            otlp_grpc: addr(ports[1]),
            query: addr(ports[2]),
            log: log.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        let query = jaeger.query();
        loop {
            if let Some(status) = jaeger
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                jaeger.child = None;
                return Err(failed(format!("jaeger exited at start with {status}")));
            }
            let receiving = TcpStream::connect(jaeger.otlp_http).await.is_ok();
            if receiving && query.services().await.is_ok() {
                return Ok(jaeger);
            }
            if Instant::now() > deadline {
                return Err(failed(
                    "OTLP receiver or query API not answering after 120 s".into(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The process id (for a process registry).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The OTLP/HTTP base URL for exporters (`/v1/traces` is appended by them).
    pub fn otlp_endpoint(&self) -> String {
        format!("http://{}", self.otlp_http)
    }

    /// The OTLP/gRPC address.
    pub fn otlp_grpc(&self) -> SocketAddr {
        self.otlp_grpc
    }

    /// The query API's base URL (`http://127.0.0.1:<port>`).
    pub fn query_url(&self) -> String {
        format!("http://{}", self.query)
    }

    /// A client of the query API.
    pub fn query(&self) -> Query {
        Query {
            authority: self.query.to_string(),
        }
    }

    /// Jaeger's log.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Kills the process and reaps it; idempotent.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for JaegerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A client of Jaeger's query API (plain HTTP/1.1, one connection per request).
#[derive(Debug, Clone)]
pub struct Query {
    authority: String,
}

impl Query {
    /// A client for `url`: `http://HOST:PORT` (or `HOST:PORT`), e.g. `http://127.0.0.1:16686`.
    pub fn new(url: &str) -> Result<Query> {
        let authority = url
            .trim()
            .trim_start_matches("http://")
            .trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') || authority.starts_with("https:") {
            return Err(Error::Address {
                addr: url.to_string(),
            });
        }
        Ok(Query {
            authority: authority.to_string(),
        })
    }

    /// The base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.authority)
    }

    async fn get(&self, path: &str) -> Result<Bytes> {
        let url = format!("http://{}{path}", self.authority);
        let fail = |detail: String| Error::Query {
            url: url.clone(),
            detail,
        };
        let request = async {
            let stream = TcpStream::connect(&self.authority)
                .await
                .map_err(|e| fail(format!("connecting: {e}")))?;
            let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                .await
                .map_err(|e| fail(e.to_string()))?;
            let conn = tokio::spawn(conn);
            let req = Request::get(path)
                .header(HOST, self.authority.as_str())
                .body(Empty::<Bytes>::new())
                .map_err(|e| fail(e.to_string()))?;
            let resp = sender
                .send_request(req)
                .await
                .map_err(|e| fail(e.to_string()))?;
            let status = resp.status();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| fail(format!("reading the answer: {e}")))?
                .to_bytes();
            conn.abort();
            if !status.is_success() {
                return Err(fail(format!(
                    "HTTP {status}: {}",
                    String::from_utf8_lossy(&body[..body.len().min(300)])
                )));
            }
            Ok(body)
        };
        tokio::time::timeout(QUERY_TIMEOUT, request)
            .await
            .map_err(|_| fail(format!("no answer within {QUERY_TIMEOUT:?}")))?
    }

    /// The services Jaeger has spans of (`/api/services`).
    pub async fn services(&self) -> Result<Vec<String>> {
        let path = "/api/services";
        let body = self.get(path).await?;
        let resp: ApiResponse<Vec<String>> =
            serde_json::from_slice(&body).map_err(|e| Error::QueryAnswer {
                url: format!("{}{path}", self.url()),
                detail: e.to_string(),
            })?;
        Ok(resp.data.unwrap_or_default())
    }

    /// Every span of the (at most `limit`) most recent traces that have a span of `service`
    /// (`/api/traces?service=S&limit=N`); spans of all services in those traces are included.
    pub async fn traces(&self, service: &str, limit: usize) -> Result<Vec<SpanRecord>> {
        let path = format!("/api/traces?service={}&limit={limit}", encode(service));
        let body = self.get(&path).await?;
        parse_traces(&body).map_err(|detail| Error::QueryAnswer {
            url: format!("{}{path}", self.url()),
            detail,
        })
    }

    /// Polls [`Query::traces`] until `done` holds for the spans or `timeout` passes.
    pub async fn wait_for_traces(
        &self,
        service: &str,
        limit: usize,
        done: impl Fn(&[SpanRecord]) -> bool,
        timeout: Duration,
    ) -> Result<Vec<SpanRecord>> {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.traces(service, limit).await?;
            if done(&spans) {
                return Ok(spans);
            }
            if Instant::now() > deadline {
                return Err(Error::QueryTimeout {
                    url: self.url(),
                    service: service.to_string(),
                    waited: timeout,
                    spans: spans.len(),
                });
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}

/// Percent-encodes a query parameter value (unreserved characters pass).
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[derive(Debug, Deserialize)]
struct ApiResponse<T> {
    data: Option<T>,
    #[serde(default)]
    errors: Option<Vec<ApiError>>,
}

#[derive(Debug, Deserialize)]
struct ApiError {
    #[serde(default)]
    msg: String,
}

#[derive(Debug, Deserialize)]
struct JTrace {
    #[serde(default)]
    spans: Option<Vec<JSpan>>,
    #[serde(default)]
    processes: Option<HashMap<String, JProcess>>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JSpan {
    #[serde(rename = "traceID")]
    trace_id: String,
    #[serde(rename = "spanID")]
    span_id: String,
    operation_name: String,
    #[serde(default)]
    references: Option<Vec<JReference>>,
    /// Microseconds since the epoch.
    start_time: u64,
    /// Microseconds.
    duration: u64,
    #[serde(default)]
    tags: Option<Vec<JTag>>,
    #[serde(rename = "processID", default)]
    process_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JReference {
    ref_type: String,
    #[serde(rename = "traceID")]
    trace_id: String,
    #[serde(rename = "spanID")]
    span_id: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JProcess {
    service_name: String,
    #[serde(default)]
    tags: Option<Vec<JTag>>,
}

#[derive(Debug, Deserialize)]
struct JTag {
    key: String,
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    value: serde_json::Value,
}

/// Jaeger prints ids without leading zeros in some versions; OTLP ids are fixed width.
fn padded(id: &str, width: usize) -> String {
    format!("{id:0>width$}")
}

fn tag_value(t: &JTag) -> AttrValue {
    use serde_json::Value;
    match (t.kind.as_str(), &t.value) {
        ("int64", Value::Number(n)) => n
            .as_i64()
            .map(AttrValue::Int)
            .unwrap_or_else(|| AttrValue::String(n.to_string())),
        ("float64", Value::Number(n)) => n
            .as_f64()
            .map(AttrValue::Double)
            .unwrap_or(AttrValue::Empty),
        (_, Value::Bool(b)) => AttrValue::Bool(*b),
        (_, Value::String(s)) => AttrValue::String(s.clone()),
        (_, Value::Number(n)) => n
            .as_i64()
            .map(AttrValue::Int)
            .or_else(|| n.as_f64().map(AttrValue::Double))
            .unwrap_or(AttrValue::Empty),
        (_, Value::Null) => AttrValue::Empty,
        (_, other) => AttrValue::String(other.to_string()),
    }
}

fn tags(list: &Option<Vec<JTag>>) -> BTreeMap<String, AttrValue> {
    list.iter()
        .flatten()
        .map(|t| (t.key.clone(), tag_value(t)))
        .collect()
}

fn kind_of(tag: Option<&AttrValue>) -> SpanKind {
    match tag.and_then(AttrValue::as_str) {
        Some("producer") => SpanKind::Producer,
        Some("consumer") => SpanKind::Consumer,
        Some("client") => SpanKind::Client,
        Some("server") => SpanKind::Server,
        Some("internal") => SpanKind::Internal,
        _ => SpanKind::Unspecified,
    }
}

fn micros(us: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_micros(us)
}

/// The spans of a `/api/traces` answer (or of `/api/traces/<id>`). The error is a description.
pub fn parse_traces(body: &[u8]) -> std::result::Result<Vec<SpanRecord>, String> {
    let resp: ApiResponse<Vec<JTrace>> = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if let Some(errors) = resp.errors.filter(|e| !e.is_empty()) {
        let msgs: Vec<_> = errors.into_iter().map(|e| e.msg).collect();
        return Err(format!("Jaeger reported: {}", msgs.join("; ")));
    }
    let mut out = Vec::new();
    for trace in resp.data.unwrap_or_default() {
        let processes = trace.processes.unwrap_or_default();
        for s in trace.spans.unwrap_or_default() {
            let trace_id = TraceId::from_hex(&padded(&s.trace_id, 32))
                .ok_or_else(|| format!("span {}: bad traceID {:?}", s.span_id, s.trace_id))?;
            let span_id = SpanId::from_hex(&padded(&s.span_id, 16))
                .ok_or_else(|| format!("bad spanID {:?}", s.span_id))?;
            let mut parent_span_id = None;
            let mut links = Vec::new();
            for r in s.references.iter().flatten() {
                let (Some(t), Some(id)) = (
                    TraceId::from_hex(&padded(&r.trace_id, 32)),
                    SpanId::from_hex(&padded(&r.span_id, 16)),
                ) else {
                    return Err(format!("span {}: bad reference {r:?}", s.span_id));
                };
                // The OTLP parent becomes the first CHILD_OF reference; links become
                // FOLLOWS_FROM (whose attributes Jaeger's model cannot hold).
                if r.ref_type == "CHILD_OF" && parent_span_id.is_none() && t == trace_id {
                    parent_span_id = Some(id);
                } else {
                    links.push(LinkRecord {
                        trace_id: t,
                        span_id: id,
                        attributes: BTreeMap::new(),
                    });
                }
            }
            let attributes = tags(&s.tags);
            let process = processes.get(&s.process_id);
            let service_name = process.map(|p| p.service_name.clone()).unwrap_or_default();
            let mut resource = process.map(|p| tags(&p.tags)).unwrap_or_default();
            resource.insert(
                "service.name".into(),
                AttrValue::String(service_name.clone()),
            );
            let start = micros(s.start_time);
            out.push(SpanRecord {
                trace_id,
                span_id,
                parent_span_id,
                name: s.operation_name,
                kind: kind_of(attributes.get("span.kind")),
                service_name,
                scope: attributes
                    .get("otel.scope.name")
                    .or_else(|| attributes.get("otel.library.name"))
                    .and_then(AttrValue::as_str)
                    .unwrap_or_default()
                    .to_string(),
                start,
                end: start + Duration::from_micros(s.duration),
                attributes,
                links,
                resource,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::hops::{Hop, Role, analyse, role};

    /// The shape of a `/api/traces` answer of Jaeger v1.75.0 (the binary the tests run), cut to
    /// one trace of the reference scenario: producer, mirror, consumer.
    const ANSWER: &str = r#"{"data":[{"traceID":"0af7651916cd43dd8448eb211c80319c","spans":[
      {"traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"b7ad6b7169203331","operationName":"send my-topic",
       "references":[],"startTime":1700000000000000,"duration":3000,
       "tags":[{"key":"messaging.destination.name","type":"string","value":"my-topic"},
               {"key":"messaging.kafka.offset","type":"int64","value":7},
               {"key":"otel.scope.name","type":"string","value":"strait-demo"},
               {"key":"span.kind","type":"string","value":"producer"}],
       "logs":[],"processID":"p1","warnings":null},
      {"traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"00f067aa0ba902b7","operationName":"process my-topic",
       "references":[{"refType":"CHILD_OF","traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"b7ad6b7169203331"}],
       "startTime":1700000000005000,"duration":10000,
       "tags":[{"key":"strait.flow","type":"string","value":"europe->us"},
               {"key":"otel.scope.name","type":"string","value":"strait"},
               {"key":"span.kind","type":"string","value":"consumer"}],
       "logs":[],"processID":"p2","warnings":null},
      {"traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"53995c3f42cd8ad8","operationName":"process my-topic",
       "references":[{"refType":"CHILD_OF","traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"b7ad6b7169203331"},
                     {"refType":"FOLLOWS_FROM","traceID":"0af7651916cd43dd8448eb211c80319c","spanID":"00f067aa0ba902b7"}],
       "startTime":1700000000020000,"duration":500,
       "tags":[{"key":"span.kind","type":"string","value":"consumer"},
               {"key":"otel.status_code","type":"string","value":"OK"},
               {"key":"error","type":"bool","value":false}],
       "logs":[],"processID":"p3","warnings":null}],
     "processes":{"p1":{"serviceName":"hello-world-producer","tags":[{"key":"service.version","type":"string","value":"0.1.0"}]},
                  "p2":{"serviceName":"my-mirror-maker","tags":[]},
                  "p3":{"serviceName":"hello-world-consumer","tags":null}},
     "warnings":null}],"total":0,"limit":0,"offset":0,"errors":null}"#;

    #[test]
    fn a_jaeger_answer_becomes_span_records_with_parents_links_and_hops() {
        let spans = parse_traces(ANSWER.as_bytes()).unwrap();
        assert_eq!(spans.len(), 3);
        let (producer, mirror, consumer) = (&spans[0], &spans[1], &spans[2]);
        assert_eq!(producer.service_name, "hello-world-producer");
        assert_eq!(producer.kind, SpanKind::Producer);
        assert_eq!(producer.parent_span_id, None);
        assert_eq!(
            producer.attr_str("messaging.destination.name"),
            Some("my-topic")
        );
        assert_eq!(
            producer
                .attr("messaging.kafka.offset")
                .and_then(AttrValue::as_i64),
            Some(7)
        );
        assert_eq!(
            producer
                .resource
                .get("service.version")
                .and_then(AttrValue::as_str),
            Some("0.1.0")
        );
        assert_eq!(mirror.scope, "strait");
        assert_eq!(role(mirror), Some(Role::Mirror));
        assert_eq!(mirror.parent_span_id, Some(producer.span_id));
        assert_eq!(consumer.parent_span_id, Some(producer.span_id));
        assert_eq!(consumer.links.len(), 1);
        assert_eq!(consumer.links[0].span_id, mirror.span_id);
        assert_eq!(consumer.attr("error"), Some(&AttrValue::Bool(false)));
        assert_eq!(mirror.duration(), Duration::from_millis(10));

        let hops = analyse(&spans);
        assert_eq!(hops.len(), 1);
        let h = &hops[0];
        assert_eq!(h.get(Hop::ProducerSend), 3.0);
        assert_eq!(h.get(Hop::SourceToMirror), 2.0);
        assert_eq!(h.get(Hop::MirrorResidence), 10.0);
        assert_eq!(h.get(Hop::MirrorToConsumer), 5.0);
        assert_eq!(h.get(Hop::EndToEnd), 20.0);
    }

    #[test]
    fn short_ids_are_padded_and_errors_are_reported() {
        let short = r#"{"data":[{"traceID":"1c","spans":[{"traceID":"1c","spanID":"2b",
            "operationName":"x","references":null,"startTime":1,"duration":0,"tags":null,
            "processID":"p1"}],"processes":{}}]}"#;
        let spans = parse_traces(short.as_bytes()).unwrap();
        assert_eq!(spans[0].trace_id.to_string(), format!("{:0>32}", "1c"));
        assert_eq!(spans[0].span_id.to_string(), "000000000000002b");
        assert_eq!(spans[0].kind, SpanKind::Unspecified);
        let err = parse_traces(br#"{"data":null,"errors":[{"code":400,"msg":"bad service"}]}"#)
            .unwrap_err();
        assert!(err.contains("bad service"), "{err}");
        assert!(parse_traces(b"<html>").is_err());
        assert_eq!(parse_traces(br#"{"data":[]}"#).unwrap(), vec![]);
    }

    #[test]
    fn query_urls_and_parameters() {
        assert_eq!(
            Query::new("http://127.0.0.1:16686/").unwrap().url(),
            "http://127.0.0.1:16686"
        );
        assert_eq!(
            Query::new("localhost:1").unwrap().url(),
            "http://localhost:1"
        );
        assert!(Query::new("https://x:1").is_err());
        assert!(Query::new("http://x:1/jaeger").is_err());
        assert_eq!(encode("my-mirror maker/α"), "my-mirror%20maker%2F%CE%B1");
    }

    #[test]
    fn the_config_sets_every_listener_from_the_environment() {
        for var in [
            "STRAIT_JAEGER_OTLP_HTTP_PORT",
            "STRAIT_JAEGER_OTLP_GRPC_PORT",
            "STRAIT_JAEGER_QUERY_PORT",
            "STRAIT_JAEGER_QUERY_GRPC_PORT",
        ] {
            assert_eq!(
                CONFIG_YAML.matches(var).count(),
                2,
                "{var}: comment + endpoint"
            );
        }
        assert!(
            CONFIG_YAML.contains("level: none"),
            "no :8888 metrics endpoint"
        );
    }
}
