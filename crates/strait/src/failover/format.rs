//! MirrorMaker 2's internal record formats, byte for byte, so that MM2-era tooling
//! (`RemoteClusterUtils`, `MirrorClient`, MM2's own checkpoint task) reads what Strait writes.
//!
//! Kafka writes these with its `protocol.types` schemas: `INT16`/`INT32`/`INT64` big-endian,
//! `STRING` = `INT16` byte length (0..=32767, never null) then UTF-8. Checkpoints and
//! heartbeats put a header struct (`version INT16`) before the value; offset syncs have none.
//!
//! | record | key | value |
//! |---|---|---|
//! | [`OffsetSync`] (`mm2-offset-syncs.<target>.internal`) | topic STRING, partition INT32 | upstreamOffset INT64, offset INT64 |
//! | [`Checkpoint`] (`<source>.checkpoints.internal`) | group STRING, topic STRING, partition INT32 | version INT16 = 0, upstreamOffset INT64, offset INT64, metadata STRING |
//! | [`Heartbeat`] (`heartbeats`) | sourceClusterAlias STRING, targetClusterAlias STRING | version INT16 = 0, timestamp INT64 |
//!
//! Decoding is strict: a short buffer, a negative string length, invalid UTF-8, an unknown
//! version or bytes left over are errors (Kafka's Java reader ignores trailing bytes; Strait
//! refuses them so that a record of another format is never misread as this one).

/// The checkpoint and heartbeat value version Strait writes and reads.
pub const VERSION: i16 = 0;

/// A record that is not the format it was read as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The buffer ended inside a field.
    #[error(
        "{what}: the record ends inside field {field}; it was not written by MirrorMaker 2 or Strait (wrong topic?)"
    )]
    Truncated {
        /// Which record part (`checkpoint key`...).
        what: &'static str,
        /// The field being read.
        field: &'static str,
    },
    /// A STRING field had a negative length (null is not allowed for STRING).
    #[error("{what}: field {field} has length {len}; MM2 strings are never null")]
    BadLength {
        /// Which record part.
        what: &'static str,
        /// The field.
        field: &'static str,
        /// The length read.
        len: i16,
    },
    /// A STRING field is not UTF-8.
    #[error("{what}: field {field} is not UTF-8")]
    NotUtf8 {
        /// Which record part.
        what: &'static str,
        /// The field.
        field: &'static str,
    },
    /// A value version this code does not know.
    #[error(
        "{what}: version {version} is not supported (only 0); the record was written by a newer MirrorMaker 2"
    )]
    Version {
        /// Which record part.
        what: &'static str,
        /// The version read.
        version: i16,
    },
    /// Bytes left after the last field.
    #[error("{what}: {extra} bytes after the last field; not this record format")]
    Trailing {
        /// Which record part.
        what: &'static str,
        /// How many bytes were left.
        extra: usize,
    },
    /// A string too long for an INT16 length.
    #[error("{field} is {len} bytes long; MirrorMaker 2's format allows at most 32767")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
    },
}

/// One offset sync: the source record at `upstream_offset` of `topic`/`partition` (source topic
/// name) is at target offset `offset`; Strait writes one at every discontinuity of the mapping
/// and at the mirrored position (see `failover::map`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetSync {
    /// The source topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// Source offset.
    pub upstream_offset: i64,
    /// Target offset.
    pub offset: i64,
}

/// One checkpoint: `group` committed `upstream_offset` on the source for `topic` (as named on
/// the target) / `partition`; it resumes on the target at `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The consumer group.
    pub group: String,
    /// The topic as named on the target.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The group's committed offset on the source.
    pub upstream_offset: i64,
    /// The translated offset on the target.
    pub offset: i64,
    /// The commit's metadata on the source ("" when none).
    pub metadata: String,
}

/// What a checkpoint round knew about a partition's recovery point: Strait's extension of the
/// checkpoint's `metadata` STRING, as a prefix `strait.rpo=<source end>/<mirrored>/<ms>;`
/// before the group's own commit metadata. `source end` is the source partition's end offset
/// and `mirrored` the next source offset the target had acknowledged, both at `timestamp_ms`
/// (ms since the epoch). The source may be gone at failover time; this is what remains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rpo {
    /// The source partition's end offset when the checkpoint was written.
    pub source_end: i64,
    /// The next source offset the target had acknowledged then.
    pub mirrored: i64,
    /// When (ms since the epoch).
    pub timestamp_ms: i64,
}

const RPO_PREFIX: &str = "strait.rpo=";

