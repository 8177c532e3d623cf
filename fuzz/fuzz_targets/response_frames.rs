//! Responses of the wire client: arbitrary bytes from a "broker", framed as the connection
//! reader frames them, decoded as the full response of every API Strait uses, at every version
//! it negotiates. Nothing may panic, and nothing may allocate more than the bytes justify
//! (libFuzzer's -malloc_limit_mb, which defaults to -rss_limit_mb, catches an allocation sized
//! by a count from the wire).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    strait_wire::fuzzing::frames(data);
});
