//! Certificates made inside the tests with rcgen: a test CA and what it signed, as PEM
//! files in one temporary directory.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType, date_time_ymd,
};

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct Pair {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
}

impl Pair {
    /// nginx's `ssl_certificate` and `ssl_certificate_key` directives for this pair.
    pub fn nginx_directives(&self) -> String {
        format!(
            "ssl_certificate {}; ssl_certificate_key {};",
            self.cert.display(),
            self.key.display()
        )
    }
}

/// Everything a TLS test needs, in one temporary directory (removed when dropped).
#[derive(Debug)]
pub struct Certs {
    /// The directory holding every file below.
    pub dir: tempfile::TempDir,
    /// The test CA (PEM): what `--cacert` is given.
    pub ca: PathBuf,
    /// Another CA, then the test CA: a bundle of several certificates.
    pub bundle: PathBuf,
    /// Only the other CA: does not lead to the servers' certificates.
    pub other_ca: PathBuf,
    /// For `localhost`, `scalpel.test` and 127.0.0.1, signed by the test CA.
    pub good: Pair,
    /// As `good`, but its validity ended in 2021.
    pub expired: Pair,
    /// For `other.test` only.
    pub wrong_name: Pair,
    /// For `localhost`, self-signed (no CA knows it).
    pub self_signed: Pair,
}

fn ca(name: &str) -> (CertificateParams, KeyPair) {
    let key = KeyPair::generate().expect("a key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    (params, key)
}

fn write_pair(dir: &Path, name: &str, cert_pem: String, key: &KeyPair) -> Pair {
    let cert = dir.join(format!("{name}.crt"));
    let key_path = dir.join(format!("{name}.key"));
    std::fs::write(&cert, cert_pem).expect("certificate written");
    std::fs::write(&key_path, key.serialize_pem()).expect("key written");
    Pair {
        cert,
        key: key_path,
    }
}

/// A test CA, another CA, and the server certificates of [`Certs`], freshly made.
pub fn certs() -> Certs {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (ca_params, ca_key) = ca("Scalpel Test CA");
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA certificate");
    let issuer = Issuer::new(ca_params, ca_key);
    let (other_params, other_key) = ca("Some Other CA");
    let other_cert = other_params
        .self_signed(&other_key)
        .expect("CA certificate");

    let leaf = |names: &[&str], expired: bool| {
        let key = KeyPair::generate().expect("a key");
        let mut p = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .expect("leaf parameters");
        p.subject_alt_names
            .push(SanType::IpAddress("127.0.0.1".parse().expect("an address")));
        p.distinguished_name.push(DnType::CommonName, names[0]);
        if expired {
            p.not_before = date_time_ymd(2020, 1, 1);
            p.not_after = date_time_ymd(2021, 1, 1);
        }
        (p, key)
    };
    let signed = |name: &str, (p, k): (CertificateParams, KeyPair)| {
        let pem = p.signed_by(&k, &issuer).expect("signed").pem();
        write_pair(dir.path(), name, pem, &k)
    };
    let good = signed("good", leaf(&["localhost", "scalpel.test"], false));
    let expired = signed("expired", leaf(&["localhost", "scalpel.test"], true));
    let key = KeyPair::generate().expect("a key");
    let p = CertificateParams::new(vec!["other.test".to_string()]).expect("leaf parameters");
    let wrong_name = signed("wrong", (p, key));
    let (p, k) = leaf(&["localhost"], false);
    let self_signed = write_pair(
        dir.path(),
        "self",
        p.self_signed(&k).expect("signed").pem(),
        &k,
    );

    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, ca_cert.pem()).expect("CA written");
    let other_ca = dir.path().join("other-ca.pem");
    std::fs::write(&other_ca, other_cert.pem()).expect("CA written");
    let bundle = dir.path().join("bundle.pem");
    std::fs::write(&bundle, format!("{}{}", other_cert.pem(), ca_cert.pem()))
        .expect("bundle written");
    Certs {
        dir,
        ca,
        bundle,
        other_ca,
        good,
        expired,
        wrong_name,
        self_signed,
    }
}

/// A self-signed certificate for `localhost` with common name `cn`, written to
/// `dir/cert.pem` and `dir/key.pem`; its DER, to compare with what a handshake shows.
pub fn write_self_signed(dir: &Path, cn: &str) -> Vec<u8> {
    let key = KeyPair::generate().expect("a key");
    let mut params =
        CertificateParams::new(vec!["localhost".to_string()]).expect("certificate parameters");
    params.distinguished_name.push(DnType::CommonName, cn);
    let cert = params.self_signed(&key).expect("signed");
    std::fs::write(dir.join("cert.pem"), cert.pem()).expect("certificate written");
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).expect("key written");
    cert.der().to_vec()
}
