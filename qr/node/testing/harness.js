'use strict';
// Shared test harness: start real servers (Node tiers and the Rust tier-4 binary) as
// child processes on ephemeral ports, fetch from them, decode PNGs independently.

const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const { PNG } = require('pngjs');
const jsQR = require('jsqr');
const { artifactPaths, BUILD_HINT } = require('../lib/artifacts');

const SERVER_JS = path.join(__dirname, '..', 'server.js');
/** Generous: the machine is a shared, loaded 2-core box. */
const START_DEADLINE_MS = 30_000;
const EXIT_DEADLINE_MS = 20_000;

/** Fails (never skips) when a Rust artifact is missing, saying how to build it. */
function requireArtifacts(...names) {
  const paths = artifactPaths();
  const missing = names.filter((n) => !fs.existsSync(paths[n])).map((n) => `${n}: ${paths[n]}`);
  assert.equal(missing.length, 0, `missing Rust artifacts (${missing.join('; ')}); ${BUILD_HINT}`);
  return paths;
}

/** Every server the suite runs: the Node tiers and the Rust tier 4. */
const ALL_TIERS = ['0', '0-article', '1', '2', '2-raw', '3', '3-sync', '4'];

function serverCommand(tier, extraArgs = []) {
  if (tier === '4') return [artifactPaths().server, ['--port', '0', ...extraArgs]];
  if (tier === '3-sync') return [process.execPath, [SERVER_JS, '--tier', '3', '--napi-mode', 'sync', '--port', '0', ...extraArgs]];
  return [process.execPath, [SERVER_JS, '--tier', tier, '--port', '0', ...extraArgs]];
}

/**
 * Starts a server as a real child process and waits for its "listening on http://..." line.
 * @returns {Promise<{tier: string, child: import('node:child_process').ChildProcess, base: string, stderr: () => string}>}
 */
function startServer(tier, { env = {}, args = [] } = {}) {
  const [cmd, argv] = serverCommand(tier, args);
  const child = spawn(cmd, argv, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stderr.setEncoding('utf8');
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`tier ${tier} did not print its listening line within ${START_DEADLINE_MS} ms; stderr: ${stderr}`));
    }, START_DEADLINE_MS);
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (d) => {
      stdout += d;
      const m = /https?:\/\/([^\s/]+)/.exec(stdout);
      if (m) {
        clearTimeout(timer);
        resolve({ tier, child, base: `http://${m[1]}`, stderr: () => stderr, stdout: () => stdout });
      }
    });
    child.on('exit', (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`tier ${tier} exited (${code ?? sig}) before listening; stderr: ${stderr}`));
    });
  });
}

/** Sends `signal`, waits for exit, returns the exit code (null if killed by a signal). */
function stopServer(server, signal = 'SIGTERM') {
  const { child } = server;
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`tier ${server.tier} did not exit within ${EXIT_DEADLINE_MS} ms of ${signal}`));
    }, EXIT_DEADLINE_MS);
    child.once('exit', (code) => {
      clearTimeout(timer);
      resolve(code);
    });
    child.kill(signal);
  });
}

/** GET base + path; returns status, headers and the body as a Buffer. */
async function request(base, pathAndQuery, init = {}) {
  const res = await fetch(base + pathAndQuery, { signal: AbortSignal.timeout(30_000), ...init });
  const body = Buffer.from(await res.arrayBuffer());
  return { status: res.status, contentType: res.headers.get('content-type'), headers: res.headers, body };
}

function qrcodePath(text) {
  return `/qrcode?${new URLSearchParams({ text })}`;
}

/** Parses the IHDR chunk: what every PNG must agree on across tiers. */
function pngHeader(png) {
  assert.ok(png.length > 33, `PNG too short: ${png.length} bytes`);
  assert.equal(png.subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'PNG signature');
  assert.equal(png.toString('latin1', 12, 16), 'IHDR', 'first chunk is IHDR');
  return { width: png.readUInt32BE(16), height: png.readUInt32BE(20), bitDepth: png[24], colorType: png[25] };
}

/** Decodes with independent code (pngjs for pixels, jsQR for the symbol); returns the text. */
function decodeQr(png) {
  const image = PNG.sync.read(png);
  const code = jsQR(new Uint8ClampedArray(image.data.buffer, image.data.byteOffset, image.data.length), image.width, image.height);
  assert.ok(code, `jsQR found no QR symbol in a ${image.width}x${image.height} PNG`);
  return new TextDecoder('utf-8', { fatal: true }).decode(Uint8Array.from(code.binaryData));
}

/** Grayscale pixels (one byte per pixel) of a PNG, for image-level comparisons. */
function grayPixels(png) {
  const image = PNG.sync.read(png);
  const out = Buffer.alloc(image.width * image.height);
  for (let i = 0; i < out.length; i++) out[i] = image.data[i * 4];
  return { width: image.width, height: image.height, pixels: out };
}

/** True while `pid` runs; a zombie (exited, not yet reaped by its parent or init) counts as gone. */
function pidAlive(pid) {
  let stat;
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return false;
  }
  // Field 3, after the parenthesised command name (which may itself contain spaces).
  const state = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
  return state !== 'Z' && state !== 'X';
}

/** Polls `check` until it returns truthy or the deadline passes; returns the last value. */
async function pollUntil(check, { deadlineMs = 20_000, everyMs = 50 } = {}) {
  const end = Date.now() + deadlineMs;
  for (;;) {
    const value = await check();
    if (value || Date.now() > end) return value;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Longest text (UTF-8 bytes) whose tier 0-article image (200 px) jsQR is expected to read. */
const ARTICLE_DECODABLE_BYTES = 200;

/** Texts every tier must round-trip. */
function sampleTexts() {
  const euro512 = '€'.repeat(170) + 'ab'; // 170 * 3 + 2 = 512 UTF-8 bytes
  return {
    ascii: 'hello world',
    url: 'https://example.com/path?q=1&r=two#frag',
    digits: '0123456789012345678901234567890',
    upperAlnum: 'HELLO WORLD 123',
    nonAscii: 'héllo wörld — 日本語 😀 €',
    plusAndPercent: 'a+b c%20d&e=f',
    exactly512Ascii: 'x'.repeat(512),
    exactly512Multibyte: euro512,
  };
}

module.exports = {
  ALL_TIERS,
  ARTICLE_DECODABLE_BYTES,
  requireArtifacts,
  startServer,
  stopServer,
  request,
  qrcodePath,
  pngHeader,
  decodeQr,
  grayPixels,
  pidAlive,
  pollUntil,
  sampleTexts,
};
