//! Received spans, flattened out of the OTLP resource/scope nesting.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::span::SpanKind as ProtoKind;

/// A 16-byte trace id. Never all zeroes in a [`SpanRecord`] (such spans are not stored).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceId([u8; 16]);

/// An 8-byte span id. Never all zeroes in a [`SpanRecord`] (a missing parent is `None`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SpanId([u8; 8]);

fn hex(bytes: &[u8], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    for b in bytes {
        write!(f, "{b:02x}")?;
    }
    Ok(())
}

fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl TraceId {
    /// The id from its bytes; `None` for the invalid all-zero id.
    pub fn from_bytes(bytes: [u8; 16]) -> Option<TraceId> {
        (bytes != [0; 16]).then_some(TraceId(bytes))
    }

    /// The id from 32 hex digits (as in a W3C `traceparent`); `None` if malformed or all zero.
    pub fn from_hex(s: &str) -> Option<TraceId> {
        TraceId::from_bytes(parse_hex(s)?)
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl SpanId {
    /// The id from its bytes; `None` for the invalid all-zero id.
    pub fn from_bytes(bytes: [u8; 8]) -> Option<SpanId> {
        (bytes != [0; 8]).then_some(SpanId(bytes))
    }

    /// The id from 16 hex digits; `None` if malformed or all zero.
    pub fn from_hex(s: &str) -> Option<SpanId> {
        SpanId::from_bytes(parse_hex(s)?)
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; 8] {
        &self.0
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        hex(&self.0, f)
    }
}

impl fmt::Debug for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceId({self})")
    }
}

impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        hex(&self.0, f)
    }
}

impl fmt::Debug for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SpanId({self})")
    }
}

/// The span kind, as OTLP defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SpanKind {
    /// Not set by the sender.
    Unspecified,
    /// Internal operation.
    Internal,
    /// Server side of a request.
    Server,
    /// Client side of a request (also a mirror's non-injecting `send`).
    Client,
    /// A message producer (`send <topic>`).
    Producer,
    /// A message consumer (`process <topic>`).
    Consumer,
}

impl SpanKind {
    fn from_proto(kind: i32) -> SpanKind {
        match ProtoKind::try_from(kind) {
            Ok(ProtoKind::Internal) => SpanKind::Internal,
            Ok(ProtoKind::Server) => SpanKind::Server,
            Ok(ProtoKind::Client) => SpanKind::Client,
            Ok(ProtoKind::Producer) => SpanKind::Producer,
            Ok(ProtoKind::Consumer) => SpanKind::Consumer,
            _ => SpanKind::Unspecified,
        }
    }
}

/// An attribute value.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AttrValue {
    /// A string.
    String(String),
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Double(f64),
    /// Raw bytes.
    Bytes(Vec<u8>),
    /// A list of values.
    Array(Vec<AttrValue>),
    /// A nested key-value list.
    Map(BTreeMap<String, AttrValue>),
    /// No value.
    Empty,
}

impl AttrValue {
    fn from_proto(v: Option<&AnyValue>) -> AttrValue {
        use any_value::Value;
        match v.and_then(|v| v.value.as_ref()) {
            Some(Value::StringValue(s)) => AttrValue::String(s.clone()),
            Some(Value::BoolValue(b)) => AttrValue::Bool(*b),
            Some(Value::IntValue(i)) => AttrValue::Int(*i),
            Some(Value::DoubleValue(d)) => AttrValue::Double(*d),
            Some(Value::BytesValue(b)) => AttrValue::Bytes(b.clone()),
            Some(Value::ArrayValue(a)) => AttrValue::Array(
                a.values
                    .iter()
                    .map(|v| AttrValue::from_proto(Some(v)))
                    .collect(),
            ),
            Some(Value::KvlistValue(kv)) => AttrValue::Map(attributes(&kv.values)),
            // Profiles-only dictionary references and unset values carry nothing for traces.
            Some(Value::StringValueStrindex(_)) | None => AttrValue::Empty,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is one.
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            AttrValue::Int(i) => Some(*i),
            _ => None,
        }
    }
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::String(s) => write!(f, "{s}"),
            AttrValue::Bool(b) => write!(f, "{b}"),
            AttrValue::Int(i) => write!(f, "{i}"),
            AttrValue::Double(d) => write!(f, "{d}"),
            AttrValue::Bytes(b) => write!(f, "<{} bytes>", b.len()),
            AttrValue::Array(a) => write!(f, "{a:?}"),
            AttrValue::Map(m) => write!(f, "{m:?}"),
            AttrValue::Empty => write!(f, ""),
        }
    }
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, AttrValue> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), AttrValue::from_proto(kv.value.as_ref())))
        .collect()
}

