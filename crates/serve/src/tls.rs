//! TLS for the client listener (and optionally the admin address): the certificate and
//! key are loaded by the connector's [`scalpel_http::server_tls`] (the loader, provider
//! and ALPN lists the shadow proxy uses too, so a bad file reads the same in both tools),
//! and swapped whole on reload so a new handshake gets the new certificate while open
//! connections keep the one they agreed on. This module only holds the swap.
//!
//! It must NOT speak TLS to the workers (they stay plain HTTP/1.1 on loopback), nor read
//! PEM files itself.

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use scalpel_http::server_tls;

/// The PEM files of one TLS endpoint (`[server.tls]` or `[server.admin_tls]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
}

/// Reads `files` into a certificate chain and its key: one line per problem found (the
/// cert file and the key file are both read, so a user sees all at once).
pub(crate) fn load(files: &TlsFiles) -> Result<CertifiedKey, Vec<String>> {
    server_tls::load_certified_key(&files.cert, &files.key)
        .map_err(|all| all.iter().map(ToString::to_string).collect())
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
}

/// One TLS endpoint in use: the certificates a reload swaps, and the config built on
/// them once at start.
#[derive(Debug)]
pub(crate) struct Endpoint {
    pub(crate) certs: Arc<Certs>,
    pub(crate) config: Arc<rustls::ServerConfig>,
}

impl Endpoint {
    /// Loads `files` and offers ALPN `h2` then `http/1.1` when `h2` is true
    /// (`http/1.1` only otherwise).
    pub(crate) fn start(files: TlsFiles, h2: bool) -> Result<Self, Vec<String>> {
        let certs = Certs::new(files)?;
        let config =
            server_tls::server_config(certs.clone(), h2).map_err(|e| vec![e.to_string()])?;
        Ok(Self { certs, config })
    }
}
