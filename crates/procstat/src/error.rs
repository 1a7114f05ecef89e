use std::path::PathBuf;

/// What went wrong while reading `/proc`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProcStatError {
    /// The process does not exist (it never did, or it has exited and been reaped).
    #[error("process {pid} does not exist (never started, or already exited)")]
    NoSuchProcess {
        /// The process id.
        pid: u32,
    },
    /// No socket in the LISTEN state is bound to the port (in this network namespace).
    #[error("no process is listening on TCP port {port}")]
    NotListening {
        /// The TCP port.
        port: u16,
    },
    /// A socket listens on the port, but no visible process holds it: the owner's
    /// `/proc/PID/fd` could not be read.
    #[error(
        "TCP port {port} is listening, but its process is not visible: permission denied \
         reading /proc/*/fd (run as the owner of that process, or give its pid)"
    )]
    PermissionDenied {
        /// The TCP port.
        port: u16,
    },
    /// A `/proc` file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A `/proc` file did not have the expected format.
    #[error("unexpected format in {}: {detail}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was expected.
        detail: String,
    },
}
