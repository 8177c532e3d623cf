//! Upstream trace contexts found in Kafka record headers.
//!
//! The mirror only *reads* these headers (records are forwarded byte for byte); a context tells
//! the per-record mode which producer span a mirror span belongs to, and whether the producer
//! sampled the trace. Three propagation formats are understood:
//!
//! | Header | Format | Sampled when |
//! |---|---|---|
//! | `traceparent` (+ `tracestate`) | W3C Trace Context: `00-<32 hex>-<16 hex>-<2 hex flags>` | flags bit 0 |
//! | `uber-trace-id` | Jaeger: `<trace id>:<span id>:<parent id>:<flags>`, ids of up to 32/16 hex digits, `:` possibly sent as `%3A` | flags bit 0 (sampled) or bit 1 (debug) |
//! | `b3` | Zipkin B3 single header: `<trace id>-<span id>[-<1\|0\|d>[-<parent id>]]`, 16- or 32-digit trace id | `1` or `d`; no sampling field means "not decided", treated as not sampled |
//!
//! Header names are compared ASCII case-insensitively; when a record carries a header twice the
//! last one wins (as Java's `Headers.lastHeader`). When several formats are present the first
//! valid one in the order above is used. Hex digits must be lower case (all three formats say
//! so); invalid values count as absent.

use opentelemetry::trace::{SpanId, TraceId, TraceState};
use strait_forward::records::Header;

/// The propagation format a context came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// W3C `traceparent`.
    W3c,
    /// Jaeger `uber-trace-id`.
    Jaeger,
    /// Zipkin single-header `b3`.
    B3,
}

impl Format {
    /// A stable label: `w3c`, `jaeger`, `b3`.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::W3c => "w3c",
            Format::Jaeger => "jaeger",
            Format::B3 => "b3",
        }
    }
}

/// A producer's span context carried by a record.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamContext {
    /// Where it came from.
    pub format: Format,
    /// The trace (never the invalid all-zero id).
    pub trace_id: TraceId,
    /// The producer's span (never the invalid all-zero id).
    pub span_id: SpanId,
    /// Whether the producer sampled the trace.
    pub sampled: bool,
    /// The W3C `tracestate` (empty for other formats).
    pub trace_state: TraceState,
}

/// The upstream context of a record with these headers, if any.
pub fn extract<'a>(headers: impl IntoIterator<Item = Header<'a>>) -> Option<UpstreamContext> {
    let mut traceparent = None;
    let mut tracestate = None;
    let mut uber = None;
    let mut b3 = None;
    for h in headers {
        let slot = if h.key.eq_ignore_ascii_case(b"traceparent") {
            &mut traceparent
        } else if h.key.eq_ignore_ascii_case(b"tracestate") {
            &mut tracestate
        } else if h.key.eq_ignore_ascii_case(b"uber-trace-id") {
            &mut uber
        } else if h.key.eq_ignore_ascii_case(b"b3") {
            &mut b3
        } else {
            continue;
        };
        *slot = h.value.and_then(|v| std::str::from_utf8(v).ok());
    }
    traceparent
        .and_then(|v| parse_traceparent(v, tracestate))
        .or_else(|| uber.and_then(parse_jaeger))
        .or_else(|| b3.and_then(parse_b3))
}

