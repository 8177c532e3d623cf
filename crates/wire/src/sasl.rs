//! SASL client mechanisms: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677).
//!
//! Sans-I/O: these functions build and check the tokens; the connection module carries them in
//! SaslHandshake v1 + SaslAuthenticate requests. SCRAM is implemented here on the `sha2`, `hmac`
//! and `pbkdf2` crates (no channel binding, as Kafka: `c=biws`). Like Kafka's Java client, the
//! password is used as UTF-8 without SASLprep.
//!
//! The salted password (PBKDF2, up to [`MAX_ITERATIONS`] rounds: about a second of CPU) is
//! computed on tokio's blocking pool, never on an async worker, and cached per (mechanism,
//! password, salt, iterations) in [`SaltedPasswords`], so reconnecting to brokers that share the
//! user's credentials (they all do: SCRAM credentials live in the cluster metadata) costs it
//! once per process.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, Mac};
use rand::Rng;
use sha2::{Digest, Sha256, Sha512};

use crate::config::SaslMechanism;

/// Kafka refuses fewer iterations (`ScramMechanism.minIterations`); more than this is a broker
/// asking for an unreasonable amount of CPU.
const MIN_ITERATIONS: u32 = 4096;
const MAX_ITERATIONS: u32 = 1_000_000;

/// The PLAIN initial response: `\0user\0password`.
pub(crate) fn plain_token(username: &str, password: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(username.len() + password.len() + 2);
    v.push(0);
    v.extend_from_slice(username.as_bytes());
    v.push(0);
    v.extend_from_slice(password.as_bytes());
    v
}

