//! The process exit codes, in one place: `strait --help` prints [`TABLE`], built from the same
//! constants the code exits with, so the two cannot drift apart.

/// Done.
pub const SUCCESS: u8 = 0;
/// A runtime error (a partition stopped, a group refused by `strait failover`, ...).
pub const RUNTIME: u8 = 1;
/// A configuration or usage error (the message names the key or option).
pub const CONFIG: u8 = 2;
/// The shutdown did not finish within `mirror.drain_timeout` plus the grace period; what was not
/// committed is re-sent by the next owner (duplicates, no loss).
pub const SHUTDOWN_DEADLINE: u8 = 3;
/// A cluster cannot be reached, or refuses the credentials (TLS, SASL).
pub const UNREACHABLE: u8 = 4;
/// `strait check`: rights the mirror needs are missing (the output prints the grants).
pub const RIGHTS_MISSING: u8 = 5;
/// A second SIGINT (Ctrl-C) during the shutdown: exit at once (128 + 2).
pub const INTERRUPTED: u8 = 128 + 2;
/// A second SIGTERM during the shutdown: exit at once (128 + 15).
pub const TERMINATED: u8 = 128 + 15;

/// Every code with its meaning, as `--help` prints it.
pub const TABLE: &[(u8, &str)] = &[
    (SUCCESS, "success"),
    (RUNTIME, "runtime error"),
    (
        CONFIG,
        "configuration or usage error (the message names the key)",
    ),
    (
        SHUTDOWN_DEADLINE,
        "the shutdown did not finish within mirror.drain_timeout + 10 s (duplicates, no loss)",
    ),
    (
        UNREACHABLE,
        "a cluster cannot be reached or refuses the credentials",
    ),
    (
        RIGHTS_MISSING,
        "strait check: rights the mirror needs are missing",
    ),
    (
        INTERRUPTED,
        "a second SIGINT during the shutdown (exit at once)",
    ),
    (
        TERMINATED,
        "a second SIGTERM during the shutdown (exit at once)",
    ),
];

/// The `Exit status:` section of `strait --help`.
pub fn help() -> String {
    let mut out = String::from("Exit status:");
    for (code, meaning) in TABLE {
        out.push_str(&format!("\n  {code:>3}  {meaning}"));
    }
    out
}
