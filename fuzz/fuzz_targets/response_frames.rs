//! Response framing of the wire client: arbitrary bytes from a "broker" never panic the reader.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    strait_wire::fuzzing::frames(data);
});
