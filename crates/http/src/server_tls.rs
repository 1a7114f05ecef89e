//! The TLS settings of a listener: a certificate chain and its key from PEM files, ALPN
//! `h2` then `http/1.1`. Every tool that listens with TLS (the shadow proxy's
//! `--tls-cert`/`--tls-key`, serve's `[server.tls]`) loads them here, so a certificate
//! problem reads the same everywhere and is found at start, never at the first client.
//!
//! This module only builds the configuration; accepting connections and serving them
//! stays with the tool (hyper).

use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
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
    /// Reads `cert` (PEM: the server's certificate first, then any intermediates) and
    /// `key` (PEM: PKCS#8, PKCS#1 or SEC1) and offers ALPN `h2` then `http/1.1` when
    /// `h2` is true (`http/1.1` only otherwise).
    ///
    /// # Errors
    ///
    /// [`TlsError::ServerFile`] naming the file and what is wrong with it (unreadable,
    /// no PEM block of the right kind), or [`TlsError::KeyMismatch`] when the key is not
    /// the certificate's.
    pub fn from_pem_files(cert: &Path, key: &Path, h2: bool) -> Result<ServerTls, TlsError> {
        let bad = |path: &Path, why: String| TlsError::ServerFile {
            path: path.to_path_buf(),
            why,
        };
        let cert_pem = std::fs::read(cert).map_err(|e| bad(cert, e.to_string()))?;
        let chain = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(cert, format!("not PEM: {e}")))?;
        if chain.is_empty() {
            return Err(bad(cert, "no CERTIFICATE block in it".into()));
        }
        let key_pem = std::fs::read(key).map_err(|e| bad(key, e.to_string()))?;
        let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
            bad(
                key,
                format!("no usable PRIVATE KEY block in it (PKCS#8, PKCS#1 or SEC1): {e}"),
            )
        })?;
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Handshake(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(chain, private)
            .map_err(|e| match e {
                rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
                    cert: cert.to_path_buf(),
                    key: key.to_path_buf(),
                },
                other => bad(key, other.to_string()),
            })?;
        config.alpn_protocols = if h2 {
            vec![b"h2".to_vec(), b"http/1.1".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        Ok(ServerTls {
            config: Arc::new(config),
        })
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
}
