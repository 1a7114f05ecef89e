'use strict';
// An ordinary Express app, written as its users write one: it listens on $PORT and knows
// nothing of scalpel — no health route, no fd 3, no cluster module. scalpel serve runs it
// unchanged in both modes (its Node preload serves fd 3 with this server in direct mode),
// and so does pm2. GET / answers who served it; GET /block?ms=N blocks the event loop.
const express = require('express');

const app = express();
app.get('/', (req, res) => res.json({ app: 'express', pid: process.pid }));
app.get('/block', (req, res) => {
  const until = Date.now() + Number(req.query.ms || 10000);
  while (Date.now() < until) { /* a blocked event loop */ }
  res.json({ app: 'express', pid: process.pid, blocked: true });
});
app.listen(process.env.PORT || 3000, () => console.log(`express listening on ${process.env.PORT || 3000}`));