/// Which hash a SCRAM exchange uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    pub(crate) fn for_mechanism(m: SaslMechanism) -> Option<ScramHash> {
        match m {
            SaslMechanism::ScramSha256 => Some(ScramHash::Sha256),
            SaslMechanism::ScramSha512 => Some(ScramHash::Sha512),
            SaslMechanism::Plain | SaslMechanism::OAuthBearer | SaslMechanism::AwsMskIam => None,
        }
    }

    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => {
                let mut out = [0u8; 32];
                pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, &mut out);
                out.to_vec()
            }
            ScramHash::Sha512 => {
                let mut out = [0u8; 64];
                pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, &mut out);
                out.to_vec()
            }
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        // Hmac accepts keys of any length, so `new_from_slice` cannot fail.
        match self {
            ScramHash::Sha256 => match Hmac::<Sha256>::new_from_slice(key) {
                Ok(mut m) => {
                    m.update(data);
                    m.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            },
            ScramHash::Sha512 => match Hmac::<Sha512>::new_from_slice(key) {
                Ok(mut m) => {
                    m.update(data);
                    m.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            },
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }
}

/// The client side of one SCRAM exchange.
pub(crate) struct ScramClient {
    hash: ScramHash,
    password: String,
    client_nonce: String,
    client_first_bare: String,
}

/// The client's state after the server-first message: what it expects in server-final.
pub(crate) struct ScramFinal {
    expected_server_signature: Vec<u8>,
}

impl ScramClient {
    /// Starts an exchange with a random nonce.
    pub(crate) fn new(hash: ScramHash, username: &str, password: &str) -> ScramClient {
        let mut rng = rand::rng();
        // Printable ASCII except ',' (RFC 5802 `printable`), 32 characters.
        let nonce: String = (0..32)
            .map(|_| {
                let c = rng.random_range(0x21u8..0x7e);
                if c == b',' { '~' } else { c as char }
            })
            .collect();
        ScramClient::with_nonce(hash, username, password, nonce)
    }

    pub(crate) fn with_nonce(
        hash: ScramHash,
        username: &str,
        password: &str,
        nonce: String,
    ) -> ScramClient {
        let client_first_bare = format!("n={},r={nonce}", escape_username(username));
        ScramClient {
            hash,
            password: password.to_owned(),
            client_nonce: nonce,
            client_first_bare,
        }
    }

    /// `n,,n=user,r=nonce`.
    pub(crate) fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// Checks the server-first message and returns the client-final message. The salted
    /// password comes from [`SALTED_PASSWORDS`] (computed off the async workers on a miss).
    pub(crate) async fn client_final(
        &self,
        server_first: &[u8],
    ) -> Result<(Vec<u8>, ScramFinal), String> {
        let first = self.server_first(server_first)?;
        let salted = SALTED_PASSWORDS
            .get(self.hash, &self.password, &first.salt, first.iterations)
            .await?;
        Ok(self.finish(&first, &salted))
    }

    /// Parses and checks the server-first message.
    fn server_first(&self, server_first: &[u8]) -> Result<ServerFirst, String> {
        let server_first = std::str::from_utf8(server_first)
            .map_err(|_| "the server-first message is not UTF-8".to_owned())?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for attr in server_first.split(',') {
            match attr.split_at_checked(2) {
                Some(("r=", v)) => nonce = Some(v),
                Some(("s=", v)) => salt = Some(v),
                Some(("i=", v)) => iterations = Some(v),
                Some(("m=", _)) => {
                    return Err("the server requires an unsupported SCRAM extension".into());
                }
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(format!("malformed server-first message `{server_first}`"));
        };
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err("the server nonce does not extend the client nonce".into());
        }
        let salt = B64
            .decode(salt)
            .map_err(|_| "the server's salt is not base64".to_owned())?;
        let iterations: u32 = iterations
            .parse()
            .map_err(|_| format!("invalid iteration count `{iterations}`"))?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(format!(
                "iteration count {iterations} is outside {MIN_ITERATIONS}..={MAX_ITERATIONS}"
            ));
        }
        Ok(ServerFirst {
            text: server_first.to_owned(),
            nonce: nonce.to_owned(),
            salt,
            iterations,
        })
    }

    /// The client-final message and the expected server signature, from the salted password.
    fn finish(&self, first: &ServerFirst, salted: &[u8]) -> (Vec<u8>, ScramFinal) {
        let h = self.hash;
        let client_key = h.hmac(salted, b"Client Key");
        let stored_key = h.hash(&client_key);
        let without_proof = format!("c=biws,r={}", first.nonce);
        let auth_message = format!("{},{},{without_proof}", self.client_first_bare, first.text);
        let client_signature = h.hmac(&stored_key, auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&client_signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = h.hmac(salted, b"Server Key");
        let expected_server_signature = h.hmac(&server_key, auth_message.as_bytes());
        let msg = format!("{without_proof},p={}", B64.encode(proof));
        (
            msg.into_bytes(),
            ScramFinal {
                expected_server_signature,
            },
        )
    }
}

/// A checked server-first message.
struct ServerFirst {
    text: String,
    nonce: String,
    salt: Vec<u8>,
    iterations: u32,
}

/// How many salted passwords are kept: one per (user, cluster) a process talks to is what is
/// needed (a mirror has two clusters); a few spare for credential rotation.
const SALTED_PASSWORDS_KEPT: usize = 16;

/// The process's salted-password cache.
pub(crate) static SALTED_PASSWORDS: SaltedPasswords = SaltedPasswords::new();

/// A small cache of SCRAM salted passwords, oldest evicted first. Keyed by a SHA-256 over
/// (mechanism, password, salt, iterations) so the password itself is not kept here; the
/// values are password-equivalent for this salt and are never logged (no `Debug`).
pub(crate) struct SaltedPasswords {
    entries: Mutex<VecDeque<SaltedEntry>>,
}

/// A cache key (SHA-256 of the inputs) and the salted password.
type SaltedEntry = ([u8; 32], Arc<[u8]>);

impl SaltedPasswords {
    pub(crate) const fn new() -> SaltedPasswords {
        SaltedPasswords {
            entries: Mutex::new(VecDeque::new()),
        }
    }

    /// The salted password, from the cache or computed on the blocking pool.
    pub(crate) async fn get(
        &self,
        hash: ScramHash,
        password: &str,
        salt: &[u8],
        iterations: u32,
    ) -> Result<Arc<[u8]>, String> {
        let key = Self::key(hash, password, salt, iterations);
        let (password, salt) = (password.as_bytes().to_vec(), salt.to_vec());
        self.get_or_compute(key, move || {
            hash.salted_password(&password, &salt, iterations)
        })
        .await
    }

    fn key(hash: ScramHash, password: &str, salt: &[u8], iterations: u32) -> [u8; 32] {
        let mut d = Sha256::new();
        d.update([hash as u8]);
        // Length-prefixed, so (password, salt) pairs cannot collide by shifting bytes.
        for part in [password.as_bytes(), salt] {
            d.update((part.len() as u64).to_be_bytes());
            d.update(part);
        }
        d.update(iterations.to_be_bytes());
        d.finalize().into()
    }

    /// The cached value for `key`, else `compute` on tokio's blocking pool (it may take a
    /// second of CPU, which would stall every task on an async worker). Two connections missing
    /// at once both compute; the result is the same.
    async fn get_or_compute(
        &self,
        key: [u8; 32],
        compute: impl FnOnce() -> Vec<u8> + Send + 'static,
    ) -> Result<Arc<[u8]>, String> {
        if let Some(v) = self.lookup(&key) {
            return Ok(v);
        }
        let value: Arc<[u8]> = tokio::task::spawn_blocking(compute)
            .await
            .map_err(|e| format!("computing the SCRAM salted password failed: {e}"))?
            .into();
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if !entries.iter().any(|(k, _)| *k == key) {
            if entries.len() >= SALTED_PASSWORDS_KEPT {
                entries.pop_front();
            }
            entries.push_back((key, value.clone()));
        }
        Ok(value)
    }

    fn lookup(&self, key: &[u8; 32]) -> Option<Arc<[u8]>> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    }
}

