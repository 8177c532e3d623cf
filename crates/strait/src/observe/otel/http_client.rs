//! The OTLP/HTTP exporter's HTTP client: `strait-wire`'s (rustls), so that an `https://`
//! endpoint works (with the CA of `OTEL_EXPORTER_OTLP_CERTIFICATE`, else `SSL_CERT_FILE`, the
//! system bundle or the built-in roots) and `HTTPS_PROXY` / `NO_PROXY` apply. The exporter's own
//! hyper client speaks plain HTTP only.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use strait_wire::config::TlsSettings;

/// Sends each export with [`strait_wire::http::post`].
#[derive(Debug, Clone)]
pub(crate) struct WireHttp {
    pub(crate) tls: TlsSettings,
    pub(crate) timeout: Duration,
}

#[async_trait]
impl HttpClient for WireHttp {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let url = request.uri().to_string();
        let headers: Vec<(String, String)> = request
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect();
        let answer =
            strait_wire::http::post(&url, &headers, request.into_body(), &self.tls, self.timeout)
                .await
                .map_err(|e| HttpError::from(format!("OTLP export to {url}: {e}")))?;
        Ok(Response::builder()
            .status(answer.status)
            .body(answer.body)?)
    }
}