fn is_lower_hex(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A trace id of 1 to 32 lower-case hex digits (shorter ids are zero-padded on the left, as
/// Jaeger and B3 send 64-bit ids); `None` if malformed or zero.
fn trace_id(s: &str) -> Option<TraceId> {
    if s.len() > 32 || !is_lower_hex(s) {
        return None;
    }
    u128::from_str_radix(s, 16)
        .ok()
        .filter(|&v| v != 0)
        .map(|v| TraceId::from_bytes(v.to_be_bytes()))
}

/// A span id of 1 to 16 lower-case hex digits; `None` if malformed or zero.
fn span_id(s: &str) -> Option<SpanId> {
    if s.len() > 16 || !is_lower_hex(s) {
        return None;
    }
    u64::from_str_radix(s, 16)
        .ok()
        .filter(|&v| v != 0)
        .map(|v| SpanId::from_bytes(v.to_be_bytes()))
}

/// W3C Trace Context level 1: version 00 has exactly four fields; a higher version may append
/// fields (the first four are read); version `ff` is invalid.
fn parse_traceparent(value: &str, tracestate: Option<&str>) -> Option<UpstreamContext> {
    let value = value.trim_matches([' ', '\t']);
    let mut parts = value.split('-');
    let version = parts.next()?;
    let (trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?);
    if version.len() != 2 || !is_lower_hex(version) || version == "ff" {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    if trace.len() != 32 || span.len() != 16 || flags.len() != 2 || !is_lower_hex(flags) {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some(UpstreamContext {
        format: Format::W3c,
        trace_id: trace_id(trace)?,
        span_id: span_id(span)?,
        sampled: flags & 1 == 1,
        // An invalid tracestate is dropped, the context itself stays valid (W3C §3.3.1.1).
        trace_state: tracestate.and_then(|s| s.parse().ok()).unwrap_or_default(),
    })
}

fn parse_jaeger(value: &str) -> Option<UpstreamContext> {
    let decoded;
    let value = if value.contains('%') {
        decoded = value.replace("%3A", ":").replace("%3a", ":");
        decoded.as_str()
    } else {
        value
    };
    let mut parts = value.trim().split(':');
    let (trace, span, _parent, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || flags.len() > 2 || !is_lower_hex(flags) {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some(UpstreamContext {
        format: Format::Jaeger,
        trace_id: trace_id(trace)?,
        span_id: span_id(span)?,
        // Bit 1 is "debug", which Jaeger clients always sample.
        sampled: flags & 0b11 != 0,
        trace_state: TraceState::default(),
    })
}

fn parse_b3(value: &str) -> Option<UpstreamContext> {
    let mut parts = value.trim().split('-');
    let (trace, span) = (parts.next()?, parts.next()?);
    let sampled = match parts.next() {
        None => false,
        Some("1" | "d") => true,
        Some("0") => false,
        Some(_) => return None,
    };
    if let Some(parent) = parts.next()
        && (parent.len() != 16 || span_id(parent).is_none())
    {
        return None;
    }
    if parts.next().is_some() || !(trace.len() == 16 || trace.len() == 32) || span.len() != 16 {
        return None;
    }
    Some(UpstreamContext {
        format: Format::B3,
        trace_id: trace_id(trace)?,
        span_id: span_id(span)?,
        sampled,
        trace_state: TraceState::default(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn h<'a>(k: &'a str, v: &'a str) -> Header<'a> {
        Header {
            key: k.as_bytes(),
            value: Some(v.as_bytes()),
        }
    }

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn w3c_traceparent_with_tracestate() {
        let c = extract([h("traceparent", TP), h("tracestate", "congo=t61rcWkgMzE")]).unwrap();
        assert_eq!(c.format, Format::W3c);
        assert_eq!(
            c.trace_id,
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert_eq!(c.span_id, SpanId::from_hex("00f067aa0ba902b7").unwrap());
        assert!(c.sampled);
        assert_eq!(c.trace_state.get("congo"), Some("t61rcWkgMzE"));
        let unsampled = TP.replace("-01", "-00");
        assert!(!extract([h("traceparent", &unsampled)]).unwrap().sampled);
    }

    #[test]
    fn w3c_rejects_what_the_spec_rejects() {
        for bad in [
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-+bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "garbage",
        ] {
            assert_eq!(extract([h("traceparent", bad)]), None, "{bad}");
        }
        // A future version may append fields.
        let future = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-ever";
        assert!(extract([h("traceparent", future)]).unwrap().sampled);
        // A bad tracestate does not invalidate the traceparent.
        let c = extract([h("traceparent", TP), h("tracestate", "no equals sign")]).unwrap();
        assert_eq!(c.trace_state, TraceState::default());
    }

    #[test]
    fn header_names_are_case_insensitive_and_the_last_duplicate_wins() {
        let unsampled = TP.replace("-01", "-00");
        let c = extract([h("TraceParent", &unsampled), h("traceparent", TP)]).unwrap();
        assert!(c.sampled);
        // A null value is no context.
        let null = Header {
            key: b"traceparent",
            value: None,
        };
        assert_eq!(extract([null]), None);
    }

    #[test]
    fn jaeger_uber_trace_id_pads_64_bit_ids_and_reads_flags() {
        let c = extract([h("uber-trace-id", "a3ce929d0e0e4736:f067aa0ba902b7:0:1")]).unwrap();
        assert_eq!(c.format, Format::Jaeger);
        assert_eq!(
            c.trace_id,
            TraceId::from_hex("0000000000000000a3ce929d0e0e4736").unwrap()
        );
        assert_eq!(c.span_id, SpanId::from_hex("00f067aa0ba902b7").unwrap());
        assert!(c.sampled);
        let encoded = "4bf92f3577b34da6a3ce929d0e0e4736%3A00f067aa0ba902b7%3A0%3A0";
        let c = extract([h("uber-trace-id", encoded)]).unwrap();
        assert!(!c.sampled);
        // Debug flag (2) means sampled.
        assert!(
            extract([h("uber-trace-id", "abc:def:0:2")])
                .unwrap()
                .sampled
        );
        assert_eq!(extract([h("uber-trace-id", "abc:def:0")]), None);
        assert_eq!(extract([h("uber-trace-id", "0:def:0:1")]), None);
    }

    #[test]
    fn b3_single_header() {
        let c = extract([h(
            "b3",
            "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90",
        )])
        .unwrap();
        assert_eq!(c.format, Format::B3);
        assert!(c.sampled);
        assert!(
            extract([h("b3", "a3ce929d0e0e4736-00f067aa0ba902b7-d")])
                .unwrap()
                .sampled
        );
        assert!(
            !extract([h("b3", "a3ce929d0e0e4736-00f067aa0ba902b7-0")])
                .unwrap()
                .sampled
        );
        // No sampling decision yet: not sampled.
        assert!(
            !extract([h("b3", "a3ce929d0e0e4736-00f067aa0ba902b7")])
                .unwrap()
                .sampled
        );
        for bad in [
            "1",
            "0",
            "d",
            "a3ce929d0e0e4736-00f067aa0ba902b7-x",
            "abc-00f067aa0ba902b7-1",
        ] {
            assert_eq!(extract([h("b3", bad)]), None, "{bad}");
        }
    }

    #[test]
    fn w3c_wins_over_jaeger_and_b3_and_invalid_w3c_falls_back() {
        let c = extract([
            h("b3", "a3ce929d0e0e4736-00f067aa0ba902b7-1"),
            h("uber-trace-id", "abc:def:0:1"),
            h("traceparent", TP),
        ])
        .unwrap();
        assert_eq!(c.format, Format::W3c);
        let c = extract([h("traceparent", "junk"), h("uber-trace-id", "abc:def:0:1")]).unwrap();
        assert_eq!(c.format, Format::Jaeger);
        assert_eq!(extract([h("content-type", "json")]), None);
    }
}
