//! `strait::run::memory::trim` gives freed heap pages back: 128 MiB allocated in 1 KiB pieces, all
//! but every 64th freed (so the heap's top stays in use and malloc has nothing to trim by
//! itself), then one trim must lower the resident set by most of what was freed.
//!
//! Its own test binary: one thread allocating, RSS read from /proc/self/statm.
#![allow(clippy::unwrap_used)]

const PIECE: usize = 1024;
const PIECES: usize = 128 * 1024;

fn rss_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn a_trim_returns_the_freed_pages_in_the_middle_of_the_heap() {
    let mut pieces: Vec<Vec<u8>> = (0..PIECES).map(|i| vec![i as u8; PIECE]).collect();
    let full = rss_bytes();
    // Keep every 64th piece (and the last): 64 KiB holes, none at the top of the heap.
    let mut i = 0;
    pieces.retain(|_| {
        i += 1;
        i % 64 == 0 || i == PIECES
    });
    std::hint::black_box(&pieces);
    let freed = rss_bytes();
    if !strait::run::memory::trim() {
        eprintln!("this allocator has no trim: nothing to check");
        return;
    }
    let trimmed = rss_bytes();
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    eprintln!(
        "RSS: {:.1} MiB full, {:.1} MiB after freeing, {:.1} MiB after the trim",
        mib(full),
        mib(freed),
        mib(trimmed)
    );
    // Without the trim glibc keeps nearly all of it.
    assert!(
        freed > full - full / 4,
        "glibc returned the memory by itself ({full} -> {freed}): this test no longer sees \
         fragmentation"
    );
    let returned = freed.saturating_sub(trimmed);
    assert!(
        returned > (PIECES * PIECE) / 2,
        "the trim returned {returned} of {} bytes freed",
        PIECES * PIECE
    );
    assert_eq!(pieces.len(), PIECES / 64);
}
