//! Entry points for the fuzz targets under `fuzz/` (feature `unstable-fuzzing`; not a stable API).

use std::ops::RangeInclusive;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiVersionsRequest, CreatePartitionsRequest, CreateTopicsRequest, DescribeAclsRequest,
    DescribeClusterRequest, DescribeConfigsRequest, FetchRequest, FindCoordinatorRequest,
    HeartbeatRequest, InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest,
    ListOffsetsRequest, MetadataRequest, OffsetCommitRequest, OffsetFetchRequest, ProduceRequest,
    ResponseHeader, SaslAuthenticateRequest, SaslHandshakeRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::{Encodable, HeaderVersion, Request};

use crate::conn::{decode_api_versions, decode_response};
use crate::frame;
use crate::version::{self, ApiVersionTable};

/// One API Strait reads responses of, with every version it may negotiate.
pub struct ResponseApi {
    /// The API's name.
    pub name: &'static str,
    /// The versions Strait may negotiate (the `pick_version` range of its call site,
    /// intersected with what kafka-protocol can decode).
    pub versions: RangeInclusive<i16>,
    /// Decodes one frame (response header included) as the connection does; whether it was
    /// a valid response.
    pub decode: fn(Bytes, i16) -> bool,
    /// A valid frame at a version: a response header and an all-default body.
    pub template: fn(i16) -> Bytes,
}

fn decode<R: Request>(frame: Bytes, version: i16) -> bool {
    decode_response::<R>(frame, version).is_ok()
}

/// The handshake's own ApiVersions decoding (v0 body on UNSUPPORTED_VERSION) and the version
/// table it builds.
fn decode_api_versions_answer(frame: Bytes, version: i16) -> bool {
    let Ok(resp) = decode_api_versions(frame, version) else {
        return false;
    };
    let table = ApiVersionTable::from_response(&resp);
    for key in 0..=i16::from(u8::MAX) {
        let _ = table.broker_range(key);
    }
    true
}

/// A valid frame (response header and an all-default body) of `R` at `version`.
fn template<R: Request>(version: i16) -> Bytes
where
    R::Response: Default,
{
    let mut buf = BytesMut::new();
    let header = ResponseHeader::default().with_correlation_id(1);
    let ok = header
        .encode(&mut buf, R::Response::header_version(version))
        .and_then(|()| R::Response::default().encode(&mut buf, version));
    match ok {
        Ok(()) => buf.freeze(),
        Err(_) => Bytes::new(),
    }
}

