//! Kafka's record compression codecs, with a hard cap on decompressed output.
//!
//! The pass-through path never calls into this module: it forwards compressed payloads
//! untouched. Only re-encoding (see [`crate::reencode()`]) and legacy conversion decompress.
//!
//! | Codec  | Wire format (what Java's producer writes)                                   | Library |
//! |--------|-----------------------------------------------------------------------------|---------|
//! | gzip   | a plain gzip stream (concatenated members are accepted on decode)          | `flate2` (zlib-rs) |
//! | snappy | xerial `SnappyOutputStream` framing; raw snappy accepted on decode          | `snap::raw` + the framer below |
//! | lz4    | LZ4 frame format, 64 KiB independent blocks, no checksums                   | `lz4_flex::frame` |
//! | zstd   | a standard zstd frame                                                       | `zstd` |
//!
//! The xerial framer is written here rather than reusing `kafka_protocol::compression::Snappy`:
//! that implementation sizes its output from the lengths in the input with no limit, so a few
//! hostile bytes can make it allocate gigabytes. This one checks every block's declared length
//! against the remaining budget before allocating.

use std::fmt;
use std::io::{self, Read, Write};

use bytes::Bytes;

use crate::error::{CodecError, Result};

/// A record-batch compression codec (attribute bits 0-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// No compression (id 0).
    #[default]
    None,
    /// gzip (id 1).
    Gzip,
    /// Snappy in xerial framing (id 2).
    Snappy,
    /// LZ4 frame format (id 3).
    Lz4,
    /// Zstandard (id 4; needs Produce v7+ on the target).
    Zstd,
}

impl Compression {
    /// All codecs, in id order.
    pub const ALL: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    /// The codec for a wire id (attribute bits 0-2).
    pub fn from_id(id: u8) -> Result<Self> {
        match id {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            id => Err(CodecError::UnknownCompression { id }),
        }
    }

