#!/usr/bin/env node
'use strict';
// The Node host of the QR tier ladder: GET /qrcode?text=... -> PNG, at tier 0, 0-article, 1, 2, 2-raw or 3.
//
//   node qr/node/server.js --tier 3 --port 0 [--host 127.0.0.1] [--napi-mode sync|async] [--cli-timeout-ms 5000]
//
// Prints one line when listening; exits 0 on SIGTERM/SIGINT after in-flight requests end.
// Bad flags: one line on stderr, exit 2. Start-up failure (missing artifact, port taken): exit 1.
// Env: QR_CLI overrides the tier-1 executable (tests point it at misbehaving scripts);
//      QR_CLI_TIMEOUT_MS is the default of --cli-timeout-ms.

const http = require('node:http');
const { parseArgs } = require('node:util');
const { TIERS, NAPI_MODES, createTier } = require('./lib/tiers');
const { QrError, validateText, fromBindingError, internal, strictTextParam } = require('./lib/contract');

class UsageError extends Error {}

function parseFlags(argv) {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        tier: { type: 'string' },
        port: { type: 'string' },
        host: { type: 'string', default: '127.0.0.1' },
        'napi-mode': { type: 'string' },
        'cli-timeout-ms': { type: 'string', default: process.env.QR_CLI_TIMEOUT_MS || '5000' },
      },
    }));
  } catch (err) {
    throw new UsageError(err.message);
  }
  if (values.tier === undefined) throw new UsageError(`--tier is required (one of ${TIERS.join(', ')})`);
  if (!TIERS.includes(values.tier)) throw new UsageError(`--tier must be one of ${TIERS.join(', ')}, not ${values.tier}`);
  if (values.port === undefined) throw new UsageError('--port is required (0 picks a free port)');
  const port = wholeNumber(values.port, '--port');
  if (port > 65535) throw new UsageError(`--port must be at most 65535, not ${values.port}`);
  const cliTimeoutMs = wholeNumber(values['cli-timeout-ms'], '--cli-timeout-ms (or QR_CLI_TIMEOUT_MS)');
  if (cliTimeoutMs === 0) throw new UsageError('--cli-timeout-ms must be positive');
  const napiMode = values['napi-mode'];
  if (napiMode !== undefined && !NAPI_MODES.includes(napiMode)) {
    throw new UsageError(`--napi-mode must be sync or async, not ${napiMode}`);
  }
  if (napiMode !== undefined && values.tier !== '3') throw new UsageError('--napi-mode applies to --tier 3 only');
  return { tier: values.tier, port, host: values.host, napiMode, cliTimeoutMs };
}

function wholeNumber(raw, what) {
  if (!/^\d{1,9}$/.test(raw)) throw new UsageError(`${what} must be a whole number, not ${JSON.stringify(raw)}`);
  return Number(raw);
}

function sendJson(res, status, body, extraHeaders = {}) {
  const json = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(json),
    ...extraHeaders,
  });
  res.end(json);
}

function sendError(res, err) {
  const qrErr = err instanceof QrError ? err : fromBindingError(err);
  if (qrErr.status >= 500) console.error(`qr-node: 500: ${qrErr.message}`);
  if (!res.headersSent && !res.destroyed) sendJson(res, qrErr.status, { error: qrErr.message });
}

function makeHandler(tier) {
  return function handle(req, res) {
    let url;
    try {
      url = new URL(req.url, 'http://localhost');
    } catch {
      sendJson(res, 400, { error: 'malformed request target' });
      return;
    }
    if (url.pathname === '/healthz') {
      if (req.method !== 'GET') {
        sendJson(res, 405, { error: `method ${req.method} not allowed on /healthz` }, { allow: 'GET' });
        return;
      }
      sendJson(res, 200, { status: 'ok' });
      return;
    }
    if (url.pathname !== '/qrcode') {
      sendJson(res, 404, { error: `no route for ${url.pathname}` });
      return;
    }
    if (req.method !== 'GET') {
      sendJson(res, 405, { error: `method ${req.method} not allowed on /qrcode` }, { allow: 'GET' });
      return;
    }
    let text;
    try {
      // URL.searchParams is a URLSearchParams: `+` is a space, %XX is percent-decoded UTF-8.
      text = url.searchParams.get('text');
      // U+FFFD may stand for invalid UTF-8 that URLSearchParams replaced: look at the bytes.
      if (text !== null && text.includes('\uFFFD')) text = strictTextParam(url.search.slice(1));
      text = validateText(text);
    } catch (err) {
      sendError(res, err);
      return;
    }
    let ctx;
    if (tier.wantsSignal) {
      // Tier 1 kills its child when the client goes away before the answer.
      const controller = new AbortController();
      res.on('close', () => {
        if (!res.writableFinished) controller.abort();
      });
      ctx = { signal: controller.signal };
    }
    let result;
    try {
      result = tier.render(text, ctx);
    } catch (err) {
      sendError(res, err);
      return;
    }
    if (result instanceof Uint8Array) sendPng(res, result);
    else result.then((png) => sendPng(res, png), (err) => sendError(res, err));
  };
}

function sendPng(res, png) {
  if (res.destroyed) return;
  res.writeHead(200, { 'content-type': 'image/png', 'content-length': png.length });
  res.end(png);
}

function main() {
  let flags;
  try {
    flags = parseFlags(process.argv.slice(2));
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    process.stderr.write(`qr-node: ${err.message}\n`);
    process.exit(2);
  }

  let tier;
  try {
    tier = createTier(flags.tier, {
      cliPath: process.env.QR_CLI || undefined,
      cliTimeoutMs: flags.cliTimeoutMs,
      napiMode: flags.napiMode,
    });
  } catch (err) {
    process.stderr.write(`qr-node: cannot start tier ${flags.tier}: ${err.message}\n`);
    process.exit(1);
  }

  const server = http.createServer(makeHandler(tier));
  server.on('error', (err) => {
    process.stderr.write(`qr-node: cannot listen on ${flags.host}:${flags.port}: ${err.message}\n`);
    tier.close();
    process.exit(1);
  });
  server.listen(flags.port, flags.host, () => {
    const { address, port } = server.address();
    const host = address.includes(':') ? `[${address}]` : address;
    process.stdout.write(`qr-node tier ${flags.tier} listening on http://${host}:${port}\n`);
  });

  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    // Stop accepting; in-flight requests finish; idle keep-alive sockets are closed as they go idle.
    const idleSweep = setInterval(() => server.closeIdleConnections(), 50);
    // Bound the wait: a request can take at most the CLI time-out (tier 1); others are short.
    const hardStop = setTimeout(() => server.closeAllConnections(), flags.cliTimeoutMs + 2000);
    hardStop.unref();
    server.close(() => {
      clearInterval(idleSweep);
      clearTimeout(hardStop);
      tier.close();
      process.exit(0);
    });
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

if (require.main === module) main();

module.exports = { parseFlags, makeHandler, UsageError, internal };
