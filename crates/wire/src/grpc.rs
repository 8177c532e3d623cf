//! One unary gRPC call (HTTP/2, hyper's client), for an embedding program's small RPCs (Strait's
//! OTLP/gRPC exporter): the message is sent in gRPC's length-prefixed framing with
//! `content-type: application/grpc`, `te: trailers` and `grpc-timeout`, over TCP or TLS (ALPN
//! `h2`; the CA as [`TlsSettings`] says), directly or through the proxy `HTTPS_PROXY` /
//! `HTTP_PROXY` / `NO_PROXY` name (always a CONNECT tunnel: HTTP/2 cannot be relayed in absolute
//! form), and the answer's `grpc-status` / `grpc-message` are read from the trailers (or the
//! headers of a trailers-only answer). One call per connection, like [`crate::http`]; no
//! compression, streaming or retries (the caller retries).
//!
//! Nothing here logs the request: headers may carry credentials.

use std::time::Duration;

use bytes::{BufMut as _, Bytes, BytesMut};
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use hyper::header::HeaderMap;
use hyper_util::rt::{TokioExecutor, TokioIo};

use crate::config::TlsSettings;
use crate::http::{Failure, Io, open};

/// The largest answer read (OTLP answers are a few bytes).
const MAX_ANSWER: usize = 1024 * 1024;

/// gRPC status codes the caller may retry (the OTLP exporter specification's list).
pub const RETRYABLE: [u32; 6] = [
    1,  // CANCELLED
    4,  // DEADLINE_EXCEEDED
    10, // ABORTED
    11, // OUT_OF_RANGE
    14, // UNAVAILABLE
    15, // DATA_LOSS
];

/// How a call ended at the gRPC level (the transport worked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcAnswer {
    /// `grpc-status`: 0 = OK.
    pub code: u32,
    /// `grpc-message`, percent-decoded (empty when the server sent none).
    pub message: String,
    /// The response message without its 5-byte prefix (empty unless `code` is 0).
    pub body: Bytes,
}

/// Calls `method` (`/package.Service/Method`) on the server of `url` (`http://` or `https://`
/// host and port; its path is not used) with the protobuf `message`, bounded by `timeout` (also
/// sent as `grpc-timeout`). `headers` are added as given (lowercase names). `Err` says why no
/// gRPC status came back (connection, TLS, HTTP/2, an HTTP error status), never what was sent.
pub async fn unary(
    url: &str,
    method: &str,
    headers: &[(String, String)],
    message: Bytes,
    tls: &TlsSettings,
    timeout: Duration,
) -> Result<GrpcAnswer, String> {
    let env = |name: &str| std::env::var(name).ok();
    let call = unary_inner(url, method, headers, message, tls, timeout, env);
    match tokio::time::timeout(timeout, call).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(f)) => Err(f.message),
        Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
    }
}

/// [`unary`] without its time bound; `env` looks up the proxy variables (injected in tests).
async fn unary_inner(
    url: &str,
    method: &str,
    headers: &[(String, String)],
    message: Bytes,
    tls: &TlsSettings,
    timeout: Duration,
    env: impl Fn(&str) -> Option<String>,
) -> Result<GrpcAnswer, Failure> {
    let fail = |message: String| Failure { message };
    let opened = open(url, tls, env, &[b"h2"], true).await?;
    let scheme = opened.uri.scheme_str().unwrap_or("http");
    let target = format!("{scheme}://{}{method}", opened.authority);
    let mut req = Request::post(target)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", grpc_timeout(timeout))
        .header("user-agent", concat!("strait/", env!("CARGO_PKG_VERSION")));
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req
        .body(Full::new(frame(&message)))
        .map_err(|e| fail(format!("invalid request: {e}")))?;
    exchange(opened.stream, req).await
}

/// `message` behind gRPC's prefix: not compressed (0), then the length, big-endian.
fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(0);
    out.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
    out.put_slice(message);
    out.freeze()
}

/// `grpc-timeout`: at most 8 digits and a unit; milliseconds, or seconds when that overflows.
fn grpc_timeout(timeout: Duration) -> String {
    let ms = timeout.as_millis();
    if ms < 100_000_000 {
        format!("{ms}m")
    } else {
        format!("{}S", timeout.as_secs().min(99_999_999))
    }
}

async fn exchange(stream: Box<dyn Io>, req: Request<Full<Bytes>>) -> Result<GrpcAnswer, Failure> {
    let fail = |message: String| Failure { message };
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .map_err(|e| fail(format!("HTTP/2 handshake: {e}")))?;
    let driver = tokio::spawn(conn);
    let result = async {
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| fail(format!("HTTP/2 request: {e}")))?;
        let status = resp.status();
        let head = resp.headers().clone();
        let collected = http_body_util::Limited::new(resp.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| fail(format!("reading the gRPC answer: {e}")))?;
        let trailers = collected.trailers().cloned().unwrap_or_default();
        let body = collected.to_bytes();
        // A trailers-only answer (an error before any message) puts the status in the headers.
        let Some(code) = grpc_status(&trailers).or_else(|| grpc_status(&head)) else {
            return Err(fail(if status.is_success() {
                "the answer has no grpc-status (not a gRPC server?)".to_owned()
            } else {
                format!("HTTP status {status} without a grpc-status (not a gRPC endpoint?)")
            }));
        };
        let message = trailers
            .get("grpc-message")
            .or_else(|| head.get("grpc-message"))
            .map(|v| {
                String::from_utf8_lossy(&crate::proxy::percent_decode(&String::from_utf8_lossy(
                    v.as_bytes(),
                )))
                .into_owned()
            })
            .unwrap_or_default();
        let body = if code == 0 {
            unframe(body).map_err(fail)?
        } else {
            Bytes::new()
        };
        Ok(GrpcAnswer {
            code,
            message,
            body,
        })
    }
    .await;
    driver.abort();
    result
}

fn grpc_status(headers: &HeaderMap) -> Option<u32> {
    headers
        .get("grpc-status")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The one message of a unary answer, without its prefix (empty when the server sent none).
fn unframe(body: Bytes) -> Result<Bytes, String> {
    if body.is_empty() {
        return Ok(body);
    }
    let Some(prefix) = body.get(..5) else {
        return Err(format!(
            "a gRPC answer of {} bytes is cut short",
            body.len()
        ));
    };
    if prefix[0] != 0 {
        return Err("the gRPC answer is compressed, which was not asked for".to_owned());
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if body.len() - 5 < len {
        return Err(format!(
            "the gRPC answer announces {len} bytes but carries {}",
            body.len() - 5
        ));
    }
    Ok(body.slice(5..5 + len))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_framed_and_unframed() {
        let framed = frame(b"abc");
        assert_eq!(&framed[..], b"\x00\x00\x00\x00\x03abc");
        assert_eq!(&unframe(framed).unwrap()[..], b"abc");
        assert_eq!(unframe(Bytes::new()).unwrap().len(), 0);
        assert!(unframe(Bytes::from_static(b"\x00\x00\x00")).is_err());
        assert!(unframe(Bytes::from_static(b"\x00\x00\x00\x00\x09abc")).is_err());
        assert!(unframe(Bytes::from_static(b"\x01\x00\x00\x00\x03abc")).is_err());
    }

    #[test]
    fn the_timeout_header_fits_eight_digits() {
        assert_eq!(grpc_timeout(Duration::from_millis(10_000)), "10000m");
        assert_eq!(grpc_timeout(Duration::from_secs(200_000)), "200000S");
    }
}
