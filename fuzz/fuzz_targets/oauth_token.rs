//! OAuth token parsing: arbitrary bytes as a token endpoint's response body (and HTTP status),
//! as a token, and as a JWT's claims (`exp`), both from the endpoint and from a `file:` token.
//! Nothing may panic (issue 28: `"expires_in": "inf"` or `1e300`, or a JWT `exp` of 1e19,
//! crashed the process), and an accepted token's lifetime is within the stated bounds.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    strait_wire::fuzzing::oauth_token(data);
});