fn api<R: Request>(name: &'static str, wanted: RangeInclusive<i16>) -> ResponseApi
where
    R::Response: Default,
{
    let ours = version::crate_range(R::VERSIONS);
    let versions = version::intersect(&wanted, &ours).unwrap_or(wanted);
    ResponseApi {
        name,
        versions,
        decode: decode::<R>,
        template: template::<R>,
    }
}

/// Every response Strait decodes, at the version ranges of its call sites (`pick_version` in
/// metadata.rs, fetch.rs, produce.rs, offsets.rs, producer_id.rs, group.rs,
/// group/coordinator.rs, offset_commit.rs, admin.rs; conn.rs for the handshake). A range here
/// may be wider than the call site's (its lower bound depends on the broker), never narrower.
pub fn response_apis() -> Vec<ResponseApi> {
    let mut apis = vec![
        api::<ApiVersionsRequest>("ApiVersions", 0..=4),
        api::<SaslHandshakeRequest>("SaslHandshake", 1..=1),
        api::<SaslAuthenticateRequest>("SaslAuthenticate", 0..=2),
        api::<MetadataRequest>("Metadata", 4..=13),
        api::<FetchRequest>("Fetch", 4..=18),
        api::<ProduceRequest>("Produce", 3..=13),
        api::<ListOffsetsRequest>("ListOffsets", 1..=10),
        api::<InitProducerIdRequest>("InitProducerId", 0..=5),
        api::<FindCoordinatorRequest>("FindCoordinator", 0..=6),
        api::<JoinGroupRequest>("JoinGroup", 0..=9),
        api::<SyncGroupRequest>("SyncGroup", 0..=5),
        api::<HeartbeatRequest>("Heartbeat", 0..=4),
        api::<LeaveGroupRequest>("LeaveGroup", 0..=5),
        api::<OffsetCommitRequest>("OffsetCommit", 2..=9),
        api::<OffsetFetchRequest>("OffsetFetch", 1..=9),
        api::<CreateTopicsRequest>("CreateTopics", 2..=7),
        api::<CreatePartitionsRequest>("CreatePartitions", 0..=3),
        api::<DescribeConfigsRequest>("DescribeConfigs", 1..=4),
        api::<DescribeAclsRequest>("DescribeAcls", 1..=3),
        api::<DescribeClusterRequest>("DescribeCluster", 0..=2),
    ];
    // The handshake decodes ApiVersions itself (header v0 always, v0 body on UNSUPPORTED_VERSION).
    apis[0].decode = decode_api_versions_answer;
    apis
}

/// The largest frame the fuzz target accepts: small, so that a decoder that allocates by a
/// count from the wire instead of by the bytes present shows up as a huge allocation.
const MAX_FRAME: usize = 64 * 1024;

/// Feeds `data` to the response decoding of the wire client. Must never panic or allocate
/// more than the bytes justify, whatever the bytes.
///
/// `data[0]` picks the API and `data[1]` the version (low 6 bits) and the mode:
/// * bit 7 set: the rest is a byte stream from the socket. It goes through the framing exactly
///   as the connection reader sees it (check, then split, in two reads), and each whole frame
///   is decoded as a full response of the chosen API.
/// * bit 6 set: the rest follows a prefix of a valid response (its first `data[2]` bytes), so
///   mutations reach the fields after it.
/// * neither: the rest is one response frame (header and body).
pub fn frames(data: &[u8]) {
    let [api_sel, ver_sel, rest @ ..] = data else {
        return;
    };
    let apis = response_apis();
    let api = &apis[usize::from(*api_sel) % apis.len()];
    let (lo, hi) = (*api.versions.start(), *api.versions.end());
    let span = (hi - lo + 1).max(1);
    let version = lo + i16::from(ver_sel & 0x3f) % span;

    if ver_sel & 0x80 != 0 {
        stream(rest, |f| {
            let _ = (api.decode)(f, version);
        });
    } else if ver_sel & 0x40 != 0 {
        let Some((cut, tail)) = rest.split_first() else {
            return;
        };
        let valid = (api.template)(version);
        let keep = usize::from(*cut).min(valid.len());
        let mut f = BytesMut::with_capacity(keep + tail.len());
        f.put_slice(&valid[..keep]);
        f.put_slice(tail);
        (api.decode)(f.freeze(), version);
    } else {
        (api.decode)(Bytes::copy_from_slice(rest), version);
    }
}

/// The connection reader's framing over `data`, arriving in two reads; `each` gets every whole
/// frame (after the size prefix).
fn stream(data: &[u8], mut each: impl FnMut(Bytes)) {
    let mut buf = BytesMut::new();
    let (first, second) = data.split_at(data.len() / 2);
    for chunk in [first, second] {
        buf.put_slice(chunk);
        loop {
            match frame::check(&buf, MAX_FRAME) {
                Ok(Some(total)) => {
                    assert!(
                        total <= buf.len() && total >= 4,
                        "check returned an impossible length"
                    );
                    each(frame::split(&mut buf, total));
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
}

/// The OAuth token parsing a hostile token endpoint (or `file:` token) reaches: `data` is read
/// as a token endpoint's response body (with the HTTP status taken from its first byte), as a
/// token, and as the JSON claims of a JWT, both in the endpoint's answer and as a `file:`
/// token's lifetime. Nothing may panic; the lifetime returned is always within
/// `MIN_TOKEN_LIFETIME..=MAX_TOKEN_LIFETIME`.
pub fn oauth_token(data: &[u8]) {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64URL;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use crate::oauth::{MAX_TOKEN_LIFETIME, MIN_TOKEN_LIFETIME};

    let check = |r: crate::Result<(String, Duration)>| {
        if let Ok((_, lifetime)) = r {
            assert!(
                (MIN_TOKEN_LIFETIME..=MAX_TOKEN_LIFETIME).contains(&lifetime),
                "{lifetime:?}"
            );
        }
    };
    // Now, and a clock at the epoch (where an `exp` claim of 1e19 is 1e19 s away).
    for now in [SystemTime::now(), UNIX_EPOCH] {
        let status = match data.first() {
            Some(0) | None => 200,
            Some(b) => 100 + u16::from(*b) * 2,
        };
        check(crate::oauth::token_response("fuzz", status, data, now));
        check(crate::oauth::token_response("fuzz", 200, data, now));
        let text = String::from_utf8_lossy(data);
        let _ = crate::oauth::jwt_lifetime(&text, now);
        // `data` as a JWT's claims, in an endpoint's answer and as a file's token.
        let jwt = format!("e30.{}.", B64URL.encode(data));
        let _ = crate::oauth::jwt_lifetime(&jwt, now);
        let body = format!(r#"{{"access_token":"{jwt}","expires_in":{text}}}"#);
        check(crate::oauth::token_response(
            "fuzz",
            200,
            body.as_bytes(),
            now,
        ));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Every (API, version) of the table decodes its own valid frame: the table's ranges are
    /// versions the decoders know, so the fuzzer does not waste its time on refused versions.
    #[test]
    fn every_api_and_version_decodes_a_valid_frame() {
        let mut checked = 0;
        for api in response_apis() {
            assert!(!api.versions.is_empty(), "{}", api.name);
            for v in api.versions.clone() {
                let f = (api.template)(v);
                assert!(!f.is_empty(), "{} v{v} has no template", api.name);
                assert!((api.decode)(f, v), "{} v{v} does not decode", api.name);
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked}");
    }

    /// The modes reach the decoders, and a hostile count in any of them is just an error.
    #[test]
    fn modes_survive_hostile_counts() {
        let hostile = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x7f, 0xff, 0xff, 0xff];
        for a in 0..=u8::MAX {
            for v in [0u8, 0x05, 0x45, 0x85] {
                let mut d = vec![a, v, 3];
                d.extend_from_slice(&hostile);
                frames(&d);
                let mut framed = vec![a, v | 0x80];
                framed.extend_from_slice(&(4 + hostile.len() as u32).to_be_bytes());
                framed.extend_from_slice(&[0, 0, 0, 1]);
                framed.extend_from_slice(&hostile);
                frames(&framed);
            }
        }
    }

    /// The OAuth entry point survives what issue 28 item 3 found, and plain garbage.
    #[test]
    fn oauth_token_survives_hostile_lifetimes() {
        for data in [
            &br#"{"access_token":"t","expires_in":"inf"}"#[..],
            br#"{"access_token":"t","expires_in":1e300}"#,
            br#"{"access_token":"t","expires_in":1e19}"#,
            br#"{"sub":"x","exp":1e300}"#,
            br#"{"sub":"x","exp":1e19}"#,
            br#"{"sub":"x","exp":-1e300}"#,
            b"1e300",
            b"\xff\x00",
            b"",
        ] {
            oauth_token(data);
        }
    }

    /// Runs `entry` over every input of fuzz target `target` (committed seeds, and any local
    /// corpus and crash artifacts): a regression on a known input fails the normal suite, on
    /// stable, without a fuzz run.
    fn over_inputs(target: &str, entry: fn(&[u8])) {
        use strait_testkit::fuzz;
        assert!(
            !fuzz::seeds(target).unwrap().is_empty(),
            "no seeds in fuzz/seeds/{target}"
        );
        for (path, data) in fuzz::inputs(target).unwrap() {
            let run = std::panic::catch_unwind(|| entry(&data));
            assert!(run.is_ok(), "{target} panicked on {}", path.display());
        }
    }

    #[test]
    fn response_frames_corpus() {
        over_inputs("response_frames", frames);
    }

    #[test]
    fn oauth_token_corpus() {
        over_inputs("oauth_token", oauth_token);
    }
}
