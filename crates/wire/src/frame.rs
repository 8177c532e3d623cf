//! Kafka framing: every request and response is a 4-byte big-endian size followed by that many
//! bytes. Reading is check-then-parse (as in mini-redis): [`check`] looks at the buffered bytes
//! without allocating and says whether a whole frame is there; only then is it split off as a
//! zero-copy [`Bytes`]. The size is capped before any buffer grows to hold it.
//!
//! Writing is gather-then-write: a request frame is an [`OutFrame`], the pieces it is made of
//! (a Produce request's record batches are pieces of their own, see `produce::encode`), and the
//! writer hands the pieces of several queued frames to one vectored write ([`Gather`]), so no
//! request is copied into a write buffer on its way to the socket.

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Size of the length prefix.
pub(crate) const PREFIX: usize = 4;

/// The smallest valid response body: a 4-byte correlation id.
const MIN_RESPONSE: usize = 4;

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The announced size is larger than the cap.
    TooLarge { size: u64, max: usize },
    /// The announced size cannot hold a response header, or the bytes are not Kafka at all.
    Malformed(String),
    /// The socket failed.
    Io(std::io::Error),
    /// The peer closed the connection in the middle of a frame.
    Truncated { buffered: usize },
}

/// Checks whether `buf` starts with a whole frame. Returns the frame's total length (prefix
/// included) if it does, `None` if more bytes are needed, or an error if the size is invalid.
pub(crate) fn check(buf: &[u8], max: usize) -> Result<Option<usize>, FrameError> {
    if buf.len() < PREFIX {
        return Ok(None);
    }
    let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
    if size < 0 {
        return Err(FrameError::Malformed(format!(
            "negative frame size {size}{}",
            not_kafka_hint(buf)
        )));
    }
    let size = size as u64;
    if size > max as u64 {
        if !not_kafka_hint(buf).is_empty() {
            return Err(FrameError::Malformed(format!(
                "frame size {size} is implausible{}",
                not_kafka_hint(buf)
            )));
        }
        return Err(FrameError::TooLarge { size, max });
    }
    if (size as usize) < MIN_RESPONSE {
        return Err(FrameError::Malformed(format!(
            "frame of {size} bytes is too short for a response header"
        )));
    }
    let total = PREFIX + size as usize;
    Ok((buf.len() >= total).then_some(total))
}

/// A TLS record where Kafka bytes were expected means the listener speaks TLS.
fn not_kafka_hint(buf: &[u8]) -> &'static str {
    if buf.len() >= 3 && matches!(buf[0], 0x15 | 0x16) && buf[1] == 0x03 && buf[2] <= 0x04 {
        " (the broker answered with TLS; set security.protocol=SSL or SASL_SSL for this listener)"
    } else {
        ""
    }
}

/// Splits the frame of `total` bytes (as returned by [`check`]) off the front of `buf`, without
/// the length prefix. Zero-copy: the result shares `buf`'s allocation.
pub(crate) fn split(buf: &mut BytesMut, total: usize) -> Bytes {
    let mut frame = buf.split_to(total);
    frame.advance(PREFIX);
    frame.freeze()
}

/// Reads one frame from `rd`, buffering in `buf`. `Ok(None)` on a clean end of stream (no
/// partial frame buffered).
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut BytesMut,
    max: usize,
) -> Result<Option<Bytes>, FrameError> {
    loop {
        if let Some(total) = check(buf, max)? {
            return Ok(Some(split(buf, total)));
        }
        // Reserve what the announced frame still needs (already capped by `check`), so a large
        // fetch response is read in few syscalls; at least 8 KiB otherwise.
        let want = if buf.len() >= PREFIX {
            let size = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
            (PREFIX + size - buf.len()).max(1)
        } else {
            8 * 1024
        };
        buf.reserve(want.max(8 * 1024));
        let n = rd.read_buf(buf).await.map_err(FrameError::Io)?;
        if n == 0 {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(FrameError::Truncated {
                    buffered: buf.len(),
                })
            };
        }
    }
}

