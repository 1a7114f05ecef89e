//! Joins a client connection and a worker connection after a protocol switch (a
//! WebSocket's `101 Switching Protocols`): bytes are copied both ways as they come, a
//! side's end of stream is passed on as a half close, and a tunnel with no bytes either
//! way for the idle time-out is closed (a client that vanished without a FIN must not
//! hold a worker connection for ever).

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// How a tunnel ended, with the bytes copied each way.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TunnelEnd {
    pub(crate) to_worker: u64,
    pub(crate) to_client: u64,
    /// Closed by the idle time-out rather than by both sides.
    pub(crate) idle: bool,
}

/// Copies between `client` and `worker` until both have closed their sending side, an
/// error, or `idle` passes without a byte. `early` (bytes of the new protocol that came
/// with the worker's 101) goes to the client first.
pub(crate) async fn join<C, W>(
    client: C,
    worker: W,
    early: &[u8],
    idle: Duration,
) -> io::Result<TunnelEnd>
where
    C: AsyncRead + AsyncWrite + Unpin,
    W: AsyncRead + AsyncWrite + Unpin,
{
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut wr, mut ww) = tokio::io::split(worker);
    let mut end = TunnelEnd {
        to_worker: 0,
        to_client: 0,
        idle: false,
    };
    if !early.is_empty() {
        cw.write_all(early).await?;
        end.to_client += early.len() as u64;
    }
    let mut up = vec![0u8; 16 * 1024];
    let mut down = vec![0u8; 16 * 1024];
    let (mut client_open, mut worker_open) = (true, true);
    let deadline = tokio::time::sleep(idle);
    tokio::pin!(deadline);
    while client_open || worker_open {
        tokio::select! {
            n = cr.read(&mut up), if client_open => {
                let n = n?;
                if n == 0 {
                    client_open = false;
                    ww.shutdown().await?;
                } else {
                    ww.write_all(&up[..n]).await?;
                    end.to_worker += n as u64;
                }
            }
            n = wr.read(&mut down), if worker_open => {
                let n = n?;
                if n == 0 {
                    worker_open = false;
                    cw.shutdown().await?;
                } else {
                    cw.write_all(&down[..n]).await?;
                    end.to_client += n as u64;
                }
            }
            _ = &mut deadline => {
                end.idle = true;
                break;
            }
        }
        deadline.as_mut().reset(Instant::now() + idle);
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes cross both ways, early bytes first; one side's close reaches the other as
    /// EOF while the other direction still works; the tunnel ends when both are closed.
    #[tokio::test]
    async fn bytes_cross_both_ways_and_half_closes_pass_on() {
        let (client, mut client_peer) = tokio::io::duplex(64);
        let (worker, mut worker_peer) = tokio::io::duplex(64);
        let joined = tokio::spawn(join(client, worker, b"early:", Duration::from_secs(10)));
        let mut buf = [0u8; 64];
        client_peer.read_exact(&mut buf[..6]).await.unwrap();
        assert_eq!(&buf[..6], b"early:");
        client_peer.write_all(b"ping").await.unwrap();
        worker_peer.read_exact(&mut buf[..4]).await.unwrap();
        assert_eq!(&buf[..4], b"ping");
        // The client is done sending: the worker sees EOF, and can still answer.
        client_peer.shutdown().await.unwrap();
        assert_eq!(worker_peer.read(&mut buf).await.unwrap(), 0);
        worker_peer.write_all(b"pong").await.unwrap();
        client_peer.read_exact(&mut buf[..4]).await.unwrap();
        assert_eq!(&buf[..4], b"pong");
        worker_peer.shutdown().await.unwrap();
        assert_eq!(client_peer.read(&mut buf).await.unwrap(), 0);
        let end = joined.await.unwrap().unwrap();
        assert_eq!(
            end,
            TunnelEnd {
                to_worker: 4,
                to_client: 10,
                idle: false
            }
        );
    }

    /// Silence both ways for the idle time-out ends the tunnel; traffic keeps it open.
    /// Real time (tokio's paused clock needs its `test-util` feature, which would rebuild
    /// tokio and everything above it a second time for `cargo test`): a byte every second
    /// for six seconds keeps a 4 s idle time-out from firing, 3 s of margin per gap.
    #[tokio::test]
    async fn an_idle_tunnel_is_closed() {
        let (client, mut client_peer) = tokio::io::duplex(64);
        let (worker, mut worker_peer) = tokio::io::duplex(64);
        let joined = tokio::spawn(join(client, worker, b"", Duration::from_secs(4)));
        let mut buf = [0u8; 8];
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            client_peer.write_all(b"x").await.unwrap();
            worker_peer.read_exact(&mut buf[..1]).await.unwrap();
        }
        assert!(
            !joined.is_finished(),
            "6 s of traffic, never 4 s of silence"
        );
        let end = joined.await.unwrap().unwrap();
        assert!(end.idle);
        assert_eq!(end.to_worker, 6);
        // Both peers see the tunnel gone.
        assert_eq!(worker_peer.read(&mut buf).await.unwrap(), 0);
        assert_eq!(client_peer.read(&mut buf).await.unwrap(), 0);
    }
}
