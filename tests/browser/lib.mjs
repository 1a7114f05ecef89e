// Shared harness of the browser tests: the release `scalpel` binary, free loopback ports,
// child processes that are always stopped, Debian's Chromium driven by playwright-core
// (never a downloaded browser), and a console watcher.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const TARGET = process.env.CARGO_TARGET_DIR || join(ROOT, 'target');
export const SCALPEL = process.env.SCALPEL_BIN || join(TARGET, 'release', 'scalpel');
export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
/// Set by `./run screenshots`: where each test saves its page (docs/img).
export const SHOTS = process.env.SCALPEL_SCREENSHOTS || '';

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/// A free TCP port on 127.0.0.1 (bound once, released).
export function freePort() {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.once('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => res(port));
    });
  });
}

function portFree(port) {
  return new Promise((res) => {
    const srv = createServer();
    srv.once('error', () => res(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => res(true)));
  });
}

/// A base port with `count` free ports above it, below Linux's ephemeral range (a worker
/// port must stay free until a replacement binds it seconds later).
export async function freeBase(count) {
  for (let i = 0; i < 200; i++) {
    const base = 20000 + Math.floor(Math.random() * 12000);
    let ok = true;
    for (let p = base; p < base + count && ok; p++) ok = await portFree(p);
    if (ok) return base;
  }
  throw new Error('no free port range of ' + count);
}

export function tempDir(prefix) {
  return mkdtempSync(join(tmpdir(), prefix));
}

/// Starts a child process; its output is kept for failure messages. `stop()` ends it
/// (SIGTERM, SIGKILL after 5 s) and is registered with the test's `after`.
export function start(cmd, args, opts = {}) {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...opts });
  let output = '';
  const keep = (b) => {
    output += b.toString();
    if (output.length > 200000) output = output.slice(-100000);
  };
  child.stdout.on('data', keep);
  child.stderr.on('data', keep);
  const exited = new Promise((res) => child.once('exit', (code, signal) => res({ code, signal })));
  return {
    child,
    exited,
    output: () => output,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return exited;
      child.kill('SIGTERM');
      const t = setTimeout(() => child.kill('SIGKILL'), 5000);
      const r = await exited;
      clearTimeout(t);
      return r;
    },
  };
}

/// Polls `check` (async, returns truthy when done) every 100 ms until `ms` have passed.
export async function until(what, check, ms = 30000) {
  const deadline = Date.now() + ms;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await check();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    await sleep(100);
  }
  throw new Error('timed out waiting for ' + what + (last instanceof Error ? ': ' + last.message : ''));
}

/// GET (or other) with a time-out; resolves to { status, text }.
export async function http(url, init = {}, ms = 10000) {
  const res = await fetch(url, { ...init, signal: AbortSignal.timeout(ms) });
  return { status: res.status, text: await res.text(), headers: res.headers };
}

/// Debian's Chromium in a fresh profile, headless, with nothing of its own on the network.
export async function browser(options = {}) {
  const profile = tempDir('scalpel-chromium-');
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync',
    ],
    viewport: { width: 1280, height: 900 },
    ...options,
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

/// Records console errors, uncaught page errors and failed requests of `page`.
export function watchConsole(page) {
  const problems = [];
  page.on('console', (m) => {
    if (m.type() === 'error' || m.type() === 'warning') problems.push('console ' + m.type() + ': ' + m.text());
  });
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('requestfailed', (r) => problems.push('request failed: ' + r.url() + ' ' + (r.failure() || {}).errorText));
  return problems;
}

/// With `./run screenshots`, waits `ms` so the page's charts have some history first.
export async function settleForShot(ms) {
  if (SHOTS) await sleep(ms);
}

/// Saves a screenshot of the whole page when `./run screenshots` asked for them.
export async function screenshot(page, name) {
  if (!SHOTS) return;
  mkdirSync(SHOTS, { recursive: true });
  await page.screenshot({ path: join(SHOTS, name), fullPage: true });
}

/// A loopback HTTP server answering with `handler(req, res)`; resolves to { port, close }.
export async function upstream(handler) {
  const { createServer: createHttp } = await import('node:http');
  const srv = createHttp(handler);
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  return {
    port: srv.address().port,
    close: () => new Promise((r) => { srv.closeAllConnections(); srv.close(r); }),
  };
}
