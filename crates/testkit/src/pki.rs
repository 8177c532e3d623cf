//! Per-cluster PKI generated with rcgen: a CA, the broker certificate, one client certificate per user, and a
//! second, untrusted CA for "wrong CA" tests. Everything is PEM; keys are unencrypted PKCS#8, which is what Kafka's
//! PEM key store (KIP-651) and rustls both read.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, date_time_ymd,
};

use crate::error::Error;

/// The CN of the broker certificate; `User:broker` is a super user.
pub(crate) const BROKER_CN: &str = "broker";
/// The CN of the admin certificate; `User:admin` is a super user.
pub(crate) const ADMIN_CN: &str = "admin";

/// Validity period of an issued certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Validity {
    /// Valid from 2020 to 2099.
    Normal,
    /// Expired: valid only during the year 2000.
    Expired,
    /// Not valid yet: valid from 2090 on.
    NotYetValid,
}

/// A certificate and its key, as PEM files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserCert {
    /// The certificate (leaf only), PEM.
    pub cert_pem: PathBuf,
    /// The private key, unencrypted PKCS#8 PEM (`BEGIN PRIVATE KEY`).
    pub key_pem: PathBuf,
    /// Key followed by certificate in one file: the form Java clients take as `ssl.keystore.type=PEM`.
    pub keystore_pem: PathBuf,
}

/// A CA the cluster does not trust, and a client certificate it signed (CN=admin, to show that a super user's
/// name from the wrong CA gets nowhere).
#[derive(Debug)]
pub struct ForeignCa {
    /// The untrusted CA certificate, PEM.
    pub ca_pem: PathBuf,
    /// A client certificate with CN=admin signed by the untrusted CA.
    pub user: UserCert,
}

