//! A minimal HTTP/1.1 client for the few HTTP calls SASL credentials need: an OAuth token
//! endpoint (client credentials grant) and AWS STS. One request per connection, over TCP or
//! TLS (rustls, trusting the system CA bundle or `SSL_CERT_FILE`, else the built-in roots),
//! through `hyper`, directly or through the proxy `HTTPS_PROXY` / `HTTP_PROXY` name
//! (`crate::proxy`).
//!
//! Nothing here logs request bodies or headers: they carry client secrets.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use hyper::Uri;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::config::TlsSettings;
use crate::tls::TlsContext;

/// A response: status and body (bodies are small JSON or XML documents).
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Bytes,
}

/// Why a request failed, as text for the caller's error (never containing the request).
pub(crate) struct Failure {
    pub(crate) message: String,
}

/// The largest response body read (token responses are a few KiB).
const MAX_BODY: usize = 1024 * 1024;

/// Sends one POST with a form body and returns the response. `headers` are added as given.
pub(crate) async fn post_form(
    url: &str,
    headers: &[(&str, String)],
    body: String,
    timeout: Duration,
) -> Result<Response, Failure> {
    let env = |name: &str| std::env::var(name).ok();
    let mut all = vec![
        (
            "content-type".to_owned(),
            "application/x-www-form-urlencoded".to_owned(),
        ),
        ("accept".to_owned(), "application/json".to_owned()),
    ];
    all.extend(headers.iter().map(|(k, v)| (k.to_string(), v.clone())));
    let tls = TlsSettings::default();
    let send = post_inner(url, &all, Bytes::from(body), &tls, env);
    match tokio::time::timeout(timeout, send).await {
        Ok(r) => r,
        Err(_) => Err(Failure {
            message: format!("no response within {} ms", timeout.as_millis()),
        }),
    }
}

/// A connection [`open`] made, TCP or TLS.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// Where [`open`] connected to.
pub(crate) struct Opened {
    pub(crate) stream: Box<dyn Io>,
    pub(crate) uri: Uri,
    /// `host[:port]` as the URL has it (the `Host` header, `:authority` in HTTP/2).
    pub(crate) authority: String,
    /// The proxy the connection goes through when the request is plain HTTP sent in absolute
    /// form (no tunnel); its `Proxy-Authorization`.
    pub(crate) absolute_form_proxy: Option<crate::proxy::Proxy>,
}

/// Connects to `url`'s host: directly or through the proxy `HTTPS_PROXY` / `HTTP_PROXY` /
/// `NO_PROXY` name (`env` looks them up; injected in tests), with TLS for `https://` offering
/// the ALPN protocols `alpn`. `tunnel_always`: go through a proxy with CONNECT for plain
/// `http://` too (HTTP/2 with prior knowledge cannot be relayed in absolute form).
pub(crate) async fn open(
    url: &str,
    tls_settings: &TlsSettings,
    env: impl Fn(&str) -> Option<String>,
    alpn: &[&[u8]],
    tunnel_always: bool,
) -> Result<Opened, Failure> {
    let fail = |message: String| Failure { message };
    let uri: Uri = url
        .parse()
        .map_err(|e| fail(format!("`{url}` is not a valid URL: {e}")))?;
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(fail(format!("`{url}` is not an http:// or https:// URL"))),
    };
    let host = uri
        .host()
        .ok_or_else(|| fail(format!("`{url}` has no host")))?
        .to_owned();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let addr = format!("{host}:{port}");
    // HTTPS_PROXY / HTTP_PROXY / NO_PROXY (proxy.rs), as other HTTP clients read them.
    let scheme = if tls { "https" } else { "http" };
    let proxy = crate::proxy::for_url(env, scheme, &host, port).map_err(fail)?;
    let via = proxy
        .as_ref()
        .map(|p| format!(" through the proxy {} ({})", p.addr, p.var))
        .unwrap_or_default();
    let dial = proxy.as_ref().map_or(addr.as_str(), |p| p.addr.as_str());
    let mut tcp = TcpStream::connect(dial)
        .await
        .map_err(|e| fail(format!("cannot connect to {dial}{via}: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let authority = uri
        .authority()
        .map_or_else(|| host.clone(), |a| a.as_str().to_owned());
    let tunnel = tls || tunnel_always;
    if tunnel && let Some(p) = &proxy {
        crate::proxy::tunnel(&mut tcp, &addr, p)
            .await
            .map_err(fail)?;
    }
    let stream: Box<dyn Io> = if tls {
        let ctx = TlsContext::new(tls_settings).map_err(|e| fail(format!("TLS setup: {e}")))?;
        Box::new(
            ctx.connect_alpn(&host, &addr, tcp, alpn)
                .await
                .map_err(|e| fail(e.to_string()))?,
        )
    } else {
        Box::new(tcp)
    };
    Ok(Opened {
        stream,
        uri,
        authority,
        absolute_form_proxy: if tunnel { None } else { proxy },
    })
}

/// [`post_form`] without its time bound; `env` looks up the proxy variables (injected in tests).
async fn post_inner(
    url: &str,
    headers: &[(String, String)],
    body: Bytes,
    tls_settings: &TlsSettings,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Response, Failure> {
    let fail = |message: String| Failure { message };
    let opened = open(url, tls_settings, env, &[], false).await?;
    // Plain http through a proxy: the request names the whole URL (absolute form).
    let path = match &opened.absolute_form_proxy {
        Some(_) => url.to_owned(),
        None => opened
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned(),
    };
    let mut req = Request::post(path).header(hyper::header::HOST, opened.authority.as_str());
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    if let Some(auth) = opened
        .absolute_form_proxy
        .as_ref()
        .and_then(|p| p.authorization.as_deref())
    {
        req = req.header(hyper::header::PROXY_AUTHORIZATION, auth);
    }
    let req = req
        .body(Full::new(body))
        .map_err(|e| fail(format!("invalid request: {e}")))?;
    exchange(opened.stream, req).await
}

async fn exchange<S>(stream: S, req: Request<Full<Bytes>>) -> Result<Response, Failure>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let fail = |message: String| Failure { message };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| fail(format!("HTTP handshake: {e}")))?;
    let driver = tokio::spawn(conn);
    let result = async {
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| fail(format!("HTTP request: {e}")))?;
        let status = resp.status().as_u16();
        let body = http_body_util::Limited::new(resp.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|e| fail(format!("reading the HTTP response: {e}")))?
            .to_bytes();
        Ok(Response { status, body })
    }
    .await;
    driver.abort();
    result
}

