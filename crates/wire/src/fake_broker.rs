//! An in-process fake broker for unit tests: answers ApiVersions itself (refusing v4 the way
//! Kafka 3.x does, in v0 format) and hands every other request, on any connection, to a
//! handler that decides the answer.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::{Encodable, decode_request_header_from_buffer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use crate::config::ClientConfig;
use crate::conn::Connection;
use crate::frame;

/// What the fake broker does with a non-ApiVersions request: frames (body only, the
/// correlation id is added) to send in order, or close the socket.
pub(crate) enum Reply {
    Frames(Vec<Vec<u8>>),
    RawBytes(Vec<u8>),
    Hold,
    Close,
}

pub(crate) struct Fake {
    pub(crate) addr: String,
    pub(crate) api_versions_seen: Arc<Mutex<Vec<i16>>>,
}

fn framed(correlation: i32, body: &[u8]) -> Vec<u8> {
    let mut v = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    v.extend_from_slice(&correlation.to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// Serves every connection; `other` gets the API key, the correlation id and the request body
/// (after the header) of each request but ApiVersions.
pub(crate) async fn start(other: impl FnMut(i16, i32, Bytes) -> Reply + Send + 'static) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let other = Arc::new(Mutex::new(other));
    let seen2 = seen.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(serve(sock, seen2.clone(), other.clone()));
        }
    });
    Fake {
        addr,
        api_versions_seen: seen,
    }
}

async fn serve<F: FnMut(i16, i32, Bytes) -> Reply>(
    mut sock: tokio::net::TcpStream,
    seen: Arc<Mutex<Vec<i16>>>,
    other: Arc<Mutex<F>>,
) {
    let mut buf = BytesMut::new();
    let mut held: Vec<i32> = Vec::new();
    while let Ok(Some(mut frame)) = frame::read_frame(&mut sock, &mut buf, 1 << 20).await {
        let header = decode_request_header_from_buffer(&mut frame).unwrap();
        let corr = header.correlation_id;
        if header.request_api_key == ApiKey::ApiVersions as i16 {
            let v = header.request_api_version;
            seen.lock().unwrap().push(v);
            sock.write_all(&api_versions_answer(corr, v)).await.unwrap();
            continue;
        }
        let reply = (other.lock().unwrap())(header.request_api_key, corr, frame);
        match reply {
            Reply::Frames(bodies) => {
                for b in bodies {
                    sock.write_all(&framed(corr, &b)).await.unwrap();
                }
            }
            Reply::RawBytes(b) => sock.write_all(&b).await.unwrap(),
            Reply::Hold => held.push(corr),
            Reply::Close => return,
        }
    }
}

/// The fake's answer (framed) to an ApiVersions request at `version` with `correlation`: v4 and
/// later are refused in v0 format, as Kafka 3.x does; v3 and earlier get ApiVersions 0-3 and
/// Metadata 0-12.
pub(crate) fn api_versions_answer(correlation: i32, version: i16) -> Vec<u8> {
    let keys = |full: bool| {
        let mut k = vec![
            ApiVersion::default()
                .with_api_key(18)
                .with_min_version(0)
                .with_max_version(3),
        ];
        if full {
            k.push(
                ApiVersion::default()
                    .with_api_key(3)
                    .with_min_version(0)
                    .with_max_version(12),
            );
        }
        k
    };
    let (resp, at) = if version > 3 {
        (
            ApiVersionsResponse::default()
                .with_error_code(35)
                .with_api_keys(keys(false)),
            0,
        )
    } else {
        (
            ApiVersionsResponse::default().with_api_keys(keys(true)),
            version,
        )
    };
    let mut body = BytesMut::new();
    resp.encode(&mut body, at).unwrap();
    framed(correlation, &body)
}

pub(crate) async fn connect(addr: &str) -> Connection {
    let cfg = ClientConfig::from_properties([("bootstrap.servers", addr)]).unwrap();
    Connection::connect(addr, &cfg).await.unwrap()
}

/// A Metadata v12 response body (after the response header's tagged fields).
pub(crate) fn metadata_body_of(resp: &kafka_protocol::messages::MetadataResponse) -> Vec<u8> {
    let mut body = BytesMut::new();
    body.put_u8(0); // header v1: no tagged fields
    resp.encode(&mut body, 12).unwrap();
    body.to_vec()
}

/// A valid empty Metadata v12 response body.
pub(crate) fn metadata_body() -> Vec<u8> {
    metadata_body_of(&kafka_protocol::messages::MetadataResponse::default())
}
