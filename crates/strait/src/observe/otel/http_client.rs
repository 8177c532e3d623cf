//! The OTLP exporter's transport: `strait-wire`'s HTTP client (rustls), so that an `https://`
//! endpoint works (with the CA of `OTEL_EXPORTER_OTLP_CERTIFICATE`, else `SSL_CERT_FILE`, the
//! system bundle or the built-in roots) and `HTTPS_PROXY` / `NO_PROXY` apply. The exporter's own
//! hyper client speaks plain HTTP only.
//!
//! With `OTEL_EXPORTER_OTLP_PROTOCOL=grpc` the same request goes out as OTLP/gRPC: OTLP/gRPC's
//! `TraceService/Export` takes exactly the protobuf `ExportTraceServiceRequest` that OTLP/HTTP
//! posts and answers the `ExportTraceServiceResponse` OTLP/HTTP answers, so the exporter
//! (encoding, headers, retries, partial success) stays opentelemetry-otlp's HTTP one and only
//! the transport changes: `strait_wire::grpc::unary` over HTTP/2. A gRPC status is handed back
//! as the HTTP status the exporter's retry rules read (retryable codes as 503, others as 400).
//! Not opentelemetry-otlp's `grpc-tonic` feature: tonic and tower for one unary call, and its
//! channel would not go through strait-wire's TLS and proxy settings.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use strait_wire::config::TlsSettings;

/// OTLP/gRPC's method for traces.
const TRACES_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// Sends each export with [`strait_wire::http::post`], or as a gRPC call when `grpc`.
#[derive(Debug, Clone)]
pub(crate) struct WireHttp {
    pub(crate) tls: TlsSettings,
    pub(crate) timeout: Duration,
    pub(crate) grpc: bool,
}

#[async_trait]
impl HttpClient for WireHttp {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let url = request.uri().to_string();
        let headers: Vec<(String, String)> = request
            .headers()
            .iter()
            // gRPC sets its own content type; the exporter compresses nothing for gRPC.
            .filter(|(k, _)| {
                !self.grpc || !matches!(k.as_str(), "content-type" | "content-encoding")
            })
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect();
        if self.grpc {
            return self.call(&url, &headers, request.into_body()).await;
        }
        let answer =
            strait_wire::http::post(&url, &headers, request.into_body(), &self.tls, self.timeout)
                .await
                .map_err(|e| HttpError::from(format!("OTLP export to {url}: {e}")))?;
        Ok(Response::builder()
            .status(answer.status)
            .body(answer.body)?)
    }
}

impl WireHttp {
    async fn call(
        &self,
        url: &str,
        headers: &[(String, String)],
        body: Bytes,
    ) -> Result<Response<Bytes>, HttpError> {
        let answer =
            strait_wire::grpc::unary(url, TRACES_EXPORT, headers, body, &self.tls, self.timeout)
                .await
                .map_err(|e| HttpError::from(format!("OTLP/gRPC export to {url}: {e}")))?;
        let status = match answer.code {
            0 => 200,
            c if strait_wire::grpc::RETRYABLE.contains(&c) => 503,
            _ => 400,
        };
        if answer.code != 0 {
            // The exporter's error names only the HTTP status; the receiver's reason is here.
            tracing::debug!(
                grpc_status = answer.code,
                grpc_message = %answer.message,
                "OTLP/gRPC export refused"
            );
        }
        Ok(Response::builder().status(status).body(answer.body)?)
    }
}
