'use strict';
// The HTTP contract, checked against every tier as a real server process:
// Node tiers 0, 0-article, 1, 2, 2-raw, 3 (sync and async) and the Rust tier-4 binary.

const assert = require('node:assert/strict');
const { describe, it, before, after } = require('node:test');
const h = require('../testing/harness');

const servers = new Map();

before(async () => {
  h.requireArtifacts('cli', 'wasmBindgen', 'wasmRaw', 'napi', 'server');
  const started = await Promise.all(h.ALL_TIERS.map((t) => h.startServer(t)));
  for (const s of started) servers.set(s.tier, s);
});

after(async () => {
  // Any server a test did not stop (a failed test) must not outlive the suite.
  for (const s of servers.values()) await h.stopServer(s, 'SIGKILL').catch(() => {});
});

function assertJsonError(res, status) {
  assert.equal(res.status, status, `status; body: ${res.body}`);
  assert.match(res.contentType, /^application\/json/);
  const body = JSON.parse(res.body.toString('utf8'));
  assert.equal(typeof body.error, 'string');
  assert.ok(body.error.length > 0, 'error message is not empty');
  return body;
}

for (const tier of h.ALL_TIERS) {
  describe(`tier ${tier}`, () => {
    const base = () => servers.get(tier).base;

    it('GET /healthz is 200', async () => {
      const res = await h.request(base(), '/healthz');
      assert.equal(res.status, 200);
    });

    it('every sample text comes back as a PNG that an independent decoder reads as the same text', async () => {
      for (const [name, text] of Object.entries(h.sampleTexts())) {
        const res = await h.request(base(), h.qrcodePath(text));
        assert.equal(res.status, 200, `${name}: ${res.body}`);
        assert.equal(res.contentType, 'image/png', name);
        // The published 200 px configuration squeezes long texts below ~2.5 px per module,
        // which jsQR cannot read (see cross-tier.test.js); its short texts must decode.
        if (tier === '0-article' && Buffer.byteLength(text) > h.ARTICLE_DECODABLE_BYTES) continue;
        assert.equal(h.decodeQr(res.body), text, name);
      }
    });

    it('parses the query with URLSearchParams rules: + is a space, %XX is UTF-8', async () => {
      const res = await h.request(base(), '/qrcode?text=a+b%2Bc%20%E2%82%AC');
      assert.equal(res.status, 200);
      assert.equal(h.decodeQr(res.body), 'a b+c €');
    });

    it('text that is not valid UTF-8 after percent-decoding is 400; a real U+FFFD is fine', async () => {
      assertJsonError(await h.request(base(), '/qrcode?text=%FF'), 400);
      assertJsonError(await h.request(base(), '/qrcode?text=ab%C3'), 400);
      assertJsonError(await h.request(base(), '/qrcode?other=1&text=%E2%82'), 400);
      const res = await h.request(base(), '/qrcode?text=%EF%BF%BDok');
      assert.equal(res.status, 200);
      assert.equal(h.decodeQr(res.body), '\uFFFDok');
      const literal = await h.request(base(), '/qrcode?text=100%25+%zz');
      assert.equal(literal.status, 200);
      assert.equal(h.decodeQr(literal.body), '100% %zz');
    });

    it('missing or empty text is 400 with a JSON error', async () => {
      assertJsonError(await h.request(base(), '/qrcode'), 400);
      assertJsonError(await h.request(base(), '/qrcode?text='), 400);
      assertJsonError(await h.request(base(), '/qrcode?other=1'), 400);
    });

    it('text over 512 UTF-8 bytes is 413, counting bytes, not UTF-16 units', async () => {
      assertJsonError(await h.request(base(), h.qrcodePath('x'.repeat(513))), 413);
      assertJsonError(await h.request(base(), h.qrcodePath('€'.repeat(171))), 413); // 513 bytes
      const utf16Short = '€'.repeat(200); // 200 UTF-16 units, 600 UTF-8 bytes
      assert.ok(utf16Short.length <= 512 && Buffer.byteLength(utf16Short) > 512);
      assertJsonError(await h.request(base(), h.qrcodePath(utf16Short)), 413);
      const emoji = '😀'.repeat(129); // 258 UTF-16 units, 516 bytes
      assertJsonError(await h.request(base(), h.qrcodePath(emoji)), 413);
    });

    it('another method on /qrcode is 405 with a JSON error', async () => {
      for (const method of ['POST', 'PUT', 'DELETE']) {
        assertJsonError(await h.request(base(), '/qrcode?text=a', { method }), 405);
      }
    });

    it('another method on /healthz is 405 with a JSON error', async () => {
      assertJsonError(await h.request(base(), '/healthz', { method: 'POST' }), 405);
    });

    it('an unknown path is 404 with a JSON error', async () => {
      assertJsonError(await h.request(base(), '/nope'), 404);
      assertJsonError(await h.request(base(), '/qrcode/extra?text=a'), 404);
    });

    it('exits 0 on SIGTERM', async () => {
      const s = servers.get(tier);
      servers.delete(tier);
      assert.equal(await h.stopServer(s, 'SIGTERM'), 0, `stderr: ${s.stderr()}`);
    });
  });
}

describe('SIGINT', () => {
  for (const tier of ['0', '4']) {
    it(`tier ${tier} exits 0 on SIGINT`, async () => {
      const s = await h.startServer(tier);
      assert.equal((await h.request(s.base, h.qrcodePath('bye'))).status, 200);
      assert.equal(await h.stopServer(s, 'SIGINT'), 0, `stderr: ${s.stderr()}`);
    });
  }
});