/// A link from a span to another span context.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkRecord {
    /// The linked trace.
    pub trace_id: TraceId,
    /// The linked span.
    pub span_id: SpanId,
    /// The link's attributes.
    pub attributes: BTreeMap<String, AttrValue>,
}

/// One received span with its resource's `service.name` and its instrumentation scope.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanRecord {
    /// The trace.
    pub trace_id: TraceId,
    /// The span.
    pub span_id: SpanId,
    /// The parent span; `None` for a root span.
    pub parent_span_id: Option<SpanId>,
    /// The span name, e.g. `send my-topic`.
    pub name: String,
    /// The kind.
    pub kind: SpanKind,
    /// The resource's `service.name` (empty if the sender set none).
    pub service_name: String,
    /// The instrumentation scope name (e.g. `strait`).
    pub scope: String,
    /// Start time.
    pub start: SystemTime,
    /// End time.
    pub end: SystemTime,
    /// The span's attributes.
    pub attributes: BTreeMap<String, AttrValue>,
    /// The span's links.
    pub links: Vec<LinkRecord>,
    /// The resource attributes.
    pub resource: BTreeMap<String, AttrValue>,
}

impl SpanRecord {
    /// An attribute.
    pub fn attr(&self, key: &str) -> Option<&AttrValue> {
        self.attributes.get(key)
    }

    /// A string attribute.
    pub fn attr_str(&self, key: &str) -> Option<&str> {
        self.attr(key).and_then(AttrValue::as_str)
    }

    /// `end - start`; zero if the sender reported an end before the start.
    pub fn duration(&self) -> Duration {
        self.end.duration_since(self.start).unwrap_or_default()
    }
}

fn unix_nanos(n: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(n)
}

/// Flattens a request into spans. Spans with a malformed or zero trace/span id are skipped and
/// counted in the second value (OTLP says receivers may drop such spans).
pub fn flatten(req: &ExportTraceServiceRequest) -> (Vec<SpanRecord>, usize) {
    let mut out = Vec::new();
    let mut rejected = 0;
    for rs in &req.resource_spans {
        let resource = rs
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        let service_name = resource
            .get("service.name")
            .and_then(AttrValue::as_str)
            .unwrap_or_default()
            .to_string();
        for ss in &rs.scope_spans {
            let scope = ss
                .scope
                .as_ref()
                .map(|s| s.name.clone())
                .unwrap_or_default();
            for s in &ss.spans {
                let ids = (
                    <[u8; 16]>::try_from(s.trace_id.as_slice())
                        .ok()
                        .and_then(TraceId::from_bytes),
                    <[u8; 8]>::try_from(s.span_id.as_slice())
                        .ok()
                        .and_then(SpanId::from_bytes),
                );
                let (Some(trace_id), Some(span_id)) = ids else {
                    rejected += 1;
                    continue;
                };
                let links = s
                    .links
                    .iter()
                    .filter_map(|l| {
                        Some(LinkRecord {
                            trace_id: TraceId::from_bytes(l.trace_id.as_slice().try_into().ok()?)?,
                            span_id: SpanId::from_bytes(l.span_id.as_slice().try_into().ok()?)?,
                            attributes: attributes(&l.attributes),
                        })
                    })
                    .collect();
                out.push(SpanRecord {
                    trace_id,
                    span_id,
                    parent_span_id: <[u8; 8]>::try_from(s.parent_span_id.as_slice())
                        .ok()
                        .and_then(SpanId::from_bytes),
                    name: s.name.clone(),
                    kind: SpanKind::from_proto(s.kind),
                    service_name: service_name.clone(),
                    scope: scope.clone(),
                    start: unix_nanos(s.start_time_unix_nano),
                    end: unix_nanos(s.end_time_unix_nano),
                    attributes: attributes(&s.attributes),
                    links,
                    resource: resource.clone(),
                });
            }
        }
    }
    (out, rejected)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_through_hex_and_refuse_zero() {
        let t = TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap();
        assert_eq!(t.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(TraceId::from_hex("00000000000000000000000000000000").is_none());
        assert!(TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e473").is_none());
        assert!(SpanId::from_hex("00f067aa0ba902b7").is_some());
        assert!(SpanId::from_hex("00f067aa0ba902bz").is_none());
        assert!(SpanId::from_bytes([0; 8]).is_none());
    }
}
