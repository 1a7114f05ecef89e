//! TLS for the client listener (and optionally the admin address): a certificate and
//! key loaded from PEM files, offered with ALPN `h2` and `http/1.1`, and swapped whole
//! on reload so a new handshake gets the new certificate while open connections keep
//! the one they agreed on.
//!
//! It must NOT speak TLS to the workers (they stay plain HTTP/1.1 on loopback).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// The PEM files of one TLS endpoint (`[server.tls]` or `[server.admin_tls]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Reads `files` into a certificate chain and its key. Every problem found is one line
/// (the cert file and the key file are both read, so a user sees all at once).
pub(crate) fn load(files: &TlsFiles) -> Result<CertifiedKey, Vec<String>> {
    let mut problems = Vec::new();
    let certs = read_certs(&files.cert).map_err(|e| problems.push(e)).ok();
    let key = read_key(&files.key).map_err(|e| problems.push(e)).ok();
    let (Some(certs), Some(key)) = (certs, key) else {
        return Err(problems);
    };
    let signing = match provider().key_provider.load_private_key(key) {
        Ok(k) => k,
        Err(e) => {
            return Err(vec![format!(
                "tls key {}: not a usable private key: {e}",
                files.key.display()
            )]);
        }
    };
    let certified = CertifiedKey::new(certs, signing);
    match certified.keys_match() {
        Ok(()) => Ok(certified),
        Err(e) => Err(vec![format!(
            "tls key {} does not match the certificate {}: {e}",
            files.key.display(),
            files.cert.display()
        )]),
    }
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(path)
        .map_err(|e| format!("tls cert {}: cannot read: {e}", path.display()))?;
    let mut certs = Vec::new();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        certs.push(cert.map_err(|e| format!("tls cert {}: bad PEM: {e}", path.display()))?);
    }
    if certs.is_empty() {
        return Err(format!(
            "tls cert {}: no CERTIFICATE block in the file",
            path.display()
        ));
    }
    // The end-entity certificate must parse, or no client could use it.
    if let Err(e) = rustls::server::ParsedCertificate::try_from(&certs[0]) {
        return Err(format!(
            "tls cert {}: not a valid certificate: {e:?}",
            path.display()
        ));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem =
        std::fs::read(path).map_err(|e| format!("tls key {}: cannot read: {e}", path.display()))?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        format!(
            "tls key {}: no usable PRIVATE KEY block: {e}",
            path.display()
        )
    })
}

/// The certificate a handshake gets: the last one loaded, swapped whole by [`Certs::reload`].
#[derive(Debug)]
pub(crate) struct Certs {
    files: TlsFiles,
    current: ArcSwap<CertifiedKey>,
}

impl ResolvesServerCert for Certs {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

impl Certs {
    pub(crate) fn new(files: TlsFiles) -> Result<Arc<Self>, Vec<String>> {
        let key = load(&files)?;
        Ok(Arc::new(Self {
            files,
            current: ArcSwap::from_pointee(key),
        }))
    }

    /// Reads the files again; on any problem the certificate in use stays.
    pub(crate) fn reload(&self) -> Result<(), Vec<String>> {
        let key = load(&self.files)?;
        self.current.store(Arc::new(key));
        Ok(())
    }

    /// A server config offering `alpn` (most preferred first) with these certificates.
    pub(crate) fn server_config(self: &Arc<Self>, alpn: &[&[u8]]) -> Arc<rustls::ServerConfig> {
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("the ring provider supports the default protocol versions")
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }
}
