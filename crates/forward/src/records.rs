//! Zero-allocation reading (and writing) of the records inside an uncompressed v2 records section.
//!
//! Record layout (`DefaultRecord`): length varint, attributes int8, timestampDelta varlong,
//! offsetDelta varint, key (varint length, -1 = null), value (varint length, -1 = null),
//! header count varint, then per header a key (varint length, raw bytes) and a value (varint
//! length, -1 = null). Varints are zigzag-encoded like Protocol Buffers' `sint32`/`sint64`.
//!
//! [`Records`] walks a section and checks everything Kafka's record iterator checks: every
//! record's length matches its contents, the number of records equals the declared count and no
//! bytes remain afterwards. It never panics and never allocates; each [`RecordView`] borrows from
//! the section. Headers keep their order and duplicate keys; header keys are raw bytes (Java
//! writes UTF-8, but nothing here requires it).

use crate::error::{CodecError, Result};

/// Walks the records of an uncompressed records section, validating as it goes.
///
/// Yields `Ok(record)` for each of the declared records, then either ends or yields one final
/// error (count mismatch, trailing bytes, malformed record). After an error it yields nothing.
///
/// ```
/// use strait_forward::records::Records;
/// // One record: length 8, attributes 0, timestampDelta 0, offsetDelta 0, key null,
/// // value "hi", no headers.
/// let section = [16, 0, 0, 0, 1, 4, b'h', b'i', 0];
/// let records: Vec<_> = Records::new(&section, 1).collect::<Result<_, _>>()?;
/// assert_eq!(records[0].value(), Some(&b"hi"[..]));
/// assert_eq!(records[0].key(), None);
/// # Ok::<(), strait_forward::CodecError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Records<'a> {
    section: &'a [u8],
    pos: usize,
    declared: i32,
    index: usize,
    done: bool,
}

impl<'a> Records<'a> {
    /// A walker over `section` that expects exactly `declared_count` records.
    pub fn new(section: &'a [u8], declared_count: i32) -> Self {
        Records {
            section,
            pos: 0,
            declared: declared_count,
            index: 0,
            done: false,
        }
    }

    /// The record count the walker expects (the batch header's recordsCount).
    pub fn declared_count(&self) -> i32 {
        self.declared
    }

    /// Walks the remaining records, returning how many there were, or the first error.
    pub fn validate(self) -> Result<usize> {
        let mut n = 0;
        for record in self {
            record?;
            n += 1;
        }
        Ok(n)
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<RecordView<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let rest = &self.section[self.pos.min(self.section.len())..];
        if usize::try_from(self.declared).is_ok_and(|d| self.index == d) {
            self.done = true;
            return (!rest.is_empty()).then_some(Err(CodecError::TrailingRecordBytes {
                count: self.index,
                extra: rest.len(),
            }));
        }
        if rest.is_empty() || self.declared < 0 {
            self.done = true;
            return Some(Err(CodecError::RecordCountMismatch {
                declared: self.declared,
                found: self.index,
            }));
        }
        match RecordView::parse(rest) {
            Ok(record) => {
                self.pos += record.encoded.len();
                self.index += 1;
                Some(Ok(record))
            }
            Err(reason) => {
                self.done = true;
                Some(Err(CodecError::MalformedRecord {
                    index: self.index,
                    reason,
                }))
            }
        }
    }
}

/// One validated record, borrowed from its records section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView<'a> {
    encoded: &'a [u8],
    attributes: i8,
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: &'a [u8],
    header_count: i32,
}

