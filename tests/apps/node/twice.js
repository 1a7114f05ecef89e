'use strict';
// An app that listens twice: a metrics server on a port of its own (first), then the app
// on $PORT. Only the $PORT server is the app: it alone may be served on fd 3.
const http = require('node:http');

const metrics = http.createServer((req, res) => res.end(JSON.stringify({ server: 'metrics', pid: process.pid })));
metrics.listen(Number(process.env.METRICS_PORT || 0), '127.0.0.1');
http.createServer((req, res) => res.end(JSON.stringify({ server: 'app', pid: process.pid })))
  .listen(process.env.PORT || 3000);
