'use strict';
// An ordinary Koa app: app.listen() makes an http.Server and listens on $PORT.
const Koa = require('koa');

const app = new Koa();
app.use(async (ctx) => {
  if (ctx.path === '/block') {
    const until = Date.now() + Number(ctx.query.ms || 10000);
    while (Date.now() < until) { /* a blocked event loop */ }
  }
  ctx.body = { app: 'koa', pid: process.pid };
});
app.listen(process.env.PORT || 3000);