/// The cluster's PKI: all files live in `<cluster dir>/pki`.
pub struct Pki {
    dir: PathBuf,
    ca_pem: PathBuf,
    ca: Issuer<'static, KeyPair>,
    broker: UserCert,
    users: BTreeMap<String, UserCert>,
    foreign: ForeignCa,
    issued: AtomicUsize,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki")
            .field("dir", &self.dir)
            .field("users", &self.users.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Pki {
    /// Generates a CA, the broker certificate (SAN IP:127.0.0.1 and DNS:localhost), an admin certificate and one
    /// client certificate per user, under `dir`.
    pub(crate) fn generate(dir: &Path, cluster: &str, users: &[String]) -> Result<Pki, Error> {
        fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        let (ca, ca_pem_text) = new_ca(&format!("Strait test CA ({cluster})"))?;
        let ca_pem = dir.join("ca.pem");
        write(&ca_pem, &ca_pem_text)?;

        let broker = issue_to(dir, &ca, BROKER_CN, BROKER_CN, true, Validity::Normal)?;
        let mut certs = BTreeMap::new();
        for name in std::iter::once(ADMIN_CN).chain(users.iter().map(String::as_str)) {
            let cert = issue_to(dir, &ca, name, name, false, Validity::Normal)?;
            certs.insert(name.to_string(), cert);
        }

        let (foreign_ca, foreign_pem_text) = new_ca("Strait untrusted CA")?;
        let foreign_ca_pem = dir.join("foreign-ca.pem");
        write(&foreign_ca_pem, &foreign_pem_text)?;
        let foreign_user = issue_to(
            dir,
            &foreign_ca,
            "foreign-admin",
            ADMIN_CN,
            false,
            Validity::Normal,
        )?;

        Ok(Pki {
            dir: dir.to_path_buf(),
            ca_pem,
            ca,
            broker,
            users: certs,
            foreign: ForeignCa {
                ca_pem: foreign_ca_pem,
                user: foreign_user,
            },
            issued: AtomicUsize::new(0),
        })
    }

    /// The CA certificate every node and client trusts.
    pub fn ca_pem(&self) -> &Path {
        &self.ca_pem
    }

    /// The certificate of `name`: "admin" (a super user) and every user given to the builder exist.
    pub fn user(&self, name: &str) -> Option<&UserCert> {
        self.users.get(name)
    }

    /// The names that have a certificate ("admin" and the builder's users).
    pub fn user_names(&self) -> Vec<&str> {
        self.users.keys().map(String::as_str).collect()
    }

    /// The broker certificate (CN=broker, a super user; also valid as a client certificate).
    pub fn broker(&self) -> &UserCert {
        &self.broker
    }

    /// Issues one more client certificate with CN=`name`, signed by the cluster CA.
    ///
    /// Each call writes new files (`issued-<n>-<name>.*`), so issuing several certificates for one name is fine.
    pub fn issue(&self, name: &str, validity: Validity) -> Result<UserCert, Error> {
        crate::cluster::check_name("certificate name", name)?;
        let n = self.issued.fetch_add(1, Ordering::Relaxed);
        issue_to(
            &self.dir,
            &self.ca,
            &format!("issued-{n}-{name}"),
            name,
            false,
            validity,
        )
    }

    /// The untrusted CA and a client certificate it signed (CN=admin).
    pub fn foreign_ca(&self) -> &ForeignCa {
        &self.foreign
    }

    /// The PKI directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn pki_err(name: &str) -> impl FnOnce(rcgen::Error) -> Error + '_ {
    move |source| Error::Pki {
        name: name.to_string(),
        source,
    }
}

fn write(path: &Path, text: &str) -> Result<(), Error> {
    fs::write(path, text).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}

fn new_ca(cn: &str) -> Result<(Issuer<'static, KeyPair>, String), Error> {
    let key = KeyPair::generate().map_err(pki_err(cn))?;
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = date_time_ymd(2020, 1, 1);
    params.not_after = date_time_ymd(2099, 12, 31);
    let cert = params.self_signed(&key).map_err(pki_err(cn))?;
    Ok((Issuer::new(params, key), cert.pem()))
}

/// Issues a leaf certificate with CN=`cn`, written as `<file_stem>.cert.pem`, `.key.pem` and `.keystore.pem`.
fn issue_to(
    dir: &Path,
    ca: &Issuer<'static, KeyPair>,
    file_stem: &str,
    cn: &str,
    server: bool,
    validity: Validity,
) -> Result<UserCert, Error> {
    let key = KeyPair::generate().map_err(pki_err(cn))?;
    let sans: Vec<String> = if server {
        vec!["127.0.0.1".to_string(), "localhost".to_string()]
    } else {
        Vec::new()
    };
    let mut params = CertificateParams::new(sans).map_err(pki_err(cn))?;
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    // Broker certs also act as clients (inter-broker and controller connections are mutual TLS).
    params.extended_key_usages = if server {
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ]
    } else {
        vec![ExtendedKeyUsagePurpose::ClientAuth]
    };
    params.use_authority_key_identifier_extension = true;
    let (not_before, not_after) = match validity {
        Validity::Normal => (date_time_ymd(2020, 1, 1), date_time_ymd(2099, 12, 31)),
        Validity::Expired => (date_time_ymd(2000, 1, 1), date_time_ymd(2001, 1, 1)),
        Validity::NotYetValid => (date_time_ymd(2090, 1, 1), date_time_ymd(2099, 12, 31)),
    };
    params.not_before = not_before;
    params.not_after = not_after;
    let cert = params.signed_by(&key, ca).map_err(pki_err(cn))?;

    let cert_pem_text = cert.pem();
    let key_pem_text = key.serialize_pem();
    let out = UserCert {
        cert_pem: dir.join(format!("{file_stem}.cert.pem")),
        key_pem: dir.join(format!("{file_stem}.key.pem")),
        keystore_pem: dir.join(format!("{file_stem}.keystore.pem")),
    };
    write(&out.cert_pem, &cert_pem_text)?;
    write(&out.key_pem, &key_pem_text)?;
    write(&out.keystore_pem, &format!("{key_pem_text}{cert_pem_text}"))?;
    Ok(out)
}