impl ScramFinal {
    /// Verifies the server-final message (`v=signature`, or `e=error`).
    pub(crate) fn verify(&self, server_final: &[u8]) -> Result<(), String> {
        let text = std::str::from_utf8(server_final)
            .map_err(|_| "the server-final message is not UTF-8".to_owned())?;
        for attr in text.split(',') {
            if let Some(e) = attr.strip_prefix("e=") {
                return Err(format!("the broker reported `{e}`"));
            }
            if let Some(v) = attr.strip_prefix("v=") {
                let sig = B64
                    .decode(v)
                    .map_err(|_| "the server signature is not base64".to_owned())?;
                return if sig == self.expected_server_signature {
                    Ok(())
                } else {
                    Err(
                        "the broker's SCRAM signature is wrong: it does not know this user's \
                         credentials (possible impersonation)"
                            .into(),
                    )
                };
            }
        }
        Err(format!("malformed server-final message `{text}`"))
    }
}

/// RFC 5802: `=` -> `=3D`, `,` -> `=2C`.
fn escape_username(u: &str) -> String {
    u.replace('=', "=3D").replace(',', "=2C")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// RFC 7677 section 3 test vector (SCRAM-SHA-256, user "user", password "pencil").
    #[tokio::test]
    async fn rfc7677_sha256_vector() {
        let c = ScramClient::with_nonce(
            ScramHash::Sha256,
            "user",
            "pencil",
            "rOprNGfwEbeRWgbNEkqO".into(),
        );
        assert_eq!(c.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first =
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let (client_final, fin) = c.client_final(server_first).await.unwrap();
        assert_eq!(
            String::from_utf8(client_final).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        fin.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        assert!(fin.verify(b"v=AAAA").is_err());
        assert!(
            fin.verify(b"e=invalid-proof")
                .unwrap_err()
                .contains("invalid-proof")
        );
    }

    /// SCRAM-SHA-512 has no RFC vector; check the structure and that a server computing the same
    /// math (here: the client's own derivation with a fixed nonce) verifies.
    #[tokio::test]
    async fn sha512_produces_64_byte_proof() {
        let c = ScramClient::with_nonce(ScramHash::Sha512, "alice", "secret", "abc".into());
        let (msg, _) = c.client_final(b"r=abcdef,s=c2FsdA==,i=4096").await.unwrap();
        let msg = String::from_utf8(msg).unwrap();
        let proof = msg.rsplit_once(",p=").unwrap().1;
        assert_eq!(B64.decode(proof).unwrap().len(), 64);
    }

    #[tokio::test]
    async fn rejects_bad_server_first() {
        let c = ScramClient::with_nonce(ScramHash::Sha256, "u", "p", "abc".into());
        for bad in [
            &b"r=xyz,s=c2FsdA==,i=4096"[..], // nonce not extended from ours
            b"r=abc,s=c2FsdA==,i=4096",      // nonce not extended at all
            b"r=abcd,s=***,i=4096",          // salt not base64
            b"r=abcd,s=c2FsdA==,i=10",       // too few iterations
            b"r=abcd,s=c2FsdA==,i=x",        // not a number
            b"r=abcd,s=c2FsdA==",            // no iterations
            b"m=ext,r=abcd,s=c2FsdA==,i=4096",
            b"\xff",
        ] {
            assert!(
                c.client_final(bad).await.is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn username_escaping_and_plain() {
        let c = ScramClient::with_nonce(ScramHash::Sha256, "a=b,c", "p", "n".into());
        assert_eq!(c.client_first(), b"n,,n=a=3Db=2Cc,r=n");
        assert_eq!(plain_token("u", "p"), b"\0u\0p");
        let random = ScramClient::new(ScramHash::Sha256, "u", "p");
        assert_eq!(random.client_nonce.len(), 32);
        assert!(!random.client_nonce.contains(','));
    }

    /// Issue 28 item 8: PBKDF2 runs on the blocking pool (here: not on the current-thread
    /// runtime's only worker, the test's thread), once per (mechanism, password, salt,
    /// iterations).
    #[tokio::test]
    async fn salted_passwords_are_cached_and_computed_off_the_worker() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let cache = SaltedPasswords::new();
        let computed = Arc::new(AtomicUsize::new(0));
        let threads = Arc::new(Mutex::new(Vec::new()));
        let compute = |salt: &'static [u8]| {
            let (computed, threads) = (computed.clone(), threads.clone());
            move || {
                computed.fetch_add(1, Ordering::SeqCst);
                threads.lock().unwrap().push(std::thread::current().id());
                ScramHash::Sha256.salted_password(b"pencil", salt, 4096)
            }
        };
        let key = |salt: &[u8]| SaltedPasswords::key(ScramHash::Sha256, "pencil", salt, 4096);
        let a = cache
            .get_or_compute(key(b"salt"), compute(b"salt"))
            .await
            .unwrap();
        let b = cache
            .get_or_compute(key(b"salt"), compute(b"salt"))
            .await
            .unwrap();
        assert_eq!(a, b);
        assert_eq!(
            computed.load(Ordering::SeqCst),
            1,
            "the second exchange hit the cache"
        );
        cache
            .get_or_compute(key(b"other"), compute(b"other"))
            .await
            .unwrap();
        assert_eq!(
            computed.load(Ordering::SeqCst),
            2,
            "another salt is another entry"
        );
        let worker = std::thread::current().id();
        assert!(threads.lock().unwrap().iter().all(|t| *t != worker));

        // Keys separate every input; the same password with another mechanism or count misses.
        let k = SaltedPasswords::key;
        assert_ne!(
            k(ScramHash::Sha256, "p", b"s", 4096),
            k(ScramHash::Sha512, "p", b"s", 4096)
        );
        assert_ne!(
            k(ScramHash::Sha256, "p", b"s", 4096),
            k(ScramHash::Sha256, "p", b"s", 4097)
        );
        assert_ne!(
            k(ScramHash::Sha256, "ps", b"", 4096),
            k(ScramHash::Sha256, "p", b"s", 4096)
        );

        // Bounded: the oldest entry goes first.
        for i in 0..SALTED_PASSWORDS_KEPT {
            let salt = format!("s{i}").into_bytes();
            cache
                .get_or_compute(k(ScramHash::Sha256, "p", &salt, 4096), Vec::new)
                .await
                .unwrap();
        }
        assert_eq!(cache.entries.lock().unwrap().len(), SALTED_PASSWORDS_KEPT);
        assert!(cache.lookup(&key(b"salt")).is_none());
    }

    /// Through the exchange itself: the same server-first twice gives the same proof, and the
    /// global cache holds the salted password the RFC vector implies.
    #[tokio::test]
    async fn client_final_uses_the_cache() {
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let c = ScramClient::with_nonce(ScramHash::Sha256, "user", "pencil", "rOpr".into());
        let first = b"r=rOprNGfw,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let (one, _) = c.client_final(first).await.unwrap();
        let key = SaltedPasswords::key(ScramHash::Sha256, "pencil", &salt, 4096);
        let cached = SALTED_PASSWORDS.lookup(&key).unwrap();
        assert_eq!(
            &cached[..],
            &ScramHash::Sha256.salted_password(b"pencil", &salt, 4096)[..]
        );
        let (two, _) = c.client_final(first).await.unwrap();
        assert_eq!(one, two);
    }
}
