'use strict';
// The in-process bindings, called directly: the hand-written raw-wasm bindings (copying
// out, UTF-8 byte limit, error codes, no leak, memory growth), and the napi addon's and
// wasm-bindgen's error messages, which the server maps to statuses.

const assert = require('node:assert/strict');
const { describe, it, before } = require('node:test');
const h = require('../testing/harness');
const { loadRawQr } = require('../lib/raw-wasm');

let paths;
before(() => {
  paths = h.requireArtifacts('wasmBindgen', 'wasmRaw', 'napi');
});

describe('raw wasm bindings', () => {
  let raw;
  before(() => {
    raw = loadRawQr(paths.wasmRaw);
  });

  it('returns a copy the next call cannot overwrite (the published bindings returned a view)', () => {
    const first = raw.qrPng('first text');
    const snapshot = Buffer.from(first);
    const second = raw.qrPng('a different and longer second text');
    assert.notEqual(first.buffer, raw.memory.buffer, 'not backed by wasm memory');
    assert.ok(first.equals(snapshot), 'first result unchanged by the second call');
    assert.ok(!first.equals(second));
    assert.equal(h.decodeQr(first), 'first text');
  });

  it('counts the 512 limit in UTF-8 bytes', () => {
    const euro512 = '€'.repeat(170) + 'ab';
    assert.equal(h.decodeQr(raw.qrPng(euro512)), euro512);
    assert.throws(() => raw.qrPng('€'.repeat(171)), { message: 'too_long' });
    assert.throws(() => raw.qrPng('€'.repeat(200)), { message: 'too_long' }); // 200 UTF-16 units
    assert.throws(() => raw.qrPng('x'.repeat(513)), { message: 'too_long' });
    assert.throws(() => raw.qrPng(''), { message: 'empty' });
  });

  it('frees what it allocates: memory does not grow over many calls', () => {
    const texts = ['a', 'x'.repeat(512), '日本語テキスト', 'https://example.com/?q=1'];
    for (let i = 0; i < 50; i++) raw.qrPng(texts[i % texts.length]); // warm the allocator
    const before = raw.memory.buffer.byteLength;
    for (let i = 0; i < 2000; i++) raw.qrPng(texts[i % texts.length]);
    assert.equal(raw.memory.buffer.byteLength, before);
  });

  it('survives memory growth between calls (re-reads memory.buffer)', () => {
    const first = raw.qrPng('before growth');
    raw.memory.grow(16); // detaches every old view of memory.buffer
    assert.equal(h.decodeQr(first), 'before growth', 'the copy survives the detach');
    assert.equal(h.decodeQr(raw.qrPng('after growth')), 'after growth');
  });

  it('matches wasm-bindgen and the addon byte for byte', () => {
    const wasm = require(paths.wasmBindgen);
    const addon = require(paths.napi);
    for (const text of ['hello', 'x'.repeat(512), 'héllo €😀']) {
      const a = raw.qrPng(text);
      assert.ok(a.equals(Buffer.from(wasm.qr_png(text))), text);
      assert.ok(a.equals(addon.qrPng(text)), text);
    }
  });
});

describe('wasm-bindgen and napi error messages (the server maps them to statuses)', () => {
  it('wasm-bindgen: empty, too_long', () => {
    const wasm = require(paths.wasmBindgen);
    assert.throws(() => wasm.qr_png(''), (e) => String(e.message ?? e) === 'empty');
    assert.throws(() => wasm.qr_png('€'.repeat(171)), (e) => String(e.message ?? e) === 'too_long');
  });

  it('napi: empty, too_long, sync and async', async () => {
    const addon = require(paths.napi);
    assert.throws(() => addon.qrPng(''), { message: 'empty' });
    assert.throws(() => addon.qrPng('€'.repeat(171)), { message: 'too_long' });
    await assert.rejects(addon.qrPngAsync(''), { message: 'empty' });
    await assert.rejects(addon.qrPngAsync('€'.repeat(171)), { message: 'too_long' });
    const [a, b] = await Promise.all([addon.qrPngAsync('one'), addon.qrPngAsync('two')]);
    assert.equal(h.decodeQr(a), 'one');
    assert.equal(h.decodeQr(b), 'two');
    assert.ok(Buffer.isBuffer(a));
  });
});
