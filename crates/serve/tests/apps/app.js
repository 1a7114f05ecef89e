'use strict';
// A small worker for scalpel-serve's tests: listens on $PORT, knows its $WORKER_INDEX.
//   GET /healthz        200 "ok"
//   GET /               {"pid","index"}
//   GET /pid            the pid as text
//   GET /block?ms=N     busy-blocks the event loop for N ms (default 10000), then answers
//   GET /slow?ms=N      answers after N ms without blocking (default 1000)
//   ANY /echo           {"method","url","headers","body"} of the request as received
//   GET /exit?code=N    exits at once with code N (a crash)
//   GET /big?kb=N       N KiB of a repeating pattern, chunked, 16 KiB per write
//   GET /stream         "first\n", then "second\n" 300 ms later (chunked)
//   GET /half?die=I     worker I sends a head (Content-Length 100) and 10 bytes, then
//                       exits; the others answer 100 bytes
//   GET /grow?mb=N      keeps N more MiB (touched, so they count in PSS), then answers
//   GET /conns          {"connections"}: how many connections this worker has accepted
//   GET /sse?ms=N&every=E  a stream of events ("data: I" every E ms, default 100)
//                       for N ms (chunked)
//   GET /headers?n=N    200 with N extra headers x-h0 .. x-hN-1
//   GET /both           a raw answer with both Content-Length and Transfer-Encoding
//                       (the socket then stays open, the request unfinished for Node)
//   GET /print?kb=N     writes N KiB to stdout without a newline, then one newline
//   Upgrade: shout      101, then every byte received comes back upper-cased, prefixed
//                       once by "worker I:" (a stand-in for a WebSocket)
// $FLOOD=N: prints N lines to stdout at start, before listening.
// Socket activation (serve's mode = "direct"): when LISTEN_FDS=1 and LISTEN_PID is this
// process, it also serves the socket on fd 3; $PORT stays for serve's health checks.
const http = require('node:http');

let connections = 0;
const kept = [];

const port = Number(process.env.PORT);
const index = process.env.WORKER_INDEX;
if (!Number.isInteger(port) || port <= 0) {
  console.error('PORT must be set');
  process.exit(2);
}

function ms(url, dflt) {
  const v = Number(url.searchParams.get('ms'));
  return Number.isFinite(v) && v >= 0 && url.searchParams.has('ms') ? v : dflt;
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://x');
  const json = (code, obj) => {
    res.writeHead(code, { 'content-type': 'application/json' });
    res.end(JSON.stringify(obj));
  };
  switch (url.pathname) {
    case '/healthz':
      res.end('ok');
      return;
    case '/':
      json(200, { pid: process.pid, index, tag: process.env.APP_TAG || null });
      return;
    case '/grow': {
      const b = Buffer.alloc(Number(url.searchParams.get('mb') || 1) * 1024 * 1024, 1);
      kept.push(b);
      json(200, { pid: process.pid, kept_mb: kept.length });
      return;
    }
    case '/conns':
      json(200, { connections });
      return;
    case '/pid':
      res.end(String(process.pid));
      return;
    case '/block': {
      const until = Date.now() + ms(url, 10000);
      while (Date.now() < until) { /* the event loop is blocked */ }
      json(200, { pid: process.pid, blocked: true });
      return;
    }
    case '/slow':
      setTimeout(() => json(200, { pid: process.pid, slow: true }), ms(url, 1000));
      return;
    case '/echo': {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => json(200, {
        method: req.method, url: req.url, headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'), pid: process.pid,
      }));
      return;
    }
    case '/big': {
      const total = Number(url.searchParams.get('kb') || 256) * 1024;
      const chunk = Buffer.alloc(16 * 1024);
      for (let i = 0; i < chunk.length; i++) chunk[i] = 97 + (i % 26);
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      let sent = 0;
      const more = () => {
        if (sent >= total) return res.end();
        const n = Math.min(chunk.length, total - sent);
        sent += n;
        res.write(chunk.subarray(0, n));
        setImmediate(more);
      };
      more();
      return;
    }
    case '/stream':
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('first\n');
      setTimeout(() => res.end('second\n'), 300);
      return;
    case '/half':
      res.writeHead(200, { 'content-length': '100' });
      if (url.searchParams.get('die') === index) {
        res.write('x'.repeat(10), () => process.exit(1));
      } else {
        res.end('y'.repeat(100));
      }
      return;
    case '/sse': {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.flushHeaders(); // the head goes out now, before the first event
      let i = 0;
      const every = Number(url.searchParams.get('every') || 100);
      const tick = setInterval(() => res.write(`data: ${i++}\n\n`), every);
      setTimeout(() => { clearInterval(tick); res.end(); }, ms(url, 3000));
      return;
    }
    case '/headers': {
      const n = Number(url.searchParams.get('n') || 200);
      for (let i = 0; i < n; i++) res.setHeader(`x-h${i}`, String(i));
      res.end('many');
      return;
    }
    case '/both':
      req.socket.write('HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n' +
        '5\r\nhello\r\n0\r\n\r\n');
      return;
    case '/garbage':
      // Not HTTP at all: what a proxy and a client must both call a protocol error.
      req.socket.write('NOT HTTP\r\n\r\n');
      return;
    case '/print': {
      const kb = Number(url.searchParams.get('kb') || 64);
      process.stdout.write('p'.repeat(kb * 1024));
      process.stdout.write('\nafter the long line\n');
      res.end('printed');
      return;
    }
    case '/exit':
      process.exit(Number(url.searchParams.get('code') || 1));
      return;
    default:
      json(404, { error: 'not found' });
  }
});
server.on('connection', () => connections++);
server.on('upgrade', (req, socket) => {
  if ((req.headers.upgrade || '').toLowerCase() !== 'shout') {
    socket.end('HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n');
    return;
  }
  socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: shout\r\nConnection: Upgrade\r\n' +
    `x-forwarded-for-seen: ${req.headers['x-forwarded-for']}\r\n\r\nworker ${index}:`);
  socket.on('data', (d) => socket.write(d.toString().toUpperCase()));
  socket.on('end', () => socket.end());
});
server.keepAliveTimeout = Number(process.env.KEEP_ALIVE_MS || 65000);
for (let i = 0; i < Number(process.env.FLOOD || 0); i++) {
  console.log(`flood line ${i} of worker ${index}`);
}
server.listen(port, '127.0.0.1', () => console.log(`worker ${index} listening on ${port}`));
let direct = null;
if (process.env.LISTEN_FDS === '1' && process.env.LISTEN_PID === String(process.pid)) {
  direct = http.createServer(server.listeners('request')[0]);
  direct.on('connection', () => connections++);
  direct.keepAliveTimeout = server.keepAliveTimeout;
  direct.listen({ fd: 3 }, () => console.log(`worker ${index} serving fd 3 (${process.env.LISTEN_FDNAMES})`));
}
process.on('SIGTERM', () => {
  console.log(`worker ${index} stopping`);
  // Exit once both servers have finished their requests in flight: a direct worker's
  // clients are on the shared socket, not on the health port.
  let open = direct ? 2 : 1;
  const closed = () => { if (--open === 0) process.exit(0); };
  if (direct) {
    direct.close(closed);
    direct.closeIdleConnections();
  }
  server.close(closed);
  // Idle keep-alive sockets would hold close() open.
  server.closeIdleConnections();
});