impl Rpo {
    /// Source offsets not on the target at the checkpoint (an upper bound on records:
    /// transaction markers take offsets too).
    pub fn behind(&self) -> i64 {
        (self.source_end - self.mirrored).max(0)
    }

    /// `metadata` (the group's own) with this prefixed.
    pub fn wrap(&self, metadata: &str) -> String {
        format!(
            "{RPO_PREFIX}{}/{}/{};{metadata}",
            self.source_end, self.mirrored, self.timestamp_ms
        )
    }

    /// Splits a checkpoint's metadata into Strait's prefix (if any) and the group's own
    /// metadata. Anything not exactly in the prefix's form is the group's own.
    pub fn split(metadata: &str) -> (Option<Rpo>, &str) {
        let parsed = metadata.strip_prefix(RPO_PREFIX).and_then(|rest| {
            let (fields, own) = rest.split_once(';')?;
            let mut it = fields.split('/').map(str::parse::<i64>);
            let rpo = Rpo {
                source_end: it.next()?.ok()?,
                mirrored: it.next()?.ok()?,
                timestamp_ms: it.next()?.ok()?,
            };
            it.next().is_none().then_some((rpo, own))
        });
        match parsed {
            Some((rpo, own)) => (Some(rpo), own),
            None => (None, metadata),
        }
    }
}

/// One heartbeat from `source_alias` to `target_alias` at `timestamp` (ms since the epoch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// The source cluster's alias.
    pub source_alias: String,
    /// The target cluster's alias.
    pub target_alias: String,
    /// When it was sent, ms since the epoch.
    pub timestamp: i64,
}

fn put_string(out: &mut Vec<u8>, field: &'static str, s: &str) -> Result<(), FormatError> {
    let len = i16::try_from(s.len()).map_err(|_| FormatError::TooLong {
        field,
        len: s.len(),
    })?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(s.as_bytes());
    Ok(())
}

/// A cursor over one key or value.
struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, what }
    }

    fn take<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], FormatError> {
        let (head, rest) = self
            .buf
            .split_first_chunk::<N>()
            .ok_or(FormatError::Truncated {
                what: self.what,
                field,
            })?;
        self.buf = rest;
        Ok(*head)
    }

    fn i16(&mut self, field: &'static str) -> Result<i16, FormatError> {
        self.take::<2>(field).map(i16::from_be_bytes)
    }

    fn i32(&mut self, field: &'static str) -> Result<i32, FormatError> {
        self.take::<4>(field).map(i32::from_be_bytes)
    }

    fn i64(&mut self, field: &'static str) -> Result<i64, FormatError> {
        self.take::<8>(field).map(i64::from_be_bytes)
    }

    fn string(&mut self, field: &'static str) -> Result<String, FormatError> {
        let len = self.i16(field)?;
        let n = usize::try_from(len).map_err(|_| FormatError::BadLength {
            what: self.what,
            field,
            len,
        })?;
        if self.buf.len() < n {
            return Err(FormatError::Truncated {
                what: self.what,
                field,
            });
        }
        let (s, rest) = self.buf.split_at(n);
        self.buf = rest;
        String::from_utf8(s.to_vec()).map_err(|_| FormatError::NotUtf8 {
            what: self.what,
            field,
        })
    }

    fn version(&mut self) -> Result<(), FormatError> {
        match self.i16("version")? {
            VERSION => Ok(()),
            version => Err(FormatError::Version {
                what: self.what,
                version,
            }),
        }
    }

    fn end(self) -> Result<(), FormatError> {
        match self.buf.len() {
            0 => Ok(()),
            extra => Err(FormatError::Trailing {
                what: self.what,
                extra,
            }),
        }
    }
}

impl OffsetSync {
    /// The record key: topic STRING, partition INT32.
    pub fn encode_key(&self) -> Result<Vec<u8>, FormatError> {
        let mut out = Vec::with_capacity(6 + self.topic.len());
        put_string(&mut out, "topic", &self.topic)?;
        out.extend_from_slice(&self.partition.to_be_bytes());
        Ok(out)
    }