/// An outgoing frame (length prefix included): one buffer, or pieces written in order without
/// being joined.
#[derive(Debug)]
pub(crate) enum OutFrame {
    /// The whole frame in one buffer (every request but Produce).
    Whole(Bytes),
    /// The frame as consecutive pieces (Produce: encoded fields, then each batch as it is).
    Pieces(Vec<Bytes>),
}

impl OutFrame {
    /// Bytes in the frame.
    pub(crate) fn len(&self) -> usize {
        match self {
            OutFrame::Whole(b) => b.len(),
            OutFrame::Pieces(p) => p.iter().map(Bytes::len).sum(),
        }
    }

    /// The frame's bytes joined (tests and the setup handshake; never on the data path).
    #[cfg(test)]
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        match self {
            OutFrame::Whole(b) => b.to_vec(),
            OutFrame::Pieces(p) => p.iter().flat_map(|b| b.iter().copied()).collect(),
        }
    }
}

/// At most this many slices per vectored write (Linux's IOV_MAX is 1024); the rest goes in the
/// next write.
pub(crate) const MAX_SLICES: usize = 64;

/// The pieces of the frames the writer has taken from its queue and not yet written, in order.
/// Sans-IO: [`slices`](Self::slices) says what to write next, [`advance`](Self::advance) what
/// the socket took.
#[derive(Debug, Default)]
pub(crate) struct Gather {
    pieces: VecDeque<Bytes>,
}

impl Gather {
    /// Appends a frame's pieces (empty pieces are dropped: a vectored write may stop at one).
    pub(crate) fn push(&mut self, frame: OutFrame) {
        match frame {
            OutFrame::Whole(b) => self.push_piece(b),
            OutFrame::Pieces(p) => p.into_iter().for_each(|b| self.push_piece(b)),
        }
    }

    fn push_piece(&mut self, b: Bytes) {
        if !b.is_empty() {
            self.pieces.push_back(b);
        }
    }

