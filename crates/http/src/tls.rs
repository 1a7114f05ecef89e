//! TLS with rustls: one client configuration per peer, built once (trust roots loaded,
//! ALPN set), and a handshake whose failures are sorted into [`TlsError`]s that name the
//! problem. The provider is `ring` (see the crate doc for why).

use std::io;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use crate::error::{Error, Phase, TlsError};
use crate::peer::{HttpVersion, Peer};

/// A peer's TLS client side: the configuration and the name to verify.
#[derive(Clone)]
pub(crate) struct TlsClient {
    connector: TlsConnector,
    name: ServerName<'static>,
    version: HttpVersion,
}

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsClient")
            .field("name", &self.name)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

pub(crate) fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// The system's trust store, read once per process (it parses a few hundred files).
fn system_roots() -> Result<Arc<RootCertStore>, TlsError> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    let roots = ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        let mut store = RootCertStore::empty();
        store.add_parsable_certificates(found.certs);
        Arc::new(store)
    });
    if roots.is_empty() {
        return Err(TlsError::NoSystemRoots);
    }
    Ok(roots.clone())
}

/// The CA certificates of a PEM file (one or several).
fn file_roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let bad = |why: String| TlsError::CaFile {
        path: path.to_path_buf(),
        why,
    };
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| bad(format!("not PEM: {e}")))?;
        store
            .add(cert)
            .map_err(|e| bad(format!("a certificate rustls refuses: {e}")))?;
    }
    if store.is_empty() {
        return Err(bad("no CERTIFICATE block in it".into()));
    }
    Ok(Arc::new(store))
}

impl TlsClient {
    /// The TLS side of `peer`, or `None` for `http://`.
    pub(crate) fn for_peer(peer: &Peer) -> Result<Option<TlsClient>, TlsError> {
        if !peer.is_tls() {
            return Ok(None);
        }
        let opts = peer.options();
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Handshake(e.to_string()))?;
        let mut config = if opts.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerification(provider())))
                .with_no_client_auth()
        } else {
            let roots = match &opts.ca_file {
                Some(path) => file_roots(path)?,
                None => system_roots()?,
            };
            builder.with_root_certificates(roots).with_no_client_auth()
        };
        config.alpn_protocols = match opts.version {
            HttpVersion::Http1 => vec![b"http/1.1".to_vec()],
            HttpVersion::Http2 => vec![b"h2".to_vec()],
            HttpVersion::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        };
        let name_text = peer.tls_name().to_string();
        let name =
            ServerName::try_from(name_text.clone()).map_err(|_| TlsError::BadName(name_text))?;
        Ok(Some(TlsClient {
            connector: TlsConnector::from(Arc::new(config)),
            name,
            version: opts.version,
        }))
    }

    /// Runs the handshake over `tcp` within `timeout`; returns the stream and how long
    /// the handshake took. With [`HttpVersion::Http2`], a server whose ALPN does not
    /// choose `h2` is [`TlsError::NoH2`].
    pub(crate) async fn handshake(
        &self,
        tcp: TcpStream,
        timeout: Duration,
    ) -> Result<(TlsStream<TcpStream>, Duration), Error> {
        let start = Instant::now();
        let stream =
            match tokio::time::timeout(timeout, self.connector.connect(self.name.clone(), tcp))
                .await
            {
                Err(_) => {
                    return Err(Error::Timeout {
                        phase: Phase::Handshake,
                        after: timeout,
                    });
                }
                Ok(Err(e)) => return Err(self.classify(e)),
                Ok(Ok(s)) => s,
            };
        let took = start.elapsed();
        if self.version == HttpVersion::Http2 {
            let chosen = stream.get_ref().1.alpn_protocol();
            if chosen != Some(b"h2") {
                return Err(TlsError::NoH2 {
                    chosen: chosen.map_or("nothing".into(), |p| {
                        String::from_utf8_lossy(p).into_owned()
                    }),
                }
                .into());
            }
        }
        Ok((stream, took))
    }

    fn name_text(&self) -> String {
        match &self.name {
            ServerName::DnsName(d) => d.as_ref().to_string(),
            ServerName::IpAddress(ip) => std::net::IpAddr::from(*ip).to_string(),
            other => format!("{other:?}"),
        }
    }

    /// Sorts a failed handshake into the problem a person can act on.
    fn classify(&self, e: io::Error) -> Error {
        let Some(tls) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) else {
            return Error::Io {
                phase: Phase::Handshake,
                source: e,
            };
        };
        let name = self.name_text();
        let problem = match tls {
            rustls::Error::InvalidCertificate(cert) => match cert {
                CertificateError::UnknownIssuer => TlsError::NotTrusted { name },
                CertificateError::NotValidForName => TlsError::NameMismatch {
                    name,
                    presented: String::new(),
                },
                CertificateError::NotValidForNameContext { presented, .. } => {
                    TlsError::NameMismatch {
                        name,
                        presented: format!(
                            " (it is for {})",
                            presented
                                .iter()
                                .map(|n| plain_name(n))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    }
                }
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    TlsError::Expired { name }
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    TlsError::NotYetValid { name }
                }
                _ => TlsError::BadCertificate {
                    name,
                    detail: tls.to_string(),
                },
            },
            rustls::Error::NoApplicationProtocol
            | rustls::Error::AlertReceived(rustls::AlertDescription::NoApplicationProtocol)
                if self.version == HttpVersion::Http2 =>
            {
                TlsError::NoH2 {
                    chosen: "nothing (no_application_protocol)".into(),
                }
            }
            other => TlsError::Handshake(other.to_string()),
        };
        Error::Tls(problem)
    }
}

/// A name as rustls presents it (`DnsName("a.test")`, `IpAddress(127.0.0.1)`), as a person
/// writes it (`a.test`, `127.0.0.1`).
fn plain_name(presented: &str) -> &str {
    for (open, close) in [
        ("DnsName(\"", "\")"),
        ("IpAddress(", ")"),
        ("URI(\"", "\")"),
    ] {
        if let Some(inner) = presented
            .strip_prefix(open)
            .and_then(|r| r.strip_suffix(close))
        {
            return inner;
        }
    }
    presented
}

/// `--insecure`: accepts any certificate, but still checks the handshake signatures (so
/// the connection is encrypted to whoever holds the key the server presented).
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presented_names_read_as_written() {
        assert_eq!(plain_name("DnsName(\"a.test\")"), "a.test");
        assert_eq!(plain_name("IpAddress(127.0.0.1)"), "127.0.0.1");
        assert_eq!(plain_name("something else"), "something else");
    }

    #[test]
    fn ca_files_that_cannot_be_used_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let e = file_roots(&missing).unwrap_err().to_string();
        assert!(
            e.starts_with("cannot use CA file") && e.contains("missing.pem"),
            "{e}"
        );
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let e = file_roots(&empty).unwrap_err().to_string();
        assert!(e.contains("no CERTIFICATE block"), "{e}");
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let e = file_roots(&garbage).unwrap_err().to_string();
        assert!(e.contains("cannot use CA file"), "{e}");
    }
}