    /// The wire id (attribute bits 0-2).
    pub fn id(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
        }
    }

    /// Kafka's name for the codec (`compression.type` values; "none" for no compression).
    /// Stable: usable as a metrics label.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// Decompresses `input` (a batch's records section), producing at most `max_output` bytes.
    ///
    /// For [`Compression::None`] the input is returned as is (no copy). Fails with
    /// [`CodecError::DecompressedTooLarge`] as soon as the output would exceed `max_output`, before
    /// allocating beyond it.
    pub fn decompress(self, input: Bytes, max_output: usize) -> Result<Bytes> {
        let out = match self {
            Compression::None => {
                if input.len() > max_output {
                    return Err(CodecError::DecompressedTooLarge {
                        codec: self,
                        limit: max_output,
                    });
                }
                return Ok(input);
            }
            Compression::Gzip => read_capped(
                self,
                flate2::read::MultiGzDecoder::new(&input[..]),
                max_output,
            )?,
            Compression::Snappy => xerial::decompress(&input, max_output)?,
            Compression::Lz4 => read_capped(
                self,
                lz4_flex::frame::FrameDecoder::new(&input[..]),
                max_output,
            )?,
            Compression::Zstd => {
                let decoder =
                    zstd::stream::read::Decoder::with_buffer(&input[..]).map_err(|source| {
                        CodecError::Decompress {
                            codec: self,
                            source,
                        }
                    })?;
                read_capped(self, decoder, max_output)?
            }
        };
        Ok(Bytes::from(out))
    }

    /// Compresses `input` and appends the result to `out`.
    ///
    /// `level` applies to gzip (0-9, default 6, as Java) and zstd (1-22, default 3, as Java);
    /// snappy and lz4 have no levels here (lz4 always uses the fast compressor).
    pub fn compress(self, input: &[u8], level: Option<i32>, out: &mut Vec<u8>) -> Result<()> {
        let err = |source| CodecError::Compress {
            codec: self,
            source,
        };
        match self {
            Compression::None => out.extend_from_slice(input),
            Compression::Gzip => {
                let level = level.unwrap_or(6).clamp(0, 9) as u32;
                let mut enc = flate2::write::GzEncoder::new(out, flate2::Compression::new(level));
                enc.write_all(input).map_err(err)?;
                enc.finish().map_err(err)?;
            }
            Compression::Snappy => xerial::compress(input, out).map_err(err)?,
            Compression::Lz4 => {
                // Java's KafkaLZ4BlockInputStream only reads independent blocks; 64 KiB blocks
                // are what its output stream writes.
                let info = lz4_flex::frame::FrameInfo::new()
                    .block_size(lz4_flex::frame::BlockSize::Max64KB)
                    .block_mode(lz4_flex::frame::BlockMode::Independent);
                let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, out);
                enc.write_all(input).map_err(err)?;
                enc.finish().map_err(|e| err(e.into()))?;
            }
            Compression::Zstd => {
                let mut enc =
                    zstd::stream::write::Encoder::new(out, level.unwrap_or(3)).map_err(err)?;
                enc.set_pledged_src_size(Some(input.len() as u64))
                    .map_err(err)?;
                enc.write_all(input).map_err(err)?;
                enc.finish().map_err(err)?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Growth step of a decompression buffer (see [`read_capped`]).
pub(crate) const DECOMPRESS_STEP: usize = 64 << 10;

/// Heap a decompression producing `output` bytes may hold at its peak: the buffer grows by a
/// quarter at a time (never doubling), so while it moves it holds the old buffer and one a quarter
/// larger plus a step. Re-encoding reserves this from its allowance before decompressing.
pub(crate) fn decompress_peak(output: usize) -> usize {
    output
        .saturating_mul(9)
        .div_ceil(4)
        .saturating_add(2 * DECOMPRESS_STEP)
}

/// Heap a finished decompression producing `output` bytes holds (its buffer's capacity).
pub(crate) fn decompress_held(output: usize) -> usize {
    output
        .saturating_add(output / 4)
        .saturating_add(DECOMPRESS_STEP)
}

/// The largest output whose [`decompress_peak`] fits in `room` bytes.
pub(crate) fn decompress_room(room: usize) -> usize {
    room.saturating_sub(2 * DECOMPRESS_STEP) / 9 * 4
}

impl Compression {
    /// An upper bound of the compressed size of `n` bytes with any codec, framing included
    /// (snappy's worst case is `32 + n + n/6` per 32 KiB block; the others stay under it).
    pub fn compress_bound(self, n: usize) -> usize {
        match self {
            Compression::None => n,
            _ => n.saturating_add(n / 4).saturating_add(1024),
        }
    }
}

/// Reads a decoder to the end, failing once more than `max_output` bytes come out.
///
/// The buffer grows by a quarter (at least [`DECOMPRESS_STEP`]) at a time rather than doubling,
/// so its capacity stays within [`decompress_held`] and a move within [`decompress_peak`] of the
/// output: what the re-encode path accounts before decompressing.
fn read_capped(codec: Compression, mut reader: impl Read, max_output: usize) -> Result<Vec<u8>> {
    let limit = max_output.saturating_add(1);
    let mut out: Vec<u8> = Vec::new();
    let mut filled = 0usize;
    loop {
        if filled == out.len() {
            if filled >= limit {
                break;
            }
            let grow = (filled / 4).max(DECOMPRESS_STEP);
            let len = filled.saturating_add(grow).min(limit);
            out.reserve_exact(len - out.len());
            out.resize(len, 0);
        }
        match reader.read(&mut out[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(CodecError::Decompress { codec, source }),
        }
    }
    if filled > max_output {
        return Err(CodecError::DecompressedTooLarge {
            codec,
            limit: max_output,
        });
    }
    out.truncate(filled);
    Ok(out)
}

/// Snappy in the framing of xerial snappy-java's `SnappyOutputStream`, which Kafka's Java
/// producer writes: a 16-byte header (`\x82SNAPPY\0`, version 1, compatible version 1), then blocks
/// of `u32` big-endian compressed length + raw snappy data, each holding at most 32 KiB.
mod xerial {
    use super::*;

    pub(super) const MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
    const HEADER: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";
    const BLOCK: usize = 32 * 1024;

    pub(super) fn compress(input: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        out.extend_from_slice(HEADER);
        let mut enc = snap::raw::Encoder::new();
        for chunk in input.chunks(BLOCK) {
            let len_at = out.len();
            out.extend_from_slice(&[0; 4]);
            let start = out.len();
            out.resize(start + snap::raw::max_compress_len(chunk.len()), 0);
            let n = enc
                .compress(chunk, &mut out[start..])
                .map_err(io::Error::other)?;
            out.truncate(start + n);
            let n = u32::try_from(n).map_err(io::Error::other)?;
            out[len_at..start].copy_from_slice(&n.to_be_bytes());
        }
        Ok(())
    }

    pub(super) fn decompress(input: &[u8], max_output: usize) -> Result<Vec<u8>> {
        let codec = Compression::Snappy;
        let corrupt = |msg: &str| CodecError::Decompress {
            codec,
            source: io::Error::new(io::ErrorKind::InvalidData, msg.to_string()),
        };
        let too_large = || CodecError::DecompressedTooLarge {
            codec,
            limit: max_output,
        };
        let mut dec = snap::raw::Decoder::new();
        if !input.starts_with(MAGIC) || input.len() < HEADER.len() {
            // snappy-java falls back to raw snappy when the stream has no xerial header.
            let n = snap::raw::decompress_len(input)
                .map_err(|e| corrupt(&format!("raw snappy: {e}")))?;
            if n > max_output {
                return Err(too_large());
            }
            let mut out = vec![0; n];
            dec.decompress(input, &mut out)
                .map_err(|e| corrupt(&format!("raw snappy: {e}")))?;
            return Ok(out);
        }
        let mut out = Vec::new();
        let mut rest = &input[HEADER.len()..];
        while !rest.is_empty() {
            let Some((len, tail)) = rest.split_first_chunk::<4>() else {
                return Err(corrupt("xerial block length cut short"));
            };
            if len[..] == MAGIC[..4] {
                // snappy-java reads concatenated streams: a second header where a block length
                // would be.
                if tail.len() < HEADER.len() - 4 || !rest.starts_with(MAGIC) {
                    return Err(corrupt("truncated xerial header inside the stream"));
                }
                rest = &rest[HEADER.len()..];
                continue;
            }
            let len = u32::from_be_bytes(*len) as usize;
            let Some((block, tail)) = tail.split_at_checked(len) else {
                return Err(corrupt("xerial block runs past the end of the data"));
            };
            let n = snap::raw::decompress_len(block)
                .map_err(|e| corrupt(&format!("snappy block: {e}")))?;
            let start = out.len();
            if n > max_output - start {
                return Err(too_large());
            }
            if out.capacity() < start + n {
                // Grown by a quarter at a time, as `read_capped` does (never doubling).
                let want = (start + n)
                    .max(start.saturating_add((start / 4).max(DECOMPRESS_STEP)))
                    .min(max_output);
                out.reserve_exact(want - start);
            }
            out.resize(start + n, 0);
            dec.decompress(block, &mut out[start..])
                .map_err(|e| corrupt(&format!("snappy block: {e}")))?;
            rest = tail;
        }
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..20_000u32 {
            v.extend_from_slice(format!("record {i} with some repeated text\n").as_bytes());
        }
        v
    }

    #[test]
    fn round_trip_every_codec() {
        let data = sample();
        for codec in Compression::ALL {
            let mut out = Vec::new();
            codec.compress(&data, None, &mut out).unwrap();
            let back = codec.decompress(Bytes::from(out), data.len()).unwrap();
            assert_eq!(back, data, "{codec}");
        }
    }

    #[test]
    fn empty_input_round_trips() {
        for codec in Compression::ALL {
            let mut out = Vec::new();
            codec.compress(&[], None, &mut out).unwrap();
            let back = codec.decompress(Bytes::from(out), 0).unwrap();
            assert!(back.is_empty(), "{codec}");
        }
    }

    #[test]
    fn cap_is_enforced_for_every_codec() {
        // A 10 MB run of zeros compresses to almost nothing: the classic bomb shape.
        let data = vec![0u8; 10 << 20];
        for codec in Compression::ALL {
            let mut out = Vec::new();
            codec.compress(&data, None, &mut out).unwrap();
            let err = codec.decompress(Bytes::from(out), 1 << 20).unwrap_err();
            assert!(
                matches!(err, CodecError::DecompressedTooLarge { limit, .. } if limit == 1 << 20),
                "{codec}: {err}"
            );
        }
    }

    #[test]
    fn exact_cap_is_allowed() {
        let data = sample();
        for codec in Compression::ALL {
            let mut out = Vec::new();
            codec.compress(&data, None, &mut out).unwrap();
            assert!(
                codec
                    .decompress(Bytes::from(out.clone()), data.len())
                    .is_ok()
            );
            assert!(codec.decompress(Bytes::from(out), data.len() - 1).is_err());
        }
    }

    #[test]
    fn xerial_output_matches_snappy_java_layout() {
        let mut out = Vec::new();
        Compression::Snappy
            .compress(&vec![7u8; 70_000], None, &mut out)
            .unwrap();
        assert_eq!(
            &out[..16],
            b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"
        );
        // 70 000 bytes = 3 blocks of at most 32 KiB.
        let mut rest = &out[16..];
        let mut blocks = 0;
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            rest = &rest[4 + len..];
            blocks += 1;
        }
        assert_eq!(blocks, 3);
    }

    #[test]
    fn snappy_accepts_raw_and_concatenated_xerial_streams() {
        let data = sample();
        let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        assert_eq!(
            Compression::Snappy
                .decompress(Bytes::from(raw), data.len())
                .unwrap(),
            data
        );

        let mut two = Vec::new();
        Compression::Snappy
            .compress(b"first half ", None, &mut two)
            .unwrap();
        Compression::Snappy
            .compress(b"second half", None, &mut two)
            .unwrap();
        assert_eq!(
            &Compression::Snappy
                .decompress(Bytes::from(two), 100)
                .unwrap()[..],
            b"first half second half"
        );
    }

    #[test]
    fn snappy_block_claiming_huge_output_does_not_allocate_it() {
        // Header + one block whose raw-snappy preamble claims ~256 MiB.
        let mut data = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01".to_vec();
        let block = [0xff, 0xff, 0xff, 0x7f, 0x00];
        data.extend_from_slice(&(block.len() as u32).to_be_bytes());
        data.extend_from_slice(&block);
        let err = Compression::Snappy
            .decompress(Bytes::from(data), 1 << 20)
            .unwrap_err();
        assert!(
            matches!(err, CodecError::DecompressedTooLarge { .. }),
            "{err}"
        );
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            for input in [
                &b""[..],
                b"\x00",
                b"garbage garbage garbage",
                b"\x82SNAPPY\x00\x00",
            ] {
                // Some codecs accept the empty stream; none may panic.
                let _ = codec.decompress(Bytes::copy_from_slice(input), 1024);
            }
            assert!(
                codec
                    .decompress(Bytes::from_static(b"definitely not compressed"), 1024)
                    .is_err(),
                "{codec}"
            );
        }
    }

    #[test]
    fn ids_round_trip_and_unknown_ids_fail() {
        for codec in Compression::ALL {
            assert_eq!(Compression::from_id(codec.id()).unwrap(), codec);
        }
        for id in 5..8 {
            assert!(matches!(
                Compression::from_id(id),
                Err(CodecError::UnknownCompression { id: got }) if got == id
            ));
        }
    }
}
