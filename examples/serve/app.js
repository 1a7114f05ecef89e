'use strict';
// A hello-world worker for examples/serve/serve.toml and direct.toml: says which worker
// and version answered. GET /healthz is the health check.
//
// It accepts either way scalpel serve hands it traffic:
//   - proxy mode (serve.toml): listens on $PORT; the balancer forwards each request;
//   - direct mode (direct.toml): serve passes its listening socket on fd 3
//     (LISTEN_FDS=1, LISTEN_PID = this process, systemd's convention); clients
//     connect to the workers with no hop. $PORT then still carries serve's health
//     checks, so a blocked event loop is noticed and the worker replaced.
const http = require('node:http');

const port = Number(process.env.PORT);
const index = process.env.WORKER_INDEX;
const version = process.env.APP_VERSION || 'current';

function handle(req, res) {
  if (req.url === '/healthz') {
    res.end('ok');
    return;
  }
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ hello: 'world', version, worker: index, pid: process.pid }));
}

const servers = [http.createServer(handle).listen(port, '127.0.0.1', () => console.log(`listening on ${port}`))];
if (process.env.LISTEN_FDS === '1' && process.env.LISTEN_PID === String(process.pid)) {
  servers.push(http.createServer(handle).listen({ fd: 3 }, () => console.log('serving fd 3')));
}

process.on('SIGTERM', () => {
  // Stop accepting, finish what was accepted, then exit.
  for (const s of servers) {
    s.close();
    s.closeIdleConnections();
  }
  setTimeout(() => process.exit(0), 2000).unref();
});
