//! The TLS settings of a listener: a certificate chain and its key from PEM files, the
//! `ring` provider, TLS 1.2 and 1.3, ALPN `h2` then `http/1.1`. Every tool that listens
//! with TLS loads its files here: the shadow proxy's `--tls-cert`/`--tls-key` through
//! [`ServerTls::from_pem_files`], serve's `[server.tls]` and `[server.admin_tls]` through
//! [`load_certified_key`] and [`server_config`] (its own resolver swaps the loaded key
//! whole on reload). So a certificate problem reads the same everywhere and is found at
//! start (or at a reload), never at the first client.
//!
//! This module only loads files and builds the configuration; accepting connections and
//! serving them stays with the tool (hyper), and so does when to reload.

use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ParsedCertificate, ResolvesServerCert};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use tokio_rustls::TlsAcceptor;

use crate::error::TlsError;
use crate::tls::provider;

/// A listener's TLS configuration, built once from PEM files; cheap to clone.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<ServerConfig>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("alpn", &self.config.alpn_protocols)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads `cert` and `key` with [`load_certified_key`] and offers ALPN `h2` then
    /// `http/1.1` when `h2` is true (`http/1.1` only otherwise).
    ///
    /// # Errors
    ///
    /// The first problem [`load_certified_key`] finds (the certificate file's before the
    /// key file's).
    pub fn from_pem_files(cert: &Path, key: &Path, h2: bool) -> Result<ServerTls, TlsError> {
        let certified = load_certified_key(cert, key).map_err(|mut all| all.remove(0))?;
        let config = server_config(Arc::new(SingleCertAndKey::from(certified)), h2)?;
        Ok(ServerTls { config })
    }

    /// An acceptor for incoming connections: `acceptor().accept(tcp).await`.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(Arc::clone(&self.config))
    }

    /// The rustls configuration.
    pub fn config(&self) -> &Arc<ServerConfig> {
        &self.config
    }
}

/// Reads `cert` (PEM: the server's certificate first, then any intermediates) and `key`
/// (PEM: PKCS#8, PKCS#1 or SEC1) into a certificate chain and its signing key.
///
/// # Errors
///
/// Every problem found, at least one: both files are read even when the first is bad,
/// so a user sees all at once. [`TlsError::ServerFile`] names the file and what is wrong
/// with it (unreadable, not PEM, no PEM block of the right kind, a certificate that does
/// not parse, a key the provider cannot sign with); [`TlsError::KeyMismatch`] when the
/// key is not the certificate's.
pub fn load_certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, Vec<TlsError>> {
    let chain = read_chain(cert);
    let private = read_key(key);
    let (chain, private) = match (chain, private) {
        (Ok(c), Ok(k)) => (c, k),
        (c, k) => return Err([c.err(), k.err()].into_iter().flatten().collect()),
    };
    let signing = provider()
        .key_provider
        .load_private_key(private)
        .map_err(|e| {
            vec![bad(
                key,
                format!("not a key the ring provider can sign with: {e}"),
            )]
        })?;
    let certified = CertifiedKey::new(chain, signing);
    match certified.keys_match() {
        // A key that cannot tell its public half is not proof of a mismatch (rustls's
        // own `with_single_cert` accepts it too).
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(certified)
        }
        Err(rustls::Error::InconsistentKeys(_)) => Err(vec![TlsError::KeyMismatch {
            cert: cert.to_path_buf(),
            key: key.to_path_buf(),
        }]),
        Err(other) => Err(vec![bad(cert, other.to_string())]),
    }
}

/// A listener's configuration: the `ring` provider, TLS 1.2 and 1.3, no client
/// certificates, the certificate `resolver` picks for each handshake, and ALPN `h2` then
/// `http/1.1` when `h2` is true (`http/1.1` only otherwise).
///
/// # Errors
///
/// [`TlsError::Handshake`] if the provider cannot do the default protocol versions
/// (not with `ring`; kept an error rather than a panic).
pub fn server_config(
    resolver: Arc<dyn ResolvesServerCert>,
    h2: bool,
) -> Result<Arc<ServerConfig>, TlsError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Handshake(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = if h2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(Arc::new(config))
}

fn bad(path: &Path, why: String) -> TlsError {
    TlsError::ServerFile {
        path: path.to_path_buf(),
        why,
    }
}

fn read_chain(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = std::fs::read(path).map_err(|e| bad(path, e.to_string()))?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(path, format!("not PEM: {e}")))?;
    let Some(first) = chain.first() else {
        return Err(bad(path, "no CERTIFICATE block in it".into()));
    };
    // The end-entity certificate must parse, or no client could use it; said here so
    // the certificate file is named even when the key file is bad too.
    ParsedCertificate::try_from(first)
        .map_err(|e| bad(path, format!("its first certificate does not parse: {e}")))?;
    Ok(chain)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = std::fs::read(path).map_err(|e| bad(path, e.to_string()))?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        bad(
            path,
            format!("no usable PRIVATE KEY block in it (PKCS#8, PKCS#1 or SEC1): {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let (c, k) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }

    #[test]
    fn server_files_that_cannot_be_used_say_which_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair(dir.path(), "a");
        let tls = ServerTls::from_pem_files(&cert, &key, true).unwrap();
        assert_eq!(
            tls.config().alpn_protocols,
            [b"h2".to_vec(), b"http/1.1".to_vec()]
        );
        let missing = dir.path().join("missing.pem");
        let e = ServerTls::from_pem_files(&missing, &key, true)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing.pem") && e.starts_with("cannot use"),
            "{e}"
        );
        let e = ServerTls::from_pem_files(&key, &key, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no CERTIFICATE block"), "{e}");
        let e = ServerTls::from_pem_files(&cert, &cert, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("PRIVATE KEY"), "{e}");
        let (_, other_key) = pair(dir.path(), "b");
        let e = ServerTls::from_pem_files(&cert, &other_key, false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("does not belong to"), "{e}");
    }

    /// Both files are read even when the first is bad (serve prints every problem), and
    /// a CERTIFICATE block that is not a certificate is found before any handshake.
    #[test]
    fn every_problem_of_both_files_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = pair(dir.path(), "a");
        let missing = dir.path().join("missing.pem");
        let all = load_certified_key(&missing, &cert).unwrap_err();
        assert_eq!(all.len(), 2, "{all:?}");
        assert!(all[0].to_string().contains("missing.pem"), "{all:?}");
        assert!(all[1].to_string().contains("PRIVATE KEY"), "{all:?}");
        let junk = dir.path().join("junk.crt");
        std::fs::write(
            &junk,
            "-----BEGIN CERTIFICATE-----\nAAECAwQF\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = ServerTls::from_pem_files(&junk, &key, true)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("cannot use") && e.contains("junk.crt") && e.contains("does not parse"),
            "{e}"
        );
        let tls = ServerTls::from_pem_files(&cert, &key, false).unwrap();
        assert_eq!(tls.config().alpn_protocols, [b"http/1.1".to_vec()]);
    }
}
