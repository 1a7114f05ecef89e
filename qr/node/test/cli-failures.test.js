'use strict';
// Tier 1 with misbehaving CLIs (real processes, started through QR_CLI): each failure is
// a 500 JSON answer bounded by the time-out, and no process is ever left behind, even
// when the CLI is a script whose own children hold its stdout.

const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { it, before, after } = require('node:test');
const h = require('../testing/harness');

let dir;
const started = [];

function script(name, body) {
  const file = path.join(dir, name);
  fs.writeFileSync(file, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
  return file;
}

before(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qr-node-fake-cli-'));
  // Records "shell_pid sleep_pid" so the test can check both die. `sleep` is a
  // grandchild of the server that inherits stdout: killing only the shell would leak it.
  script('hang.sh', 'sleep 1000 &\necho "$$ $!" >> "$QR_FAKE_PIDS"\nwait');
  script('exit1.sh', 'cat > /dev/null\necho "boom: fake failure" >&2\nexit 1');
  script('killed.sh', 'kill -9 $$');
  script('garbage.sh', 'cat > /dev/null\necho "not a png"');
});

after(async () => {
  for (const s of started) await h.stopServer(s, 'SIGKILL').catch(() => {});
  fs.rmSync(dir, { recursive: true, force: true });
});

async function startFake(name, timeoutMs, pidsFile = path.join(dir, `${name}.${Date.now()}.pids`)) {
  const s = await h.startServer('1', {
    env: { QR_CLI: path.join(dir, name), QR_CLI_TIMEOUT_MS: String(timeoutMs), QR_FAKE_PIDS: pidsFile },
  });
  started.push(s);
  return { s, pidsFile };
}

function recordedPids(pidsFile) {
  if (!fs.existsSync(pidsFile)) return [];
  return fs.readFileSync(pidsFile, 'utf8').split(/\s+/).filter(Boolean).map(Number);
}

async function assertAllGone(pids) {
  assert.ok(pids.length > 0, 'the fake CLI recorded its pids');
  const alive = await h.pollUntil(() => {
    const left = pids.filter(h.pidAlive);
    return left.length === 0 ? [] : null;
  });
  assert.deepEqual(alive, [], `processes still alive: ${pids.filter(h.pidAlive).join(', ')}`);
}

async function assert500(res, pattern) {
  assert.equal(res.status, 500, `body: ${res.body}`);
  assert.match(res.contentType, /^application\/json/);
  const body = JSON.parse(res.body.toString('utf8'));
  assert.match(body.error, pattern);
}

it('a CLI that hangs (with a grandchild) is killed at the time-out: 500, whole process group gone', async () => {
  const { s, pidsFile } = await startFake('hang.sh', 500);
  // Several at once: each gets its own child and its own kill.
  const responses = await Promise.all([1, 2, 3].map(() => h.request(s.base, h.qrcodePath('x'))));
  for (const res of responses) await assert500(res, /timed out after 500 ms/);
  const pids = recordedPids(pidsFile);
  assert.equal(pids.length, 6, 'three shells and three sleeps');
  await assertAllGone(pids);
  assert.equal((await h.request(s.base, '/healthz')).status, 200, 'server still serves');
});

it('a CLI that exits non-zero is a 500 carrying its stderr line', async () => {
  const { s } = await startFake('exit1.sh', 10_000);
  await assert500(await h.request(s.base, h.qrcodePath('x')), /exited with 1: boom: fake failure/);
});

it('a CLI killed by a signal is a 500', async () => {
  const { s } = await startFake('killed.sh', 10_000);
  await assert500(await h.request(s.base, h.qrcodePath('x')), /killed by SIGKILL/);
});

it('a CLI that exits 0 without a PNG is a 500', async () => {
  const { s } = await startFake('garbage.sh', 10_000);
  await assert500(await h.request(s.base, h.qrcodePath('x')), /did not write a PNG/);
});

it('a CLI path that does not exist is a 500, not a crash', async () => {
  const { s } = await startFake('no-such-cli', 10_000);
  await assert500(await h.request(s.base, h.qrcodePath('x')), /cannot run qr-cli/);
  assert.equal((await h.request(s.base, '/healthz')).status, 200);
});

it('a client that goes away kills its CLI child (no leak while the time-out is still far)', async () => {
  const { s, pidsFile } = await startFake('hang.sh', 120_000);
  const controller = new AbortController();
  const pending = fetch(s.base + h.qrcodePath('x'), { signal: controller.signal }).catch((e) => e);
  const pids = await h.pollUntil(() => {
    const p = recordedPids(pidsFile);
    return p.length === 2 ? p : null;
  });
  assert.ok(pids, 'the fake CLI started');
  controller.abort();
  assert.equal((await pending).name, 'AbortError');
  await assertAllGone(pids);
});

it('SIGTERM with a CLI request in flight: the request ends (500 at the time-out), exit 0, no leak', async () => {
  const { s, pidsFile } = await startFake('hang.sh', 1500);
  const pending = h.request(s.base, h.qrcodePath('x'));
  const pids = await h.pollUntil(() => {
    const p = recordedPids(pidsFile);
    return p.length === 2 ? p : null;
  });
  assert.ok(pids, 'the fake CLI started');
  const exited = h.stopServer(s, 'SIGTERM');
  await assert500(await pending, /timed out/);
  assert.equal(await exited, 0, `stderr: ${s.stderr()}`);
  await assertAllGone(pids);
});
