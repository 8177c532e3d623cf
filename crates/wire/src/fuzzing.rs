//! Entry points for the fuzz targets under `fuzz/` (feature `unstable-fuzzing`; not a stable API).

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::ResponseHeader;
use kafka_protocol::protocol::Decodable;

use crate::frame;

/// Feeds `data` through the response framing exactly as the connection reader does (check, then
/// split, then decode the response header of each whole frame), with a small frame cap. Must
/// never panic, whatever the bytes.
pub fn frames(data: &[u8]) {
    const MAX: usize = 64 * 1024;
    let mut buf = BytesMut::new();
    // Arrive in two reads, as a socket may deliver them.
    let (first, second) = data.split_at(data.len() / 2);
    for chunk in [first, second] {
        buf.put_slice(chunk);
        loop {
            match frame::check(&buf, MAX) {
                Ok(Some(total)) => {
                    assert!(
                        total <= buf.len() && total >= 4,
                        "check returned an impossible length"
                    );
                    let mut f = frame::split(&mut buf, total);
                    let version = if f.len() % 2 == 0 { 0 } else { 1 };
                    let _ = ResponseHeader::decode(&mut f, version);
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
}