impl<'a> RecordView<'a> {
    /// Parses the record at the start of `buf`. The error is a static description for
    /// [`CodecError::MalformedRecord`].
    fn parse(buf: &'a [u8]) -> std::result::Result<Self, &'static str> {
        let mut r = Reader { buf, pos: 0 };
        let len = r
            .varint()
            .ok_or("the record length varint is cut short or longer than 5 bytes")?;
        let body_len = usize::try_from(len).map_err(|_| "the record length is negative")?;
        let body_end = r
            .pos
            .checked_add(body_len)
            .filter(|&end| end <= buf.len())
            .ok_or("the record length runs past the end of the records section")?;
        let mut r = Reader {
            buf: &buf[..body_end],
            pos: r.pos,
        };
        let cut = "the record ends inside its fields";
        let attributes = r.byte().ok_or(cut)? as i8;
        let timestamp_delta = r
            .varlong()
            .ok_or("the timestampDelta varlong is malformed")?;
        let offset_delta = r.varint().ok_or("the offsetDelta varint is malformed")?;
        let key = r
            .nullable_bytes()
            .ok_or("the key runs past the end of the record")?;
        let value = r
            .nullable_bytes()
            .ok_or("the value runs past the end of the record")?;
        let headers_start = r.pos;
        let header_count = r.varint().ok_or("the header count varint is malformed")?;
        if header_count < 0 {
            return Err("the header count is negative");
        }
        for _ in 0..header_count {
            let key_len = r
                .varint()
                .ok_or("a header key length varint is malformed")?;
            let key_len =
                usize::try_from(key_len).map_err(|_| "a header key length is negative")?;
            r.take(key_len)
                .ok_or("a header key runs past the end of the record")?;
            r.nullable_bytes()
                .ok_or("a header value runs past the end of the record")?;
        }
        if r.pos != body_end {
            return Err("the record length does not match the size of its fields");
        }
        Ok(RecordView {
            encoded: &buf[..body_end],
            attributes,
            timestamp_delta,
            offset_delta,
            key,
            value,
            headers: &buf[headers_start..body_end],
            header_count,
        })
    }

    /// The whole encoded record, length prefix included.
    pub fn encoded(&self) -> &'a [u8] {
        self.encoded
    }

    /// The record attributes byte (unused by Kafka; normally 0).
    pub fn attributes(&self) -> i8 {
        self.attributes
    }

    /// Timestamp relative to the batch's baseTimestamp.
    pub fn timestamp_delta(&self) -> i64 {
        self.timestamp_delta
    }

    /// Offset relative to the batch's baseOffset.
    pub fn offset_delta(&self) -> i32 {
        self.offset_delta
    }

    /// The key; `None` for a null key (`Some(&[])` is an empty, non-null key).
    pub fn key(&self) -> Option<&'a [u8]> {
        self.key
    }

    /// The value; `None` for a null value (a tombstone).
    pub fn value(&self) -> Option<&'a [u8]> {
        self.value
    }

    /// Number of headers.
    pub fn header_count(&self) -> usize {
        self.header_count as usize
    }

    /// The headers in wire order, duplicates included.
    pub fn headers(&self) -> Headers<'a> {
        let mut r = Reader {
            buf: self.headers,
            pos: 0,
        };
        // Already validated in `parse`; skip the count.
        let _ = r.varint();
        Headers {
            reader: r,
            left: self.header_count,
        }
    }

    /// The encoded headers section (count varint plus entries), copied verbatim when re-encoding.
    pub(crate) fn headers_section(&self) -> &'a [u8] {
        self.headers
    }
}

/// Iterator over a record's headers.
#[derive(Clone, Debug)]
pub struct Headers<'a> {
    reader: Reader<'a>,
    left: i32,
}

impl<'a> Iterator for Headers<'a> {
    type Item = Header<'a>;

    fn next(&mut self) -> Option<Header<'a>> {
        if self.left <= 0 {
            return None;
        }
        self.left -= 1;
        // The record was validated when it was parsed, so these reads cannot fail; stop
        // quietly if they somehow do.
        let key_len = usize::try_from(self.reader.varint()?).ok()?;
        let key = self.reader.take(key_len)?;
        let value = self.reader.nullable_bytes()?;
        Some(Header { key, value })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.left.max(0) as usize;
        (n, Some(n))
    }
}

/// One record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header<'a> {
    /// The header key, raw bytes (UTF-8 when written by Java).
    pub key: &'a [u8],
    /// The header value; `None` when null.
    pub value: Option<&'a [u8]>,
}

/// Bounds-checked cursor; every read returns `None` instead of panicking.
#[derive(Clone, Debug)]
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.buf.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    /// Length-prefixed bytes where any negative length means null (as Java reads them).
    fn nullable_bytes(&mut self) -> Option<Option<&'a [u8]>> {
        let len = self.varint()?;
        match usize::try_from(len) {
            Ok(n) => Some(Some(self.take(n)?)),
            Err(_) => Some(None),
        }
    }

    /// Zigzag varint, at most 5 bytes (Java's `ByteUtils.readVarint`).
    fn varint(&mut self) -> Option<i32> {
        let mut raw: u32 = 0;
        let mut shift = 0;
        loop {
            let b = self.byte()?;
            raw |= u32::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 28 {
                return None;
            }
        }
        Some(((raw >> 1) as i32) ^ -((raw & 1) as i32))
    }

    /// Zigzag varlong, at most 10 bytes (Java's `ByteUtils.readVarlong`).
    fn varlong(&mut self) -> Option<i64> {
        let mut raw: u64 = 0;
        let mut shift = 0;
        loop {
            let b = self.byte()?;
            raw |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
        Some(((raw >> 1) as i64) ^ -((raw & 1) as i64))
    }
}

