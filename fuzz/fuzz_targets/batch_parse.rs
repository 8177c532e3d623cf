//! Feeds arbitrary bytes to the fetch walker, the batch parser, the records walker and the
//! re-encoder (`strait_forward::fuzzing::batch_parse`, which the crate's unit tests also run over
//! `fuzz/seeds/batch_parse/` and the Java-written fixtures on stable). Nothing may panic, and
//! every batch the crate produces must parse again.
//!
//! The first input byte selects how the rest is used: as fetched records as they are, or as a
//! single v2 batch whose length field and CRC are repaired first, so the fuzzer reaches the
//! records decoder and the codecs instead of stopping at the CRC check.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    strait_forward::fuzzing::batch_parse(data);
});
