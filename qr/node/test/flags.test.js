'use strict';
// Start-up behaviour of server.js: bad flags exit 2 with one stderr line; a missing
// artifact exits 1 and says how to build it.

const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { it } = require('node:test');

const SERVER_JS = path.join(__dirname, '..', 'server.js');

function run(args, env = {}) {
  return spawnSync(process.execPath, [SERVER_JS, ...args], {
    env: { ...process.env, ...env },
    encoding: 'utf8',
    timeout: 30_000,
  });
}

it('bad flags: one line on stderr, exit 2', () => {
  const cases = [
    [],
    ['--port', '0'],
    ['--tier', '9', '--port', '0'],
    ['--tier', '0'],
    ['--tier', '0', '--port', 'abc'],
    ['--tier', '0', '--port', '70000'],
    ['--tier', '0', '--port', '0', '--bogus'],
    ['--tier', '3', '--port', '0', '--napi-mode', 'threads'],
    ['--tier', '0', '--port', '0', '--napi-mode', 'sync'],
    ['--tier', '1', '--port', '0', '--cli-timeout-ms', '0'],
    ['--tier', '0', '--port', '0', 'positional'],
  ];
  for (const args of cases) {
    const r = run(args);
    assert.equal(r.status, 2, `${args.join(' ')}: status ${r.status}, stderr ${r.stderr}`);
    assert.equal(r.stdout, '', args.join(' '));
    const lines = r.stderr.split('\n').filter(Boolean);
    assert.equal(lines.length, 1, `${args.join(' ')}: ${r.stderr}`);
    assert.match(lines[0], /^qr-node: /);
  }
});

it('a missing artifact: exit 1, and the message says to run scripts/build-qr.sh', () => {
  const empty = fs.mkdtempSync(path.join(os.tmpdir(), 'qr-node-empty-target-'));
  try {
    for (const tier of ['1', '2', '2-raw', '3']) {
      const r = run(['--tier', tier, '--port', '0'], { CARGO_TARGET_DIR: empty, QR_CLI: '' });
      assert.equal(r.status, 1, `tier ${tier}: ${r.stderr}`);
      assert.match(r.stderr, /bash scripts\/build-qr\.sh/, `tier ${tier}`);
    }
  } finally {
    fs.rmSync(empty, { recursive: true, force: true });
  }
});

it('a port already taken: exit 1 with one line', async () => {
  const net = require('node:net');
  const blocker = net.createServer();
  await new Promise((r) => blocker.listen(0, '127.0.0.1', r));
  try {
    const r = run(['--tier', '0', '--port', String(blocker.address().port)]);
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /cannot listen/);
  } finally {
    blocker.close();
  }
});
