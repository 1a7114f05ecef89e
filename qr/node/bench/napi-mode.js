#!/usr/bin/env node
'use strict';
// Tier 3 server, napi sync vs async, under HTTP load: the measurement behind the
// server's default --napi-mode (docs/qr-node.md).
//
//   node bench/napi-mode.js [--concurrency 1,8,32,128] [--seconds 5] [--repeats 3] [--no-pin]
//
// Both servers run at once. By default they are pinned to the last CPU (node's main
// thread and its libuv pool share it, as one worker per core would in production) and
// wrk to CPU 0; --no-pin lets the scheduler place everything (the pool may then use
// another core, which is what async can buy on an otherwise idle machine).
// Per concurrency and repeat, the two modes run back to back in alternating order.
// wrk is closed-loop: its req/s is max throughput; its p99 is at that concurrency, not
// at a fixed offered rate (an open-model figure needs an open-model generator).

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');
const { parseArgs } = require('node:util');
const { TEXTS } = require('./texts');

const SERVER_JS = path.join(__dirname, '..', 'server.js');

function flags() {
  const { values } = parseArgs({
    options: {
      concurrency: { type: 'string', default: '1,8,32,128' },
      seconds: { type: 'string', default: '5' },
      repeats: { type: 'string', default: '3' },
      'no-pin': { type: 'boolean', default: false },
    },
  });
  return {
    concurrency: values.concurrency.split(',').map(Number),
    seconds: Number(values.seconds),
    repeats: Number(values.repeats),
    pin: !values['no-pin'],
  };
}

let PIN = true;
function pinned(cpu, cmd, args) {
  return PIN && os.availableParallelism() >= 2 ? ['taskset', ['-c', String(cpu), cmd, ...args]] : [cmd, args];
}

function startServer(mode) {
  const serverCpu = os.availableParallelism() - 1;
  const [cmd, args] = pinned(serverCpu, process.execPath, [SERVER_JS, '--tier', '3', '--napi-mode', mode, '--port', '0']);
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
      const m = /http:\/\/\S+/.exec(out);
      if (m) resolve({ mode, child, base: m[0] });
    });
    child.on('exit', (code) => reject(new Error(`tier 3 ${mode} exited ${code} before listening`)));
  });
}

function wrk(base, concurrency, seconds, script) {
  const [cmd, args] = pinned(0, 'wrk', ['-t1', `-c${concurrency}`, `-d${seconds}s`, '--timeout', '10s', '--latency', '-s', script, base]);
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`wrk failed: ${r.stderr || r.error}`);
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(r.stdout)[1]);
  const p = /\s99%\s+([\d.]+)(us|ms|s)\b/.exec(r.stdout);
  const p99ms = Number(p[1]) * { us: 1e-3, ms: 1, s: 1e3 }[p[2]];
  const non2xx = /Non-2xx or 3xx responses:\s+(\d+)/.exec(r.stdout);
  if (non2xx) throw new Error(`wrk saw errors: ${non2xx[0]}`);
  // Time-outs (no answer within 10 s) are reported, not hidden: they bound the p99 from below.
  const sock = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(r.stdout);
  if (sock && Number(sock[1]) + Number(sock[2]) + Number(sock[3]) > 0) throw new Error(`wrk saw socket errors: ${sock[0]}`);
  return { rps, p99ms, timeouts: sock ? Number(sock[4]) : 0 };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

async function main() {
  const f = flags();
  PIN = f.pin;
  const which = spawnSync('wrk', ['--version'], { encoding: 'utf8' });
  if (which.error) throw new Error('wrk is not installed (apt-get install wrk)');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qr-napi-mode-'));
  const script = path.join(dir, 'mix.lua');
  const paths = TEXTS.map((t) => `/qrcode?${new URLSearchParams({ text: t.text })}`);
  fs.writeFileSync(
    script,
    `local paths = {${paths.map((p) => JSON.stringify(p)).join(', ')}}\nlocal i = 0\nrequest = function()\n  i = i + 1\n  return wrk.format("GET", paths[(i % #paths) + 1])\nend\n`,
  );
  const servers = { sync: await startServer('sync'), async: await startServer('async') };
  try {
    for (const s of Object.values(servers)) wrk(s.base, 8, 1, script); // warm-up
    const cpu = (fs.readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.*)$/m) || [])[1];
    const placement = f.pin ? `server on cpu ${os.availableParallelism() - 1}, wrk on cpu 0` : 'not pinned';
    console.log(`napi sync vs async under load: wrk -t1, ${f.seconds} s x ${f.repeats} repeats per cell, ${placement}`);
    console.log(`machine: ${os.availableParallelism()} cpus, ${cpu}, kernel ${os.release()}, node ${process.version}, loadavg ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}, ${new Date().toISOString()}`);
    console.log(`\n${'conc'.padStart(4)} ${'mode'.padEnd(6)} ${'req/s median'.padStart(13)} ${'min-max'.padStart(15)} ${'p99 ms median'.padStart(14)} ${'min-max'.padStart(15)} timeouts`);
    for (const c of f.concurrency) {
      const cell = { sync: [], async: [] };
      for (let r = 0; r < f.repeats; r++) {
        const order = r % 2 === 0 ? ['sync', 'async'] : ['async', 'sync'];
        for (const mode of order) cell[mode].push(wrk(servers[mode].base, c, f.seconds, script));
      }
      for (const mode of ['sync', 'async']) {
        const rps = cell[mode].map((x) => x.rps);
        const p99 = cell[mode].map((x) => x.p99ms);
        const timeouts = cell[mode].reduce((a, x) => a + x.timeouts, 0);
        console.log(
          `${String(c).padStart(4)} ${mode.padEnd(6)} ${median(rps).toFixed(0).padStart(13)} ${`${Math.min(...rps).toFixed(0)}-${Math.max(...rps).toFixed(0)}`.padStart(15)} ${median(p99).toFixed(2).padStart(14)} ${`${Math.min(...p99).toFixed(2)}-${Math.max(...p99).toFixed(2)}`.padStart(15)} ${String(timeouts).padStart(8)}`,
        );
      }
    }
  } finally {
    for (const s of Object.values(servers)) s.child.kill('SIGTERM');
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(`napi-mode: ${err.message}`);
  process.exit(1);
});
