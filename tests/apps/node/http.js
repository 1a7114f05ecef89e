'use strict';
// A plain node:http server on $PORT, nothing else.
const http = require('node:http');

http.createServer((req, res) => {
  if (req.url.startsWith('/block')) {
    const until = Date.now() + Number(new URL(req.url, 'http://x').searchParams.get('ms') || 10000);
    while (Date.now() < until) { /* a blocked event loop */ }
  }
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ app: 'http', pid: process.pid }));
}).listen(process.env.PORT || 3000);
