'use strict';
// An ordinary Fastify app: Fastify makes its own server object and listens through it
// (on "localhost": 127.0.0.1 and ::1, a second server for the second address).
const fastify = require('fastify')();

fastify.get('/', async () => ({ app: 'fastify', pid: process.pid }));
fastify.get('/block', async (req) => {
  const until = Date.now() + Number(req.query.ms || 10000);
  while (Date.now() < until) { /* a blocked event loop */ }
  return { app: 'fastify', pid: process.pid, blocked: true };
});
fastify.listen({ port: Number(process.env.PORT) || 3000 }, (err) => {
  if (err) {
    console.error(err);
    process.exit(1);
  }
});
