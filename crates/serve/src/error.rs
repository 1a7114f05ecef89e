//! What can go wrong starting or running the server, and reloading it.

use std::net::SocketAddr;

use crate::config::ConfigError;

/// What went wrong starting or running the server. The text of each names its cause
/// (so the causes are not repeated as `source`s: a chain printer would show them twice).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The listen or admin address could not be bound.
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        error: std::io::Error,
    },
    /// A program or working directory of the config is missing
    /// ([`crate::Config::check_programs`]).
    #[error("{0}")]
    Config(ConfigError),
    /// A mirrored route's store could not be opened.
    #[error("mirror store: {0}")]
    MirrorStore(scalpel_shadow::ShadowError),
    /// A data-plane or mirror thread could not be started.
    #[error("cannot start the balancer's threads: {0}")]
    Threads(std::io::Error),
    /// The Node preload's private file could not be written.
    #[error("cannot write the Node preload's file: {0}")]
    Preload(std::io::Error),
    /// A TLS certificate or key could not be used (`[server.tls]`, `[server.admin_tls]`).
    #[error("tls: {}", .0.join("; "))]
    Tls(Vec<String>),
    /// A reload did not replace every worker (the old ones of those keep serving).
    #[error("reload incomplete: {}", .0.join("; "))]
    Reload(Vec<String>),
    /// A reload was refused before anything changed: the new config asks for what
    /// cannot be done live, or an app it adds did not start. The running config stays.
    #[error("reload refused: {0}")]
    Refused(String),
}
