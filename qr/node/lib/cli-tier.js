'use strict';
// Tier 1: one `qr-cli` process per request, the text on its stdin, the PNG on its stdout.
//
// Every child is started in its own process group (detached) so that a time-out, a
// client abort or shutdown can kill the whole group: a wrapper script that starts
// its own children (`sh -c 'sleep 1000'`) must not leave them behind.

const { spawn } = require('node:child_process');
const { internal } = require('./contract');

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
/** A QR PNG of 512 bytes is a few KiB; anything this large is a broken child. */
const MAX_STDOUT_BYTES = 4 * 1024 * 1024;
const MAX_STDERR_BYTES = 4096;

function killGroup(child, signal = 'SIGKILL') {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // ESRCH: the group is already gone.
  }
}

/**
 * @param {{cliPath: string, timeoutMs: number}} opts
 * @returns {{render(text: string, ctx?: {signal?: AbortSignal}): Promise<Buffer>, close(): void}}
 */
function createCliTier({ cliPath, timeoutMs }) {
  const live = new Set();

  function render(text, { signal } = {}) {
    return new Promise((resolve, reject) => {
      if (signal && signal.aborted) {
        reject(internal('request aborted before qr-cli started'));
        return;
      }
      let child;
      try {
        child = spawn(cliPath, [], { stdio: ['pipe', 'pipe', 'pipe'], detached: true });
      } catch (err) {
        reject(internal(`cannot start qr-cli: ${err.message}`));
        return;
      }
      live.add(child);

      const stdout = [];
      let stdoutBytes = 0;
      let stderr = '';
      let settled = false;
      let failure = null; // why we killed it, when we did

      const settle = (err, value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (signal) signal.removeEventListener('abort', onAbort);
        if (err) reject(err);
        else resolve(value);
      };
      const fail = (err) => {
        if (!failure) failure = err;
        killGroup(child);
        // Answer now: the time-out bounds the response, not the child's death.
        settle(failure);
      };
      const onAbort = () => fail(internal('request aborted'));
      const timer = setTimeout(() => fail(internal(`qr-cli timed out after ${timeoutMs} ms`)), timeoutMs);
      if (signal) signal.addEventListener('abort', onAbort, { once: true });

      child.stdout.on('data', (chunk) => {
        stdoutBytes += chunk.length;
        if (stdoutBytes > MAX_STDOUT_BYTES) {
          fail(internal(`qr-cli wrote more than ${MAX_STDOUT_BYTES} bytes`));
          return;
        }
        stdout.push(chunk);
      });
      child.stderr.setEncoding('utf8');
      child.stderr.on('data', (chunk) => {
        if (stderr.length < MAX_STDERR_BYTES) stderr += chunk;
      });
      child.on('error', (err) => fail(internal(`cannot run qr-cli: ${err.message}`)));
      child.on('close', (code, sig) => {
        live.delete(child);
        if (settled) return;
        const firstLine = stderr.split('\n', 1)[0].trim();
        if (code !== 0) {
          // Kill the group in case the child left descendants behind.
          killGroup(child);
          const how = sig ? `killed by ${sig}` : `exited with ${code}`;
          settle(internal(`qr-cli ${how}${firstLine ? `: ${firstLine}` : ''}`));
          return;
        }
        const png = Buffer.concat(stdout, stdoutBytes);
        if (png.length < PNG_SIGNATURE.length || !png.subarray(0, 8).equals(PNG_SIGNATURE)) {
          settle(internal('qr-cli exited 0 but did not write a PNG'));
          return;
        }
        settle(null, png);
      });

      // A child that dies before reading its stdin gives EPIPE here; 'close' reports it.
      child.stdin.on('error', () => {});
      child.stdin.end(text, 'utf8');
    });
  }

  function close() {
    for (const child of live) killGroup(child);
  }

  return { render, close };
}

module.exports = { createCliTier, PNG_SIGNATURE };
