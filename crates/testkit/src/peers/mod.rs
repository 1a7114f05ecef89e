//! Real peers started on loopback for a test: nginx from a config of the test's own, Node
//! scripts, each a [`Peer`] killed when the test ends. [`hello`] and [`json`] are the two
//! sets of TLS/HTTP/2 peers several test binaries share.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::KillOnDrop;

pub mod hello;
pub mod json;

/// A peer process and the ports it listens on, killed when dropped (however the test
/// ends); its directory holds its config and logs.
#[derive(Debug)]
pub struct Peer {
    /// The ports, in the order its starter documents.
    pub ports: Vec<u16>,
    dir: PathBuf,
    // Field order: the process is killed before its directory is removed.
    child: KillOnDrop,
    _temp: Option<tempfile::TempDir>,
}

impl Peer {
    /// The peer's directory (config, logs).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of a file the peer writes in its directory (nginx's access log).
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The peer's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// The Node test app of the serve tests (`crates/serve/tests/apps/app.js`): a worker that
/// listens on `PORT` and answers `/`, `/pid`, `/healthz`, `/slow?ms=`, … (see its header).
pub fn app_js() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crates directory")
        .join("serve/tests/apps/app.js")
}

/// The installed nginx, if any.
pub fn nginx_binary() -> Option<PathBuf> {
    ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// nginx in a temporary directory of its own: see [`nginx_in`].
pub fn nginx(ports: usize, http: impl Fn(&[u16], &Path) -> String) -> Peer {
    let temp = tempfile::tempdir().expect("a temporary directory");
    let mut peer = nginx_in(temp.path(), ports, http);
    peer._temp = Some(temp);
    peer
}

/// nginx (one worker, no daemon, everything it writes in `dir`) on `ports` free loopback
/// ports: `http(ports, dir)` gives what goes inside its `http {}` block (the servers,
/// `access_log`, `log_format`). Started again on new ports when one was taken between
/// choosing and binding (five tries); panics with its error log when it cannot start, and
/// when nginx is not installed (scripts/setup.sh installs it).
pub fn nginx_in(dir: &Path, ports: usize, http: impl Fn(&[u16], &Path) -> String) -> Peer {
    let binary = nginx_binary().expect("nginx is not installed: run scripts/setup.sh");
    let d = dir.display();
    for _ in 0..5 {
        let ports = crate::free_ports(ports);
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\n\
             error_log {d}/error.log info;\npid {d}/nginx.pid;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n    client_body_temp_path {d}/body;\n    proxy_temp_path {d}/proxy;\n    \
             fastcgi_temp_path {d}/fastcgi;\n    uwsgi_temp_path {d}/uwsgi;\n    \
             scgi_temp_path {d}/scgi;\n{}\n}}\n",
            http(&ports, dir)
        );
        let conf_path = dir.join("nginx.conf");
        std::fs::write(&conf_path, conf).expect("nginx.conf written");
        let mut child = KillOnDrop(
            Command::new(&binary)
                .arg("-p")
                .arg(dir)
                .arg("-e")
                .arg(dir.join("error.log"))
                .arg("-c")
                .arg(&conf_path)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start nginx"),
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        let up = ports.iter().all(|&p| {
            loop {
                if std::net::TcpStream::connect(("127.0.0.1", p)).is_ok() {
                    break true;
                }
                if matches!(child.try_wait(), Ok(Some(_))) || Instant::now() > deadline {
                    break false;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        if up {
            return Peer {
                ports,
                dir: dir.to_path_buf(),
                child,
                _temp: None,
            };
        }
        // Most likely a port taken between choosing and binding: again, on new ports
        // (dropping `child` stops this one).
    }
    panic!(
        "nginx did not start in five tries: {}",
        std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
    );
}

/// Runs the Node ES module `script` with `args` and waits for it to print `PORT n` for
/// each server it listens with, then `READY`; the ports in the order printed.
pub fn node_script<A: AsRef<OsStr>>(script: &str, args: &[A]) -> Peer {
    let temp = tempfile::tempdir().expect("a temporary directory");
    let path = temp.path().join("server.mjs");
    std::fs::write(&path, script).expect("script written");
    let mut child = KillOnDrop(
        Command::new("node")
            .arg(&path)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("node is not installed: run scripts/setup.sh"),
    );
    let stdout = child.stdout.take().expect("stdout piped");
    let mut ports = Vec::new();
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        match line.strip_prefix("PORT ") {
            Some(p) => ports.push(p.trim().parse().expect("a port number")),
            None if line == "READY" => break,
            None => {}
        }
    }
    assert!(!ports.is_empty(), "the node server did not start");
    Peer {
        ports,
        dir: temp.path().to_path_buf(),
        child,
        _temp: Some(temp),
    }
}
