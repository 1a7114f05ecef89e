#!/usr/bin/env node
'use strict';
// Which wasm build flags make tier 2 fastest: per-call CPU of raw-ABI builds of qr-wasm
// (made by `bash scripts/bench-qr.sh --wasm-flags`), beside the napi addon's sync call,
// in one process, alternating, with repeats.
//
//   node bench/wasm-flags.js DIR [--repeats N] [--ms-per-text MS]
//
// DIR holds NAME.wasm files (raw ABI). Every build is first checked byte-identical to the
// addon over the bench texts. Figure per repeat: mean over the texts of CPU µs per call
// (process.cpuUsage); shown: median over repeats (min-max) and the ratio to napi sync.

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { parseArgs } = require('node:util');
const { loadRawQr } = require('../lib/raw-wasm');
const { artifactPaths, requireArtifact } = require('../lib/artifacts');
const { TEXTS } = require('./texts');

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { repeats: { type: 'string', default: '7' }, 'ms-per-text': { type: 'string', default: '100' } },
});
const dir = positionals[0];
if (!dir) {
  console.error('wasm-flags: usage: wasm-flags.js DIR [--repeats N] [--ms-per-text MS]');
  process.exit(2);
}
const repeats = Number(values.repeats);
const ms = Number(values['ms-per-text']);

const addon = require(requireArtifact(artifactPaths().napi, 'napi addon'));
const variants = fs
  .readdirSync(dir)
  .filter((f) => f.endsWith('.wasm'))
  .sort()
  .map((f) => ({ name: f.slice(0, -5), bytes: fs.statSync(path.join(dir, f)).size, call: loadRawQr(path.join(dir, f)).qrPng }));
variants.push({ name: 'napi qrPng (sync), reference', bytes: null, call: (t) => addon.qrPng(t) });

for (const v of variants) {
  for (const { text } of TEXTS) {
    if (!Buffer.from(v.call(text)).equals(addon.qrPng(text))) throw new Error(`${v.name}: output differs from the addon`);
  }
}

function cpuPerCall(call, text) {
  for (let i = 0; i < 3; i++) call(text);
  const budget = BigInt(Math.round(ms * 1e6));
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  let calls = 0;
  while (process.hrtime.bigint() - t0 < budget) {
    for (let i = 0; i < 4; i++) call(text);
    calls += 4;
  }
  const { user, system } = process.cpuUsage(cpu0);
  return (user + system) / calls;
}

const results = new Map(variants.map((v) => [v.name, []]));
for (let r = 0; r < repeats; r++) {
  for (let i = 0; i < variants.length; i++) {
    const v = variants[(i + r) % variants.length];
    const perText = TEXTS.map(({ text }) => cpuPerCall(v.call, text));
    results.get(v.name).push(perText.reduce((a, b) => a + b, 0) / perText.length);
  }
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const ref = results.get(variants.at(-1).name);
console.log(`wasm flags: ${repeats} repeats x ${TEXTS.length} texts x ${ms} ms; loadavg ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}; ${new Date().toISOString()}`);
console.log(`${'build'.padEnd(30)} ${'bytes'.padStart(7)} ${'cpu/call'.padStart(9)} ${'min-max'.padStart(13)} ${'/ napi'.padStart(18)}`);
for (const v of variants) {
  const xs = results.get(v.name);
  // Ratio per repeat (pairs from the same repeat), then median and min-max.
  const ratios = xs.map((x, r) => x / ref[r]);
  console.log(
    `${v.name.padEnd(30)} ${String(v.bytes ?? '-').padStart(7)} ${`${median(xs).toFixed(0)} µs`.padStart(9)} ${`${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)}`.padStart(13)} ${`${median(ratios).toFixed(2)}x (${Math.min(...ratios).toFixed(2)}-${Math.max(...ratios).toFixed(2)})`.padStart(18)}`,
  );
}
