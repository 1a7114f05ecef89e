#!/usr/bin/env node
'use strict';
// Per-call cost of every tier of the QR ladder, as the Node process sees it, in ONE run.
//
//   node bench/percall.js [--quick] [--repeats N] [--ms-per-text MS] [--json FILE]
//
// Method (see docs/qr-node.md): outputs are checked first (Rust tiers byte-identical,
// tier 0 matched = same pixels), then each repeat runs every variant once, in an order
// rotated per repeat (alternating, so drift on a shared machine hits all variants), each
// variant timing a fixed set of texts of several lengths for a fixed time per text.
// A variant's figure for a repeat is the mean of its per-text µs/call (equal weight per
// text); the table shows the median over repeats and the min-max spread.
//
// The bare Rust function is one of the variants: `$T/release/examples/percall` (an
// example of qr-core, built by scripts/build-qr.sh) times `qr_core::png` over the same
// texts (written to a temp file) for the same time per text, started once per repeat in
// its place in the rotation. So "tier 3 adds < 20 µs to the bare function" and "Rust >= 5x
// faster than tier 0" are read off pairs measured in the same repeat, not across runs.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { parseArgs } = require('node:util');
const { execFileSync } = require('node:child_process');
const npmQr = require('../lib/npm-qrcode');
const { createCliTier } = require('../lib/cli-tier');
const { loadRawQr } = require('../lib/raw-wasm');
const { artifactPaths, requireArtifact, targetDir } = require('../lib/artifacts');

const { TEXTS } = require('./texts');

function parseFlags() {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      repeats: { type: 'string' },
      'ms-per-text': { type: 'string' },
      json: { type: 'string' },
    },
  });
  const quick = values.quick;
  return {
    quick,
    repeats: Number(values.repeats ?? (quick ? 3 : 7)),
    msPerText: Number(values['ms-per-text'] ?? (quick ? 12 : 150)),
    json: values.json,
  };
}

/**
 * The bare `qr_core::png` in its own process (the qr-core `percall` example): `run(ms)`
 * returns [{ wall, cpu }] per text, `dump()` the PNGs for the byte-identity check.
 */