/// The answer to [`post`]: the status and the body (at most 1 MiB).
#[derive(Debug, Clone)]
pub struct HttpResponse {
    /// The HTTP status.
    pub status: u16,
    /// The body.
    pub body: Bytes,
}

/// One POST of `body` with `headers` to an `http://` or `https://` URL, bounded by `timeout`,
/// for an embedding program's own small HTTP calls (Strait's OTLP exporter): TLS as `tls` says
/// (its `ca`, else `SSL_CERT_FILE`, the system bundle or the built-in roots), proxies as
/// `HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY` say. The error says what failed, never what was
/// sent.
pub async fn post(
    url: &str,
    headers: &[(String, String)],
    body: Bytes,
    tls: &TlsSettings,
    timeout: Duration,
) -> Result<HttpResponse, String> {
    let env = |name: &str| std::env::var(name).ok();
    match tokio::time::timeout(timeout, post_inner(url, headers, body, tls, env)).await {
        Ok(Ok(r)) => Ok(HttpResponse {
            status: r.status,
            body: r.body,
        }),
        Ok(Err(f)) => Err(f.message),
        Err(_) => Err(format!("no response within {} ms", timeout.as_millis())),
    }
}

/// `application/x-www-form-urlencoded` encoding of one value (RFC 3986 unreserved kept).
pub(crate) fn form_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// A token request to an http:// endpoint goes to HTTP_PROXY in absolute form, with the
    /// proxy's credentials; NO_PROXY sends the same request directly.
    #[tokio::test]
    async fn requests_go_through_the_proxy_the_environment_names() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_addr = listener.local_addr().unwrap();
        let seen = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client closed early");
                got.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}")
                .await
                .unwrap();
            String::from_utf8_lossy(&got).into_owned()
        });
        let proxy_url = format!("http://u:p@{proxy_addr}");
        let env = |name: &str| (name == "HTTP_PROXY").then(|| proxy_url.clone());
        // Nothing listens on the token endpoint's address: only the proxy can answer.
        let resp = post_inner(
            "http://idp.invalid:8080/oauth2/token",
            &[],
            Bytes::from_static(b"grant_type=client_credentials"),
            &TlsSettings::default(),
            env,
        )
        .await
        .map_err(|f| f.message)
        .unwrap();
        assert_eq!((resp.status, &resp.body[..]), (200, &b"{}"[..]));
        let request = seen.await.unwrap();
        assert!(
            request.starts_with("POST http://idp.invalid:8080/oauth2/token HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(
            request
                .to_ascii_lowercase()
                .contains("proxy-authorization: basic dtpw\r\n"),
            "{request}"
        );

        // NO_PROXY: a direct connection, which fails (nothing listens there), naming no proxy.
        let env = |name: &str| match name {
            "HTTP_PROXY" => Some(proxy_url.clone()),
            "NO_PROXY" => Some("localhost".into()),
            _ => None,
        };
        let err = post_inner(
            "http://localhost:1/token",
            &[],
            Bytes::new(),
            &TlsSettings::default(),
            env,
        )
        .await
        .err()
        .unwrap()
        .message;
        assert!(err.starts_with("cannot connect to localhost:1: "), "{err}");
    }
}