/// Reads a zigzag varint from the start of `buf`, returning it and its encoded length.
#[cfg(test)]
pub(crate) fn read_varint(buf: &[u8]) -> Option<(i32, usize)> {
    let mut r = Reader { buf, pos: 0 };
    let v = r.varint()?;
    Some((v, r.pos))
}

/// Appends a zigzag varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, v: i32) {
    let mut raw = ((v << 1) ^ (v >> 31)) as u32;
    while raw >= 0x80 {
        out.push((raw as u8) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

/// Appends a zigzag varlong.
pub(crate) fn put_varlong(out: &mut Vec<u8>, v: i64) {
    let mut raw = ((v << 1) ^ (v >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

/// Encoded size of a zigzag varint.
pub(crate) fn varint_len(v: i32) -> usize {
    let raw = ((v << 1) ^ (v >> 31)) as u32;
    (32 - raw.leading_zeros() as usize).max(1).div_ceil(7)
}

/// Encoded size of a zigzag varlong.
pub(crate) fn varlong_len(v: i64) -> usize {
    let raw = ((v << 1) ^ (v >> 63)) as u64;
    (64 - raw.leading_zeros() as usize).max(1).div_ceil(7)
}

/// The fields of one record to encode. Keys, values and the headers section are copied verbatim.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordParts<'a> {
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// Header count varint followed by the encoded headers.
    pub headers_section: &'a [u8],
}

/// The headers section of a record with no headers.
pub(crate) const NO_HEADERS: &[u8] = &[0];

fn nullable_len(b: Option<&[u8]>) -> usize {
    match b {
        None => varint_len(-1),
        Some(b) => varint_len(b.len() as i32) + b.len(),
    }
}

fn put_nullable(out: &mut Vec<u8>, b: Option<&[u8]>) {
    match b {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i32);
            out.extend_from_slice(b);
        }
    }
}

impl RecordParts<'_> {
    /// Size of the record body (everything after the length varint).
    pub(crate) fn body_len(&self) -> usize {
        1 + varlong_len(self.timestamp_delta)
            + varint_len(self.offset_delta)
            + nullable_len(self.key)
            + nullable_len(self.value)
            + self.headers_section.len()
    }

    /// Size of the whole encoded record.
    pub(crate) fn encoded_len(&self) -> usize {
        let body = self.body_len();
        varint_len(body as i32) + body
    }

    /// Appends the encoded record.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.body_len() as i32);
        out.push(self.attributes as u8);
        put_varlong(out, self.timestamp_delta);
        put_varint(out, self.offset_delta);
        put_nullable(out, self.key);
        put_nullable(out, self.value);
        out.extend_from_slice(self.headers_section);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn encode(parts: &RecordParts<'_>) -> Vec<u8> {
        let mut v = Vec::new();
        parts.encode(&mut v);
        assert_eq!(v.len(), parts.encoded_len());
        v
    }

    fn headers_section(headers: &[(&[u8], Option<&[u8]>)]) -> Vec<u8> {
        let mut v = Vec::new();
        put_varint(&mut v, headers.len() as i32);
        for (k, val) in headers {
            put_varint(&mut v, k.len() as i32);
            v.extend_from_slice(k);
            put_nullable(&mut v, *val);
        }
        v
    }

    #[test]
    fn varints_match_java_encoding() {
        // Values and encodings from Kafka's ByteUtilsTest.
        let cases: [(i32, &[u8]); 6] = [
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (63, &[0x7e]),
            (-64, &[0x7f]),
            (i32::MIN, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        ];
        for (v, bytes) in cases {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out, bytes, "{v}");
            assert_eq!(varint_len(v), bytes.len());
            assert_eq!(read_varint(bytes), Some((v, bytes.len())));
        }
        for v in [0i64, 1, -1, i64::MAX, i64::MIN, 1 << 40, -(1 << 40)] {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            assert_eq!(out.len(), varlong_len(v));
            let mut r = Reader { buf: &out, pos: 0 };
            assert_eq!(r.varlong(), Some(v));
            assert_eq!(r.pos, out.len());
        }
        // Java reads five-byte varints and rejects a sixth byte.
        assert!(read_varint(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]).is_none());
        let mut r = Reader {
            buf: &[0xff; 11],
            pos: 0,
        };
        assert!(r.varlong().is_none());
    }

    #[test]
    fn walks_records_and_keeps_duplicate_headers_in_order() {
        let hs = headers_section(&[(b"a", Some(b"1")), (b"\xff\xfe", None), (b"a", Some(b"2"))]);
        let r1 = RecordParts {
            attributes: 0,
            timestamp_delta: -5,
            offset_delta: 0,
            key: Some(b""),
            value: None,
            headers_section: &hs,
        };
        let r2 = RecordParts {
            attributes: 0,
            timestamp_delta: 1 << 40,
            offset_delta: 7,
            key: None,
            value: Some(b"v"),
            headers_section: NO_HEADERS,
        };
        let mut section = encode(&r1);
        section.extend(encode(&r2));
        let recs: Vec<_> = Records::new(&section, 2)
            .collect::<Result<Vec<_>>>()
            .unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].key(), Some(&b""[..]));
        assert_eq!(recs[0].value(), None);
        assert_eq!(recs[0].timestamp_delta(), -5);
        let headers: Vec<_> = recs[0].headers().collect();
        assert_eq!(
            headers,
            vec![
                Header {
                    key: b"a",
                    value: Some(b"1")
                },
                Header {
                    key: b"\xff\xfe",
                    value: None
                },
                Header {
                    key: b"a",
                    value: Some(b"2")
                },
            ]
        );
        assert_eq!(recs[0].headers_section(), &hs[..]);
        assert_eq!(recs[1].offset_delta(), 7);
        assert_eq!(recs[1].timestamp_delta(), 1 << 40);
        assert_eq!(recs[1].headers().count(), 0);
        assert_eq!(recs[1].encoded(), &encode(&r2)[..]);
    }

    #[test]
    fn count_mismatch_and_trailing_bytes_are_errors() {
        let r = RecordParts {
            attributes: 0,
            timestamp_delta: 0,
            offset_delta: 0,
            key: None,
            value: Some(b"x"),
            headers_section: NO_HEADERS,
        };
        let one = encode(&r);
        let err = Records::new(&one, 2).validate().unwrap_err();
        assert!(
            matches!(
                err,
                CodecError::RecordCountMismatch {
                    declared: 2,
                    found: 1
                }
            ),
            "{err}"
        );
        let mut extra = one.clone();
        extra.push(0);
        let err = Records::new(&extra, 1).validate().unwrap_err();
        assert!(
            matches!(err, CodecError::TrailingRecordBytes { count: 1, extra: 1 }),
            "{err}"
        );
        assert_eq!(Records::new(&one, 1).validate().unwrap(), 1);
        assert_eq!(Records::new(&[], 0).validate().unwrap(), 0);
        assert!(Records::new(&one, -1).validate().is_err());
    }

    #[test]
    fn length_must_match_fields() {
        let r = RecordParts {
            attributes: 0,
            timestamp_delta: 0,
            offset_delta: 0,
            key: None,
            value: Some(b"abc"),
            headers_section: NO_HEADERS,
        };
        let good = encode(&r);
        // Claim one byte more than the body and append a pad byte: the fields end early.
        let mut longer = good.clone();
        longer[0] += 2; // zigzag: +1
        longer.push(0);
        let err = Records::new(&longer, 1).validate().unwrap_err();
        assert!(
            matches!(err, CodecError::MalformedRecord { index: 0, reason } if reason.contains("does not match")),
            "{err}"
        );
        // Claim one byte less: the value runs past the record.
        let mut shorter = good.clone();
        shorter[0] -= 2;
        assert!(Records::new(&shorter, 1).validate().is_err());
    }

    #[test]
    fn negative_header_key_length_and_count_are_rejected() {
        for hs in [vec![0x01u8], vec![0x02, 0x01]] {
            // count -1; or count 1 with key length -1
            let r = RecordParts {
                attributes: 0,
                timestamp_delta: 0,
                offset_delta: 0,
                key: None,
                value: None,
                headers_section: &hs,
            };
            let e = Records::new(&encode(&r), 1).validate().unwrap_err();
            assert!(matches!(e, CodecError::MalformedRecord { .. }), "{e}");
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let hs = headers_section(&[(b"k", Some(b"v"))]);
        let r = RecordParts {
            attributes: 0,
            timestamp_delta: 3,
            offset_delta: 0,
            key: Some(b"key"),
            value: Some(b"value"),
            headers_section: &hs,
        };
        let full = encode(&r);
        for cut in 0..full.len() {
            assert!(
                Records::new(&full[..cut], 1).validate().is_err(),
                "cut {cut}"
            );
        }
    }
}