function bareRust() {
  const bin = requireArtifact(path.join(targetDir(), 'release', 'examples', 'percall'), 'qr-core percall example');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qr-percall-'));
  const textsFile = path.join(dir, 'texts.json');
  fs.writeFileSync(textsFile, JSON.stringify(TEXTS.map((t) => t.text)));
  const exec = (args) => JSON.parse(execFileSync(bin, ['--texts', textsFile, ...args], { encoding: 'utf8', maxBuffer: 64 << 20 }));
  return {
    run: (ms) =>
      exec(['--ms', String(ms)]).texts.map((r) => {
        if (r.cpu_us == null) throw new Error('bare Rust fn: no /proc/thread-self/schedstat, cannot measure its CPU');
        return { wall: r.wall_us, cpu: r.cpu_us };
      }),
    dump: () => exec(['--dump']).png_hex.map((h) => Buffer.from(h, 'hex')),
    close: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}

/** Every variant: name, the tier it stands for, and how one call is made. */
function variants(quick) {
  const paths = artifactPaths();
  const bare = bareRust();
  const cli = createCliTier({ cliPath: requireArtifact(paths.cli, 'qr-cli'), timeoutMs: 10_000 });
  const wasm = require(requireArtifact(paths.wasmBindgen, 'wasm-bindgen module'));
  const raw = loadRawQr(requireArtifact(paths.wasmRaw, 'qr_raw.wasm'));
  const addon = require(requireArtifact(paths.napi, 'napi addon'));
  const list = [
    { key: 'bare', name: 'bare Rust fn (qr_core::png)', kind: 'external', run: bare.run, dump: bare.dump },
    { key: '0', name: '0 npm qrcode, matched (sync)', kind: 'sync', call: npmQr.matchedPng },
    { key: '0-toBuffer', name: '0 npm qrcode, matched (toBuffer)', kind: 'async', call: npmQr.matchedPngViaToBuffer, full: true },
    { key: '0-article', name: '0-article (published settings)', kind: 'async', call: npmQr.articlePng },
    { key: '1', name: '1 qr-cli spawn per call', kind: 'async', call: cli.render, slow: true },
    { key: '2', name: '2 wasm-bindgen', kind: 'sync', call: (t) => wasm.qr_png(t) },
    { key: '2-raw', name: '2-raw hand-written bindings', kind: 'sync', call: raw.qrPng },
    { key: '3-sync', name: '3 napi qrPng (sync)', kind: 'sync', call: (t) => addon.qrPng(t) },
    { key: '3-async', name: '3 napi qrPngAsync, 1 in flight', kind: 'async', call: (t) => addon.qrPngAsync(t) },
    { key: '3-async-4', name: '3 napi qrPngAsync, 4 in flight', kind: 'batch', batch: 4, call: (t) => addon.qrPngAsync(t) },
  ];
  return {
    list: list.filter((v) => !(quick && v.full)),
    close: () => {
      cli.close();
      bare.close();
    },
  };
}

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/**
 * CPU time in µs of this process (all its threads: main, libuv pool, GC) plus its
 * reaped children (the tier-1 CLIs; /proc's cutime+cstime, in clock ticks).
 */
function cpuMicros() {
  const { user, system } = process.cpuUsage();
  const stat = fs.readFileSync('/proc/self/stat', 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const childTicks = Number(fields[13]) + Number(fields[14]); // cutime, cstime (fields 16, 17)
  return user + system + (childTicks * 1e6) / CLK_TCK;
}

/**
 * Runs `variant` on `text` for about `ms`; returns { wall, cpu } in µs per call.
 * Wall time is what a caller waits; CPU time is what the call costs the machine, and
 * is much less disturbed by other processes on a shared box.
 */
async function timeOne(variant, text, ms) {
  // Warm-up: JIT, allocator, first spawn.
  for (let i = 0; i < 3; i++) await variant.call(text);
  const budget = BigInt(Math.round(ms * 1e6));
  let calls = 0;
  const cpuStart = cpuMicros();
  const start = process.hrtime.bigint();
  let now = start;
  if (variant.kind === 'sync') {
    // Check the clock every 8 calls: cheap relative to even the fastest call.
    while (now - start < budget) {
      for (let i = 0; i < 8; i++) variant.call(text);
      calls += 8;
      now = process.hrtime.bigint();
    }
  } else if (variant.kind === 'async') {
    while (now - start < budget) {
      await variant.call(text);
      calls += 1;
      now = process.hrtime.bigint();
    }
  } else {
    const k = variant.batch;
    while (now - start < budget) {
      const batch = [];
      for (let i = 0; i < k; i++) batch.push(variant.call(text));
      await Promise.all(batch);
      calls += k;
      now = process.hrtime.bigint();
    }
  }
  return { wall: Number(now - start) / 1e3 / calls, cpu: (cpuMicros() - cpuStart) / calls };
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

/** Same output on every side before any speed figure (ground rule of the project). */
async function checkOutputs(list) {
  const { PNG } = require('pngjs');
  const pixels = (png) => {
    const img = PNG.sync.read(png);
    const g = Buffer.alloc(img.width * img.height);
    for (let i = 0; i < g.length; i++) g[i] = img.data[i * 4];
    return `${img.width}x${img.height}:${g.toString('base64')}`;
  };
  const sizes = {};
  for (const v of list) sizes[v.key] = [];
  const external = Object.fromEntries(list.filter((v) => v.kind === 'external').map((v) => [v.key, v.dump()]));
  for (const [t, { text }] of TEXTS.entries()) {
    const out = {};
    for (const v of list) out[v.key] = v.kind === 'external' ? external[v.key][t] : Buffer.from(await v.call(text));
    const ref = out['3-sync'];
    for (const key of ['bare', '1', '2', '2-raw', '3-async', '3-async-4']) {
      if (!out[key].equals(ref)) throw new Error(`output check: tier ${key} differs from tier 3 for ${JSON.stringify(text.slice(0, 20))}`);
    }
    if (pixels(out['0']) !== pixels(ref)) throw new Error(`output check: tier 0 matched pixels differ for ${JSON.stringify(text.slice(0, 20))}`);
    for (const v of list) sizes[v.key].push(out[v.key].length);
  }
  return sizes;
}

function machine() {
  const cpu = (fs.readFileSync('/proc/cpuinfo', 'utf8').match(/^model name\s*:\s*(.*)$/m) || [])[1] || 'unknown';
  let kernel = os.release();
  try {
    kernel = execFileSync('uname', ['-r'], { encoding: 'utf8' }).trim();
  } catch {}
  return {
    date: new Date().toISOString(),
    nproc: os.availableParallelism(),
    cpu,
    kernel,
    node: process.version,
    loadavg: os.loadavg().map((x) => x.toFixed(2)).join(' '),
    wasmBuild: (() => {
      try {
        return fs.readFileSync(path.join(targetDir(), 'qr', 'wasm-opt.txt'), 'utf8').trim();
      } catch {
        return 'unknown (no qr/wasm-opt.txt: built before scripts/build-qr.sh wrote it)';
      }
    })(),
    uvThreadpool: process.env.UV_THREADPOOL_SIZE || '4 (default)',
  };
}

const fmt = (us) => (Math.abs(us) >= 1000 ? `${(us / 1000).toFixed(2)} ms` : `${us.toFixed(Math.abs(us) < 10 ? 2 : 1)} µs`);
const pad = (s, n) => String(s).padEnd(n);
const lpad = (s, n) => String(s).padStart(n);

/** Median and quartiles of a - b over every (text, repeat) pair. */
function pooled(table, a, b) {
  const d = table[a].flatMap((xs, t) => xs.map((x, r) => x - table[b][t][r])).sort((p, q) => p - q);
  const at = (q) => d[Math.min(d.length - 1, Math.round(q * (d.length - 1)))];
  return { median: median(d), q1: at(0.25), q3: at(0.75), min: d[0], max: d.at(-1) };
}

/** Median and min-max of `f(r)` over the repeats r. */
function spread(n, f) {
  const xs = Array.from({ length: n }, (_, r) => f(r));
  return { median: median(xs), min: Math.min(...xs), max: Math.max(...xs) };
}

/**
 * The issue's three targets, each from pairs measured in the same repeat:
 * tier 0 matched / bare fn >= 5x; napi sync - bare fn < 20 µs; 2-raw / napi sync <= 1.5x.
 */
function targetLines(results, cpuResults, perText, perTextCpu) {
  const n = results.bare.length;
  const ratio = (tbl, a, b) => spread(n, (r) => tbl[a][r] / tbl[b][r]);
  const diff = (tbl, a, b) => spread(n, (r) => tbl[a][r] - tbl[b][r]);
  const figures = {
    tier0OverBare: { cpu: ratio(cpuResults, '0', 'bare'), wall: ratio(results, '0', 'bare') },
    tier3Overhead: { cpu: diff(cpuResults, '3-sync', 'bare'), wall: diff(results, '3-sync', 'bare') },
    // Shortest text: the overhead is a fixed cost, easiest to see where the work is least.
    tier3OverheadShortest: {
      cpu: spread(n, (r) => perTextCpu['3-sync'][0][r] - perTextCpu.bare[0][r]),
      wall: spread(n, (r) => perText['3-sync'][0][r] - perText.bare[0][r]),
    },
    // Judged figure: every (text, repeat) pair pooled, median and interquartile range.
    // One slow outlier in a long text moves a mean over texts by 100+ µs on a busy
    // machine; the overhead is a per-call cost, so the pooled median is the robust read.
    tier3OverheadPooled: { cpu: pooled(perTextCpu, '3-sync', 'bare'), wall: pooled(perText, '3-sync', 'bare') },
    raw2OverTier3: { cpu: ratio(cpuResults, '2-raw', '3-sync'), wall: ratio(results, '2-raw', '3-sync') },
  };
  const iqr = (s) => `${fmt(s.median)} (IQR ${fmt(s.q1)}..${fmt(s.q3)})`;
  const x = (s) => `${s.median.toFixed(2)}x (${s.min.toFixed(2)}-${s.max.toFixed(2)})`;
  const us = (s) => `${fmt(s.median)} (${fmt(s.min)}..${fmt(s.max)})`;
  const verdict = (ok) => (ok ? 'MET' : 'NOT MET');
  const f = figures;
  const lines = [
    `  Rust >= 5x faster than tier 0 (tier 0 matched / bare fn): cpu ${x(f.tier0OverBare.cpu)}, wall ${x(f.tier0OverBare.wall)} -> ${verdict(f.tier0OverBare.cpu.median >= 5)}`,
    `  tier 3 adds < 20 µs (napi qrPng sync - bare fn, all ${TEXTS.length}x${n} text/repeat pairs): cpu ${iqr(f.tier3OverheadPooled.cpu)}, wall ${iqr(f.tier3OverheadPooled.wall)} -> ${verdict(f.tier3OverheadPooled.cpu.median < 20)}`,
    `      (at ${TEXTS[0].label}: cpu ${us(f.tier3OverheadShortest.cpu)}; mean over texts: cpu ${us(f.tier3Overhead.cpu)}, over repeats)`,
    `  tier 2-raw within 1.5x of tier 3 (2-raw / napi qrPng sync): cpu ${x(f.raw2OverTier3.cpu)}, wall ${x(f.raw2OverTier3.wall)} -> ${verdict(f.raw2OverTier3.cpu.median <= 1.5)}`,
  ];
  return { figures, lines };
}

async function main() {
  const flags = parseFlags();
  const { list, close } = variants(flags.quick);
  const m = machine();
  console.log(`qr per-call bench: ${flags.quick ? 'quick' : 'full'}, ${flags.repeats} repeats x ${TEXTS.length} texts x ${flags.msPerText} ms per variant (CLI spawn: 5x that)`);
  console.log(`machine: ${m.nproc} cpus, ${m.cpu}, kernel ${m.kernel}, node ${m.node}, loadavg ${m.loadavg}, ${m.date}`);
  console.log(`wasm build: ${m.wasmBuild}`);

  const sizes = await checkOutputs(list);
  console.log('outputs checked: bare fn, tiers 1, 2, 2-raw, 3 byte-identical; tier 0 matched has the same pixels');

  // results[key][repeat] = mean over texts; perText[key][text] = [µs per repeat]; same for CPU.
  const results = Object.fromEntries(list.map((v) => [v.key, []]));
  const cpuResults = Object.fromEntries(list.map((v) => [v.key, []]));
  const perText = Object.fromEntries(list.map((v) => [v.key, TEXTS.map(() => [])]));
  const perTextCpu = Object.fromEntries(list.map((v) => [v.key, TEXTS.map(() => [])]));
  for (let r = 0; r < flags.repeats; r++) {
    const order = list.map((_, i) => list[(i + r) % list.length]); // rotate: alternate positions
    for (const v of order) {
      const ms = v.slow ? flags.msPerText * 5 : flags.msPerText;
      const usPerText = [];
      const cpuPerText = [];
      const external = v.kind === 'external' ? v.run(ms) : null;
      for (let t = 0; t < TEXTS.length; t++) {
        const { wall, cpu } = external ? external[t] : await timeOne(v, TEXTS[t].text, ms);
        usPerText.push(wall);
        cpuPerText.push(cpu);
        perText[v.key][t].push(wall);
        perTextCpu[v.key][t].push(cpu);
      }
      results[v.key].push(usPerText.reduce((a, b) => a + b, 0) / usPerText.length);
      cpuResults[v.key].push(cpuPerText.reduce((a, b) => a + b, 0) / cpuPerText.length);
    }
  }
  close();

  const base = median(results['0']);
  const cpuBase = median(cpuResults['0']);
  const rows = list.map((v) => {
    const xs = results[v.key];
    const cs = cpuResults[v.key];
    const med = median(xs);
    const cpu = median(cs);
    const meanBytes = sizes[v.key].reduce((a, b) => a + b, 0) / sizes[v.key].length;
    return {
      key: v.key,
      name: v.name,
      median: med,
      min: Math.min(...xs),
      max: Math.max(...xs),
      speedup: base / med,
      cpuMedian: cpu,
      cpuMin: Math.min(...cs),
      cpuMax: Math.max(...cs),
      cpuSpeedup: cpuBase / cpu,
      meanBytes,
    };
  });

  if (flags.quick) {
    console.log('\nper call, mean over the texts, median of repeats; x = tier 0 matched / variant (cpu)');
    console.log(`${pad('variant', 34)} ${lpad('wall/call', 10)} ${lpad('cpu/call', 10)} ${lpad('x', 7)}`);
    for (const r of rows) {
      console.log(`${pad(r.name, 34)} ${lpad(fmt(r.median), 10)} ${lpad(fmt(r.cpuMedian), 10)} ${lpad(`${r.cpuSpeedup.toFixed(2)}x`, 7)}`);
    }
  } else {
    console.log('\nper call, mean over the texts: median of repeats (min-max); speed-up = tier 0 matched / variant');
    console.log('wall = what the caller waits; cpu = CPU of this process + its reaped children (less disturbed by a busy machine)');
    console.log(
      `${pad('variant', 34)} ${lpad('wall/call', 10)} ${lpad('min-max', 21)} ${lpad('x', 7)} ${lpad('cpu/call', 10)} ${lpad('min-max', 21)} ${lpad('x', 7)} ${lpad('PNG B', 6)}`,
    );
    for (const r of rows) {
      console.log(
        `${pad(r.name, 34)} ${lpad(fmt(r.median), 10)} ${lpad(`${fmt(r.min)} - ${fmt(r.max)}`, 21)} ${lpad(`${r.speedup.toFixed(2)}x`, 7)} ${lpad(fmt(r.cpuMedian), 10)} ${lpad(`${fmt(r.cpuMin)} - ${fmt(r.cpuMax)}`, 21)} ${lpad(`${r.cpuSpeedup.toFixed(2)}x`, 7)} ${lpad(Math.round(r.meanBytes), 6)}`,
      );
    }

    for (const [what, table] of [['wall', perText], ['cpu', perTextCpu]]) {
      console.log(`\nper text, ${what} per call (median of repeats)`);
      console.log(`${pad('variant', 34)} ${TEXTS.map((t) => lpad(t.label, 11)).join(' ')}`);
      for (const v of list) {
        console.log(`${pad(v.name, 34)} ${table[v.key].map((xs) => lpad(fmt(median(xs)), 11)).join(' ')}`);
      }
    }
    console.log('\nper text, tier 3 overhead = napi qrPng (sync) - bare fn, per repeat: median (min..max)');
    for (const [t, { label }] of TEXTS.entries()) {
      const cells = [perText, perTextCpu].map((table) => {
        const d = table['3-sync'][t].map((x, r) => x - table.bare[t][r]);
        return lpad(`${fmt(median(d))} (${fmt(Math.min(...d))}..${fmt(Math.max(...d))})`, 32);
      });
      console.log(`${pad(label, 12)} wall ${cells[0]}   cpu ${cells[1]}`);
    }

    console.log('\nPNG bytes per text');
    console.log(`${pad('tier', 40)} ${TEXTS.map((t) => lpad(t.label, 11)).join(' ')}`);
    for (const [key, name] of [['0', '0 matched (pngjs, Up, zlib)'], ['0-article', '0-article (200 px RGBA)'], ['3-sync', '1-4 Rust (png crate, adaptive, fdeflate)']]) {
      console.log(`${pad(name, 40)} ${sizes[key].map((b) => lpad(b, 11)).join(' ')}`);
    }
  }

  m.loadavgEnd = os.loadavg().map((x) => x.toFixed(2)).join(' ');
  const targets = targetLines(results, cpuResults, perText, perTextCpu);
  console.log('\nissue targets (pairs from the same repeat: median (min-max) over repeats; judged on cpu)');
  for (const line of targets.lines) console.log(line);
  console.log(`loadavg at the end: ${m.loadavgEnd}`);

  if (flags.json) {
    const doc = { machine: m, flags, texts: TEXTS.map((t) => t.label), rows, perText, perTextCpu, sizes, targets: targets.figures };
    fs.writeFileSync(flags.json, JSON.stringify(doc, null, 2));
    console.log(`\nwrote ${flags.json}`);
  }
}

main().catch((err) => {
  console.error(`percall: ${err.message}`);
  process.exit(1);
});