    /// The record value: upstreamOffset INT64, offset INT64.
    pub fn encode_value(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        out.extend_from_slice(&self.upstream_offset.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
        out
    }

    /// Reads a record written by [`encode_key`](Self::encode_key) /
    /// [`encode_value`](Self::encode_value) (or by MirrorMaker 2).
    pub fn decode(key: &[u8], value: &[u8]) -> Result<OffsetSync, FormatError> {
        let mut k = Reader::new(key, "offset sync key");
        let topic = k.string("topic")?;
        let partition = k.i32("partition")?;
        k.end()?;
        let mut v = Reader::new(value, "offset sync value");
        let upstream_offset = v.i64("upstreamOffset")?;
        let offset = v.i64("offset")?;
        v.end()?;
        Ok(OffsetSync {
            topic,
            partition,
            upstream_offset,
            offset,
        })
    }
}

impl Checkpoint {
    /// The record key: group STRING, topic STRING, partition INT32.
    pub fn encode_key(&self) -> Result<Vec<u8>, FormatError> {
        let mut out = Vec::with_capacity(8 + self.group.len() + self.topic.len());
        put_string(&mut out, "group", &self.group)?;
        put_string(&mut out, "topic", &self.topic)?;
        out.extend_from_slice(&self.partition.to_be_bytes());
        Ok(out)
    }

    /// The record value: version INT16 = 0, upstreamOffset INT64, offset INT64, metadata STRING.
    pub fn encode_value(&self) -> Result<Vec<u8>, FormatError> {
        let mut out = Vec::with_capacity(20 + self.metadata.len());
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&self.upstream_offset.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
        put_string(&mut out, "metadata", &self.metadata)?;
        Ok(out)
    }

    /// Reads a checkpoint record.
    pub fn decode(key: &[u8], value: &[u8]) -> Result<Checkpoint, FormatError> {
        let mut k = Reader::new(key, "checkpoint key");
        let group = k.string("group")?;
        let topic = k.string("topic")?;
        let partition = k.i32("partition")?;
        k.end()?;
        let mut v = Reader::new(value, "checkpoint value");
        v.version()?;
        let upstream_offset = v.i64("upstreamOffset")?;
        let offset = v.i64("offset")?;
        let metadata = v.string("metadata")?;
        v.end()?;
        Ok(Checkpoint {
            group,
            topic,
            partition,
            upstream_offset,
            offset,
            metadata,
        })
    }
}

impl Heartbeat {
    /// The record key: sourceClusterAlias STRING, targetClusterAlias STRING.
    pub fn encode_key(&self) -> Result<Vec<u8>, FormatError> {
        let mut out = Vec::with_capacity(4 + self.source_alias.len() + self.target_alias.len());
        put_string(&mut out, "sourceClusterAlias", &self.source_alias)?;
        put_string(&mut out, "targetClusterAlias", &self.target_alias)?;
        Ok(out)
    }

    /// The record value: version INT16 = 0, timestamp INT64.
    pub fn encode_value(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(10);
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out
    }

    /// Reads a heartbeat record.
    pub fn decode(key: &[u8], value: &[u8]) -> Result<Heartbeat, FormatError> {
        let mut k = Reader::new(key, "heartbeat key");
        let source_alias = k.string("sourceClusterAlias")?;
        let target_alias = k.string("targetClusterAlias")?;
        k.end()?;
        let mut v = Reader::new(value, "heartbeat value");
        v.version()?;
        let timestamp = v.i64("timestamp")?;
        v.end()?;
        Ok(Heartbeat {
            source_alias,
            target_alias,
            timestamp,
        })
    }
}

/// Milliseconds since the epoch: the clock of the records' timestamps and of the RPO.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    #[test]
    fn rpo_rides_in_the_metadata_before_the_groups_own() {
        use super::Rpo;
        let rpo = Rpo {
            source_end: 120,
            mirrored: 97,
            timestamp_ms: 1_700_000_000_123,
        };
        let wrapped = rpo.wrap("app;v=1/2");
        assert_eq!(wrapped, "strait.rpo=120/97/1700000000123;app;v=1/2");
        assert_eq!(Rpo::split(&wrapped), (Some(rpo), "app;v=1/2"));
        assert_eq!(rpo.behind(), 23);
        assert_eq!(Rpo::split(&rpo.wrap("")), (Some(rpo), ""));
        // Not Strait's: the whole string is the group's own.
        for own in [
            "",
            "x",
            "strait.rpo=1/2;",
            "strait.rpo=1/2/x;",
            "strait.rpo=1/2/3/4;",
        ] {
            assert_eq!(Rpo::split(own), (None, own));
        }
        // Ahead (the end was listed before the last acknowledgement) is not negative.
        let ahead = Rpo {
            source_end: 5,
            mirrored: 7,
            timestamp_ms: 0,
        };
        assert_eq!(ahead.behind(), 0);
    }

    use super::*;

    #[test]
    fn offset_sync_bytes_are_kafkas() {
        let s = OffsetSync {
            topic: "ab".into(),
            partition: 3,
            upstream_offset: 258,
            offset: -1,
        };
        let key = s.encode_key().unwrap();
        assert_eq!(key, [0, 2, b'a', b'b', 0, 0, 0, 3]);
        let value = s.encode_value();
        assert_eq!(
            value,
            [
                0, 0, 0, 0, 0, 0, 1, 2, //
                0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
            ]
        );
        assert_eq!(OffsetSync::decode(&key, &value).unwrap(), s);
    }