    /// Whether everything was written.
    pub(crate) fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Fills `out` with the next pieces to write, in order; returns how many it filled.
    pub(crate) fn slices<'a>(&'a self, out: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for (slot, piece) in out.iter_mut().zip(&self.pieces) {
            *slot = IoSlice::new(piece);
            n += 1;
        }
        n
    }

    /// Drops the first `written` bytes (what a write accepted).
    pub(crate) fn advance(&mut self, mut written: usize) {
        while written > 0 {
            let Some(front) = self.pieces.front_mut() else {
                return;
            };
            if written < front.len() {
                front.advance(written);
                return;
            }
            written -= front.len();
            self.pieces.pop_front();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use bytes::BufMut;

    /// Partial writes at any byte leave exactly the unwritten rest, in order, and the slices
    /// point into the pieces themselves (no copy).
    #[test]
    fn gather_advances_across_pieces() {
        let a = Bytes::from_static(b"head");
        let b = Bytes::from(vec![1u8; 100]);
        let mut g = Gather::default();
        g.push(OutFrame::Pieces(vec![a.clone(), Bytes::new(), b.clone()]));
        g.push(OutFrame::Whole(Bytes::from_static(b"tail")));
        let mut buf = [IoSlice::new(&[]); MAX_SLICES];
        assert_eq!(g.slices(&mut buf), 3, "the empty piece is dropped");
        assert_eq!(
            buf[1].as_ptr(),
            b.as_ptr(),
            "a piece is written from where it is"
        );
        let mut written = Vec::new();
        for step in [3usize, 1, 50, 0, 54] {
            let mut buf = [IoSlice::new(&[]); MAX_SLICES];
            let n = g.slices(&mut buf);
            let all: Vec<u8> = buf[..n].iter().flat_map(|s| s.iter().copied()).collect();
            written.extend_from_slice(&all[..step]);
            g.advance(step);
        }
        assert!(g.is_empty());
        let mut want = b"head".to_vec();
        want.extend(vec![1u8; 100]);
        want.extend(b"tail");
        assert_eq!(written, want);
    }

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut v = (body.len() as u32).to_be_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn partial_frames_need_more_bytes() {
        let f = frame(&[0, 0, 0, 7, 1, 2, 3]);
        for cut in 0..f.len() {
            assert!(check(&f[..cut], 1024).unwrap().is_none(), "cut at {cut}");
        }
        assert_eq!(check(&f, 1024).unwrap(), Some(f.len()));
    }

    #[test]
    fn split_is_zero_copy_and_keeps_the_rest() {
        let mut buf = BytesMut::new();
        buf.put_slice(&frame(&[0, 0, 0, 1, 9]));
        buf.put_slice(&frame(&[0, 0, 0, 2]));
        buf.put_slice(&[0, 0]);
        let base = buf.as_ptr() as usize;
        let total = check(&buf, 64).unwrap().unwrap();
        let f = split(&mut buf, total);
        assert_eq!(&f[..], &[0, 0, 0, 1, 9]);
        assert_eq!(
            f.as_ptr() as usize,
            base + PREFIX,
            "frame must point into the read buffer"
        );
        let total = check(&buf, 64).unwrap().unwrap();
        assert_eq!(&split(&mut buf, total)[..], &[0, 0, 0, 2]);
        assert_eq!(check(&buf, 64).unwrap(), None);
    }

    #[test]
    fn oversized_frame_is_rejected_before_buffering() {
        let buf = (1_000_000u32).to_be_bytes();
        match check(&buf, 1024) {
            Err(FrameError::TooLarge { size, max }) => assert_eq!((size, max), (1_000_000, 1024)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn garbage_is_malformed() {
        assert!(matches!(
            check(&[0xff, 0, 0, 0], 1024),
            Err(FrameError::Malformed(_))
        ));
        assert!(matches!(
            check(&[0, 0, 0, 2, 1, 1], 1024),
            Err(FrameError::Malformed(_))
        ));
        // A TLS alert record read as a Kafka frame.
        match check(&[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x28], 100 << 20) {
            Err(FrameError::Malformed(m)) => assert!(m.contains("security.protocol=SSL"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn read_frame_across_partial_reads_and_eof() {
        let mut data = frame(&[0, 0, 0, 5, b'a', b'b']);
        data.extend(frame(&[0, 0, 0, 6]));
        let (mut client, mut server) = tokio::io::duplex(3); // tiny pipe: forces partial reads
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            server.write_all(&data).await.unwrap();
            server.write_all(&[0, 0, 0, 9, 1]).await.unwrap(); // a truncated third frame
        });
        let mut buf = BytesMut::new();
        let a = read_frame(&mut client, &mut buf, 1024)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&a[..], &[0, 0, 0, 5, b'a', b'b']);
        let b = read_frame(&mut client, &mut buf, 1024)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&b[..], &[0, 0, 0, 6]);
        // The writer finishes (and drops its end) only once the reader drains the pipe.
        match read_frame(&mut client, &mut buf, 1024).await {
            Err(FrameError::Truncated { buffered }) => assert_eq!(buffered, 5),
            other => panic!("{other:?}"),
        }
        writer.await.unwrap();
    }

    #[tokio::test]
    async fn clean_eof_is_none() {
        let (mut client, server) = tokio::io::duplex(16);
        drop(server);
        let mut buf = BytesMut::new();
        assert!(
            read_frame(&mut client, &mut buf, 1024)
                .await
                .unwrap()
                .is_none()
        );
    }

    proptest::proptest! {
        #[test]
        fn any_split_point_yields_the_same_frames(
            bodies in proptest::collection::vec(proptest::collection::vec(0u8..=255, 4..64), 1..6),
            cut in 0usize..400,
        ) {
            let mut wire = Vec::new();
            for b in &bodies { wire.extend(frame(b)); }
            let cut = cut.min(wire.len());
            let mut buf = BytesMut::new();
            let mut out = Vec::new();
            for chunk in [&wire[..cut], &wire[cut..]] {
                buf.extend_from_slice(chunk);
                while let Some(total) = check(&buf, 1024).unwrap() {
                    out.push(split(&mut buf, total).to_vec());
                }
            }
            proptest::prop_assert_eq!(out, bodies);
            proptest::prop_assert!(buf.is_empty());
        }
    }
}
