//! Structured batches for the re-encode path's memory accounting: huge record counts (declared
//! and real), every codec, lying headers, small allowances. `reencode_within` must not panic,
//! must never account more than its allowance, and the Rust heap it actually grows (a counting
//! global allocator) must stay within the allowance plus a fixed slack for the codecs' own state.
//!
//! The input drives an `Unstructured`: the record shape (key and value lengths, headers), how
//! many records (up to 2 million, mostly tiny, so sections reach tens of MB from a few bytes of
//! compressed input), the offset deltas (dense, gaps, all zero), the declared count (true or
//! arbitrary), the codec in and out, `max_message_bytes`, the decompression cap and the
//! allowance.

#![no_main]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use bytes::Bytes;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use strait_forward::reencode::{Allowance, reencode_within};
use strait_forward::{CodecError, Compression, ProducerStamp, RecordBatch, TargetPolicy};

/// Counts the live Rust heap and its peak.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn grew(by: isize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call goes to `System` unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            grew(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap beyond the allowance that is not the batch's: the codecs' contexts and tables.
const SLACK: usize = 4 << 20;

fn varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

struct Case {
    batch: Bytes,
    from_offset: i64,
    policy: TargetPolicy,
    allowance: usize,
}

fn case(u: &mut Unstructured<'_>) -> Result<Case> {
    let codec = Compression::ALL[usize::from(u.int_in_range(0u8..=4)?)];
    let key: Option<Vec<u8>> = if u.arbitrary()? {
        Some(vec![b'k'; usize::from(u.int_in_range(0u8..=8)?)])
    } else {
        None
    };
    let value: Option<Vec<u8>> = if u.arbitrary()? {
        Some(vec![b'v'; usize::from(u.int_in_range(0u8..=32)?)])
    } else {
        None
    };
    let headers = u.int_in_range(0u8..=2)?;
    let n: u32 = match u.int_in_range(0u8..=3)? {
        0 => u.int_in_range(0..=16)?,
        1 => u.int_in_range(0..=10_000)?,
        _ => u.int_in_range(0..=2_000_000)?,
    };
    let deltas = u.int_in_range(0u8..=2)?; // 0: dense, 1: gaps of one, 2: all zero
    let mut section = Vec::new();
    let mut body = Vec::new();
    for i in 0..n {
        body.clear();
        body.push(0); // attributes
        varint(&mut body, 0); // timestampDelta
        varint(
            &mut body,
            match deltas {
                0 => i64::from(i),
                1 => 2 * i64::from(i),
                _ => 0,
            },
        );
        for field in [&key, &value] {
            match field {
                Some(f) => {
                    varint(&mut body, f.len() as i64);
                    body.extend_from_slice(f);
                }
                None => varint(&mut body, -1),
            }
        }
        varint(&mut body, i64::from(headers));
        for _ in 0..headers {
            varint(&mut body, 1);
            body.push(b'h');
            varint(&mut body, -1);
        }
        varint(&mut section, body.len() as i64);
        section.extend_from_slice(&body);
    }
    // Sometimes the fuzzer's own bytes after the records (trailing garbage, or the whole section).
    let tail: &[u8] = u.arbitrary()?;
    section.extend_from_slice(tail);
    let declared: i32 = if u.arbitrary()? {
        n as i32
    } else {
        u.arbitrary()?
    };
    let last_delta: i32 = match deltas {
        0 => (n as i32).saturating_sub(1),
        1 => (2 * (n as i32)).saturating_sub(2),
        _ => 0,
    };
    let mut payload = Vec::new();
    if codec.compress(&section, None, &mut payload).is_err() {
        return Err(libfuzzer_sys::arbitrary::Error::IncorrectFormat);
    }
    drop(section);
    let mut b = Vec::with_capacity(61 + payload.len());
    b.extend_from_slice(&0i64.to_be_bytes());
    b.extend_from_slice(&((49 + payload.len()) as i32).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.push(2);
    b.extend_from_slice(&[0; 4]);
    b.extend_from_slice(&i16::from(codec.id()).to_be_bytes());
    b.extend_from_slice(&last_delta.to_be_bytes());
    b.extend_from_slice(&1_000i64.to_be_bytes());
    b.extend_from_slice(&1_000i64.to_be_bytes());
    b.extend_from_slice(&(-1i64).to_be_bytes());
    b.extend_from_slice(&(-1i16).to_be_bytes());
    b.extend_from_slice(&(-1i32).to_be_bytes());
    b.extend_from_slice(&declared.to_be_bytes());
    b.extend_from_slice(&payload);
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    let policy = TargetPolicy {
        max_message_bytes: u.int_in_range(256usize..=(2 << 20))?,
        compression: if u.arbitrary()? {
            Some(Compression::ALL[usize::from(u.int_in_range(0u8..=4)?)])
        } else {
            None
        },
        max_decompressed_bytes: u.int_in_range((1usize << 10)..=(64 << 20))?,
        ..TargetPolicy::default()
    };
    Ok(Case {
        batch: Bytes::from(b),
        from_offset: i64::from(u.int_in_range(0u8..=4)?),
        policy,
        allowance: u.int_in_range(0usize..=(32 << 20))?,
    })
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(case) = case(&mut u) else { return };
    let Ok(batch) = RecordBatch::parse(case.batch) else {
        return;
    };
    let mut allowance = Allowance::new(case.allowance);
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let result = reencode_within(
        &batch,
        case.from_offset,
        ProducerStamp::NONE,
        &case.policy,
        &mut allowance,
    );
    let grown = (PEAK.load(Ordering::Relaxed) - base).max(0) as usize;
    assert!(
        allowance.peak() <= case.allowance,
        "accounted {} of an allowance of {}",
        allowance.peak(),
        case.allowance
    );
    assert!(
        grown <= case.allowance + SLACK,
        "the heap grew by {grown} bytes within an allowance of {} ({result:?})",
        case.allowance
    );
    match result {
        Ok(out) => {
            for o in out {
                RecordBatch::parse(o.batch().as_bytes().clone()).expect("output must parse");
            }
        }
        Err(CodecError::OverAllowance { needed, allowance }) => {
            assert_eq!(allowance, case.allowance);
            assert!(needed > allowance);
        }
        Err(_) => {}
    }
});