    #[test]
    fn checkpoint_bytes_are_kafkas() {
        let c = Checkpoint {
            group: "g".into(),
            topic: "t1".into(),
            partition: 11,
            upstream_offset: 7,
            offset: 5,
            metadata: "".into(),
        };
        let key = c.encode_key().unwrap();
        assert_eq!(key, [0, 1, b'g', 0, 2, b't', b'1', 0, 0, 0, 11]);
        let value = c.encode_value().unwrap();
        assert_eq!(
            value,
            [
                0, 0, // version 0
                0, 0, 0, 0, 0, 0, 0, 7, // upstreamOffset
                0, 0, 0, 0, 0, 0, 0, 5, // offset
                0, 0 // metadata ""
            ]
        );
        assert_eq!(Checkpoint::decode(&key, &value).unwrap(), c);
        let with_meta = Checkpoint {
            metadata: "é".into(),
            ..c
        };
        let v = with_meta.encode_value().unwrap();
        assert_eq!(&v[18..], [0, 2, 0xc3, 0xa9]);
        assert_eq!(Checkpoint::decode(&key, &v).unwrap(), with_meta);
    }

    #[test]
    fn heartbeat_bytes_are_kafkas() {
        let h = Heartbeat {
            source_alias: "A".into(),
            target_alias: "BC".into(),
            timestamp: 0x0102_0304_0506_0708,
        };
        let key = h.encode_key().unwrap();
        assert_eq!(key, [0, 1, b'A', 0, 2, b'B', b'C']);
        let value = h.encode_value();
        assert_eq!(value, [0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(Heartbeat::decode(&key, &value).unwrap(), h);
    }

    #[test]
    fn decoding_is_strict() {
        let c = Checkpoint {
            group: "g".into(),
            topic: "t".into(),
            partition: 0,
            upstream_offset: 1,
            offset: 1,
            metadata: "m".into(),
        };
        let key = c.encode_key().unwrap();
        let value = c.encode_value().unwrap();
        // Trailing bytes in the key or the value.
        let mut k2 = key.clone();
        k2.push(0);
        assert_eq!(
            Checkpoint::decode(&k2, &value),
            Err(FormatError::Trailing {
                what: "checkpoint key",
                extra: 1
            })
        );
        let mut v2 = value.clone();
        v2.extend_from_slice(&[1, 2]);
        assert!(matches!(
            Checkpoint::decode(&key, &v2),
            Err(FormatError::Trailing { extra: 2, .. })
        ));
        // Every truncation is an error, never a panic.
        for n in 0..value.len() {
            assert!(Checkpoint::decode(&key, &value[..n]).is_err(), "{n}");
        }
        for n in 0..key.len() {
            assert!(Checkpoint::decode(&key[..n], &value).is_err(), "{n}");
        }
        // Version 1 is refused, a null string is refused, invalid UTF-8 is refused.
        let mut v1 = value.clone();
        v1[1] = 1;
        assert!(matches!(
            Checkpoint::decode(&key, &v1),
            Err(FormatError::Version { version: 1, .. })
        ));
        assert!(matches!(
            OffsetSync::decode(&[0xff, 0xff, 0, 0, 0, 0], &[0; 16]),
            Err(FormatError::BadLength { len: -1, .. })
        ));
        assert!(matches!(
            OffsetSync::decode(&[0, 1, 0xff, 0, 0, 0, 0], &[0; 16]),
            Err(FormatError::NotUtf8 { .. })
        ));
        // An offset sync is not a heartbeat, and the other way round.
        let sync = OffsetSync {
            topic: "t".into(),
            partition: 0,
            upstream_offset: 0,
            offset: 0,
        };
        assert!(Heartbeat::decode(&sync.encode_key().unwrap(), &sync.encode_value()).is_err());
    }

    #[test]
    fn strings_longer_than_an_int16_are_refused() {
        let c = Checkpoint {
            group: "g".repeat(32768),
            topic: "t".into(),
            partition: 0,
            upstream_offset: 0,
            offset: 0,
            metadata: String::new(),
        };
        assert_eq!(
            c.encode_key(),
            Err(FormatError::TooLong {
                field: "group",
                len: 32768
            })
        );
        let ok = Checkpoint {
            group: "g".repeat(32767),
            ..c
        };
        assert_eq!(ok.encode_key().unwrap().len(), 2 + 32767 + 3 + 4);
    }
}
