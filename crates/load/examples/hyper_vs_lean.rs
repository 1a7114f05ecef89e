//! Measures the load hot path's HTTP/1.1 client against hyper's `client::conn::http1`, the
//! same closed loop around both: `THREADS` OS threads, each a current-thread tokio runtime
//! with its share of `CONNS` keep-alive connections, every response read to its end and
//! its latency recorded in a per-thread HdrHistogram. Prints requests completed inside the
//! window per second. Used by `scripts/bench-load.sh` (docs/load.md, Benchmarks).
//!
//! ```text
//! hyper_vs_lean lean|hyper http://127.0.0.1:8080/ CONNS THREADS DURATION
//! ```
//!
//! `lean` runs the product path (`scalpel_load::run`, closed model); `hyper` runs the loop
//! below. Not part of the CLI.

use std::process::ExitCode;
use std::rc::Rc;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use scalpel_load::{FixedRequest, Model, Plan, StepLimit, Target};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [client, url, conns, threads, duration] = args.as_slice() else {
        eprintln!("usage: hyper_vs_lean lean|hyper URL CONNS THREADS DURATION");
        return ExitCode::from(2);
    };
    let (Ok(conns), Ok(threads), Ok(duration)) = (
        conns.parse::<u32>(),
        threads.parse::<u32>(),
        scalpel_units::parse_duration(duration),
    ) else {
        eprintln!("hyper_vs_lean: bad CONNS, THREADS or DURATION");
        return ExitCode::from(2);
    };
    let Some((authority, path)) = url.strip_prefix("http://").map(|r| {
        r.split_once('/')
            .map_or((r, "/".to_string()), |(a, p)| (a, format!("/{p}")))
    }) else {
        eprintln!("hyper_vs_lean: expected http://HOST:PORT/PATH");
        return ExitCode::from(2);
    };
    let rps = match client.as_str() {
        "lean" => lean(authority, &path, conns, threads, duration),
        "hyper" => hyper_loop(authority, &path, conns, threads, duration),
        _ => Err("the client is `lean` or `hyper`".to_string()),
    };
    match rps {
        Ok(rps) => {
            println!("{rps:.0}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hyper_vs_lean: {e}");
            ExitCode::FAILURE
        }
    }
}

fn lean(authority: &str, path: &str, conns: u32, threads: u32, d: Duration) -> Result<f64, String> {
    let plan = Plan {
        model: Model::Closed,
        limit: StepLimit::Duration(d),
        connections: conns,
        max_in_flight: conns,
        threads,
        connect_timeout: Duration::from_secs(2),
        timeout: Duration::from_secs(10),
        slo: None,
        rounds: 1,
        request_label: format!("GET {path}"),
        shard: scalpel_load::Shard::WHOLE,
        start_at: None,
    };
    let source = Arc::new(FixedRequest::new("GET", path));
    let target =
        Target::new("lean", &format!("http://{authority}"), source).map_err(|e| e.to_string())?;
    let result = scalpel_load::run(&plan, vec![target], &mut |_| {}).map_err(|e| e.to_string())?;
    Ok(result.targets[0].steps[0].achieved_rps)
}

fn hyper_loop(
    authority: &str,
    path: &str,
    conns: u32,
    threads: u32,
    d: Duration,
) -> Result<f64, String> {
    let addr: std::net::SocketAddr = authority
        .parse()
        .map_err(|_| "HOST:PORT must be an IP address and port")?;
    let threads = threads.max(1);
    // Threads connect, meet here, then start the clock together.
    let barrier = Arc::new(Barrier::new(threads as usize + 1));
    let handles: Vec<_> = (0..threads)
        .map(|w| {
            let barrier = barrier.clone();
            let path = path.to_string();
            let authority = authority.to_string();
            let n = conns / threads + u32::from(w < conns % threads);
            std::thread::spawn(
                move || -> Result<(u64, hdrhistogram::Histogram<u64>), String> {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| e.to_string())?;
                    let local = tokio::task::LocalSet::new();
                    local.block_on(&rt, async move {
                        let mut senders = Vec::new();
                        let connected: Result<(), String> = async {
                            for _ in 0..n {
                                let stream = tokio::net::TcpStream::connect(addr)
                                    .await
                                    .map_err(|e| e.to_string())?;
                                let _ = stream.set_nodelay(true);
                                let (sender, conn) =
                                    hyper::client::conn::http1::handshake(TokioIo::new(stream))
                                        .await
                                        .map_err(|e| e.to_string())?;
                                tokio::task::spawn_local(conn);
                                senders.push(sender);
                            }
                            Ok(())
                        }
                        .await;
                        barrier.wait(); // also on failure: the others must not wait forever
                        connected?;
                        let end = Instant::now() + d;
                        let tally = Rc::new(std::cell::RefCell::new((
                            0u64,
                            hdrhistogram::Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)
                                .map_err(|e| e.to_string())?,
                        )));
                        let tasks: Vec<_> = senders
                            .into_iter()
                            .map(|mut sender| {
                                let tally = tally.clone();
                                let path = path.clone();
                                let authority = authority.clone();
                                tokio::task::spawn_local(async move {
                                    while Instant::now() < end {
                                        let request = hyper::Request::get(path.as_str())
                                            .header(hyper::header::HOST, authority.as_str())
                                            .header(hyper::header::USER_AGENT, "scalpel")
                                            .body(Empty::<Bytes>::new())
                                            .expect("a valid request");
                                        let start = Instant::now();
                                        let Ok(response) = sender.send_request(request).await
                                        else {
                                            return;
                                        };
                                        let mut body = response.into_body();
                                        while let Some(frame) = body.frame().await {
                                            if frame.is_err() {
                                                return;
                                            }
                                        }
                                        let now = Instant::now();
                                        let mut t = tally.borrow_mut();
                                        if now <= end {
                                            t.0 += 1;
                                        }
                                        let _ = t.1.record((now - start).as_micros().max(1) as u64);
                                    }
                                })
                            })
                            .collect();
                        for t in tasks {
                            let _ = t.await;
                        }
                        let t = Rc::try_unwrap(tally)
                            .map_err(|_| "tasks still hold the tally")?
                            .into_inner();
                        Ok(t)
                    })
                },
            )
        })
        .collect();
    barrier.wait();
    let mut done = 0;
    for h in handles {
        let (n, _histogram) = h.join().map_err(|_| "a thread panicked")??;
        done += n;
    }
    Ok(done as f64 / d.as_secs_f64())
}
