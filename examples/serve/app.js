'use strict';
// A hello-world worker for examples/serve/serve.toml: listens on $PORT, says which
// worker and version answered. GET /healthz is the health check.
const http = require('node:http');

const port = Number(process.env.PORT);
const index = process.env.WORKER_INDEX;
const version = process.env.APP_VERSION || 'current';

http
  .createServer((req, res) => {
    if (req.url === '/healthz') {
      res.end('ok');
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ hello: 'world', version, worker: index, pid: process.pid }));
  })
  .listen(port, '127.0.0.1', () => console.log(`listening on ${port}`));

process.on('SIGTERM', () => process.exit(0));
