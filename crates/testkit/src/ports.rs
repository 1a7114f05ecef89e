//! Free loopback ports: one-off ephemeral ones, and ranges claimed across processes.

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Mutex;

/// A free loopback port (bound, read, released: the server binds it next).
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// `n` distinct free loopback ports (all held while they are chosen, then released).
pub fn free_ports(n: usize) -> Vec<u16> {
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().expect("a bound address").port())
        .collect()
}

/// A base port with `count` free ports above it (bind-probed), random so parallel tests
/// and other users of the machine do not collide. Below Linux's ephemeral range (32768 and
/// up): a port probed free now must still be free when a replacement worker binds it
/// seconds later, and outgoing connections (the tests' clients, a balancer's pool) take
/// their local ports from the ephemeral range — one landed on a reload's spare port once.
///
/// A range is never handed out twice in one test process: a bind probe cannot see a range
/// given to another app of the same config (or a parallel test) whose processes have not
/// bound it yet, and two random ranges overlapped once (a config refused as invalid). Nor
/// to two test processes at once (several worktrees' runs of the tests on one machine):
/// each port is claimed with a lock file held until the process ends ([`claim_port`]),
/// since a range's spare port stays unbound between a worker and its successor.
pub fn free_base(count: u16) -> u16 {
    let candidates = std::iter::repeat_with(|| 20_000 + (rand::random::<u16>() % 12_000));
    free_base_from(count, candidates.take(200))
        .unwrap_or_else(|| panic!("no free port range of {count}"))
}

/// [`free_base`] over the given candidate bases; `None` when none is free.
pub fn free_base_from(count: u16, candidates: impl IntoIterator<Item = u16>) -> Option<u16> {
    static GIVEN: Mutex<Vec<(u16, u16)>> = Mutex::new(Vec::new());
    // The lock files of the claimed ports, open (so held) for the life of the process.
    static CLAIMED: Mutex<Vec<std::fs::File>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for base in candidates {
        let end = base + count; // exclusive
        if given.iter().any(|&(b, e)| base < e && b < end) {
            continue;
        }
        let mut claims = Vec::new();
        let all_claimed = (base..end).all(|p| match claim_port(p) {
            Claim::Held(f) => {
                claims.push(f);
                true
            }
            Claim::Unavailable => true,
            Claim::Taken => false,
        });
        if all_claimed && (base..end).all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok()) {
            given.push((base, end));
            CLAIMED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend(claims);
            return Some(base);
        }
        // Dropping `claims` releases them.
    }
    None
}

/// What [`claim_port`] got.
#[derive(Debug)]
pub enum Claim {
    /// This process holds the port's lock (while the file stays open).
    Held(std::fs::File),
    /// Another process holds it.
    Taken,
    /// No lock could be made (the directory is not writable): the bind probe alone decides.
    Unavailable,
}

/// The machine-wide lock directory of the test ports.
pub fn port_lock_dir() -> PathBuf {
    std::env::temp_dir().join("scalpel-test-ports")
}

/// Claims `port` for this process with an exclusive `flock` on its lock file, which the
/// kernel releases when the file is closed or the process ends, however it ends.
pub fn claim_port(port: u16) -> Claim {
    let dir = port_lock_dir();
    let file = std::fs::create_dir_all(&dir).and_then(|()| {
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join(port.to_string()))
    });
    let Ok(file) = file else {
        return Claim::Unavailable;
    };
    match file.try_lock() {
        Ok(()) => Claim::Held(file),
        Err(std::fs::TryLockError::WouldBlock) => Claim::Taken,
        Err(std::fs::TryLockError::Error(_)) => Claim::Unavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KillOnDrop;
    use std::time::{Duration, Instant};

    /// Several test processes on one machine (other worktrees' runs of the tests at the
    /// same time, the load of a shared 2-core machine): a port one of them claimed is never
    /// handed to another, even while nothing is bound to it. A range's spare port (a
    /// reload's next port, a successor's) is unbound between two incarnations, and a bind
    /// probe of another process took it then; the reload after that failed on "port in use".
    #[test]
    fn a_port_claimed_by_another_test_process_is_not_handed_out() {
        // A port this process was never given and nobody holds, claimed here, then handed
        // straight to another process (it waits for the lock), so that no third process (a
        // concurrent run of these tests) can take it in between.
        let (port, mine) = (0..1000)
            .map(|_| 20_000 + rand::random::<u16>() % 12_000)
            .filter(|&p| TcpListener::bind(("127.0.0.1", p)).is_ok())
            .find_map(|p| match claim_port(p) {
                Claim::Held(f) => Some((p, f)),
                _ => None,
            })
            .expect("a free port");
        let path = port_lock_dir().join(port.to_string());
        // `-o`: flock alone holds the lock, not the `sleep` it runs, so killing it releases it.
        let other = KillOnDrop(
            std::process::Command::new("flock")
                .arg("-o")
                .arg(&path)
                .args(["sleep", "120"])
                .spawn()
                .expect("flock (util-linux) runs"),
        );
        drop(mine);
        let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
        let held_by_other = || {
            // /proc/locks: "1: FLOCK  ADVISORY  WRITE PID MAJ:MIN:INODE 0 EOF".
            std::fs::read_to_string("/proc/locks")
                .unwrap_or_default()
                .lines()
                .any(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    f.get(1) == Some(&"FLOCK")
                        && f.get(4) == Some(&other.id().to_string().as_str())
                        && f.get(5).is_some_and(|d| d.ends_with(&format!(":{inode}")))
                })
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !held_by_other() {
            assert!(Instant::now() < deadline, "flock never took the lock");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            free_base_from(1, [port]),
            None,
            "port {port} handed out while another process claims it"
        );
        // Free again once that process is gone.
        drop(other);
        assert_eq!(free_base_from(1, [port]), Some(port));
    }

    #[test]
    fn free_ports_are_distinct_and_bindable() {
        let ports = free_ports(4);
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 4, "{ports:?}");
        for p in ports {
            TcpListener::bind(("127.0.0.1", p)).unwrap_or_else(|e| panic!("port {p}: {e}"));
        }
    }
}
