'use strict';
// scalpel serve's Node preload, loaded before the app by NODE_OPTIONS=--require (shipped
// inside the scalpel binary, written to a private file at start). It changes nothing of
// the app's own behaviour; it only adds:
//
// - direct mode (LISTEN_FDS=1, LISTEN_PID = this process): when the app's server listens on
//   $SCALPEL_PRELOAD_PORT (the worker's $PORT), a second net.Server takes connections from
//   the shared socket on fd 3 and hands each to the app's server, as Node's cluster module
//   hands connections to a worker's server for pm2. The app keeps $PORT. Only the server
//   on that port is attached (an app may listen twice: a metrics server is not the app);
//   an app that serves fd 3 itself is left alone.
// - a heartbeat to serve over the pipe on fd $SCALPEL_PRELOAD_FD, one short line every
//   $SCALPEL_PRELOAD_BEAT_MS: "hb <event-loop lag ms>", plus "listen <port>", "fd3 ok" and
//   "fd3 error <why>" as they happen. A blocked event loop sends nothing: serve notices.
//
// Its own handles never keep the process alive (a worker that would exit, exits), and a
// full pipe drops a line rather than block the event loop. In direct mode an app without
// a SIGTERM handler of its own gets a graceful one (stop accepting, finish, exit).
(function scalpelPreload() {
  const fdText = process.env.SCALPEL_PRELOAD_FD;
  if (!fdText) return;
  // Children of the app (a shell, a tool it spawns) inherit the environment: the pipe and
  // the socket are this process's alone.
  delete process.env.SCALPEL_PRELOAD_FD;
  const fd = Number(fdText);
  const beatMs = Math.max(20, Number(process.env.SCALPEL_PRELOAD_BEAT_MS) || 250);
  const port = Number(process.env.SCALPEL_PRELOAD_PORT);
  const direct = process.env.LISTEN_FDS === '1' && process.env.LISTEN_PID === String(process.pid);
  const fs = require('node:fs');
  const net = require('node:net');

  const say = (line) => {
    try {
      fs.writeSync(fd, `${line.replace(/\n/g, ' ').slice(0, 200)}\n`);
    } catch (e) {
      // EAGAIN: serve is not reading this instant; the next line says as much.
    }
  };

  let expected = Date.now() + beatMs;
  const beat = setInterval(() => {
    const now = Date.now();
    say(`hb ${Math.max(0, now - expected)}`);
    expected = now + beatMs;
  }, beatMs);
  beat.unref();
  say('hb 0');

  let attached = false;
  let appServesFd3 = false;

  // The port a listen() call asks for, from any of its forms: (port, …), ({port}), or
  // ({fd}) / (handle) / (path), which have none.
  const portOf = (args) => {
    const a = args[0];
    if (a !== null && typeof a === 'object') {
      if (a.fd === 3) appServesFd3 = true;
      return a.port === undefined ? undefined : Number(a.port);
    }
    if (typeof a === 'number' || (typeof a === 'string' && /^\d+$/.test(a))) return Number(a);
    return undefined;
  };

  const attach = (appServer) => {
    if (attached || appServesFd3) return;
    attached = true;
    const shared = net.createServer((socket) => {
      appServer.emit('connection', socket);
    });
    shared.on('error', (e) => say(`fd3 error ${e.code || ''} ${e.message}`));
    shared.listen({ fd: 3 }, () => say('fd3 ok'));
    // The app closing its server (a graceful stop) closes the shared one with it, at once:
    // no new connection reaches a server that is finishing. serve keeps the socket open.
    const close = appServer.close;
    appServer.close = function scalpelClose(...args) {
      shared.close();
      return close.apply(this, args);
    };
    // Kept alive by the app's server alone, as the app would be.
    shared.unref();
    // An app with no SIGTERM handler of its own would die with its accepted connections;
    // in direct mode no balancer drains them first. So: stop accepting, finish what was
    // taken, exit (serve's stop_grace bounds it).
    process.on('SIGTERM', function scalpelStop() {
      if (process.listeners('SIGTERM').some((l) => l !== scalpelStop)) return;
      appServer.close(() => process.exit(0));
      if (typeof appServer.closeIdleConnections === 'function') appServer.closeIdleConnections();
    });
  };

  const listen = net.Server.prototype.listen;
  net.Server.prototype.listen = function scalpelListen(...args) {
    const asked = portOf(args);
    if (asked !== undefined) say(`listen ${asked}`);
    if (direct && Number.isInteger(port) && asked === port) {
      // After the app's own start-up code in this turn: an app that also listens on
      // {fd: 3} itself (the old way) says so first and keeps it.
      this.once('listening', () => setImmediate(() => attach(this)));
    }
    return listen.apply(this, args);
  };
}());
