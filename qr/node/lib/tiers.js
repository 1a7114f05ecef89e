'use strict';
// One factory per tier. Every tier is an object { name, render(text, ctx), close(), wantsSignal? }:
// render returns a Buffer or a Promise of one, and throws/rejects with an Error whose
// message follows the bindings' contract (`empty`, `too_long`, `encode: ...`) or a QrError.

const { artifactPaths, requireArtifact } = require('./artifacts');
const { createCliTier } = require('./cli-tier');
const { loadRawQr } = require('./raw-wasm');
const npmQr = require('./npm-qrcode');

const TIERS = ['0', '0-article', '1', '2', '2-raw', '3'];
const NAPI_MODES = ['sync', 'async'];
/** Chosen by measurement: see docs/qr-node.md, "napi: sync or async". */
const DEFAULT_NAPI_MODE = 'async';

/**
 * @param {string} tier one of TIERS
 * @param {{cliPath?: string, cliTimeoutMs?: number, napiMode?: string}} opts
 */
function createTier(tier, opts = {}) {
  const paths = artifactPaths();
  switch (tier) {
    case '0':
      return { name: 'tier 0 (npm qrcode, matched)', render: (text) => npmQr.matchedPng(text), close() {} };
    case '0-article':
      return { name: 'tier 0-article (npm qrcode, published settings)', render: (text) => npmQr.articlePng(text), close() {} };
    case '1': {
      const cliPath = opts.cliPath || requireArtifact(paths.cli, 'tier 1 CLI (qr-cli)');
      const cli = createCliTier({ cliPath, timeoutMs: opts.cliTimeoutMs ?? 5000 });
      // wantsSignal: the server passes an AbortSignal that fires when the client goes away.
      return { name: 'tier 1 (qr-cli per request)', render: cli.render, close: cli.close, wantsSignal: true };
    }
    case '2': {
      const wasm = require(requireArtifact(paths.wasmBindgen, 'tier 2 wasm-bindgen module'));
      const render = (text) => {
        const bytes = wasm.qr_png(text);
        // wasm-bindgen already copied the Vec<u8> out of wasm memory: wrap, no second copy.
        return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      };
      return { name: 'tier 2 (wasm-bindgen)', render, close() {} };
    }
    case '2-raw': {
      const raw = loadRawQr(requireArtifact(paths.wasmRaw, 'tier 2-raw module (qr_raw.wasm)'));
      return { name: 'tier 2-raw (hand-written wasm bindings)', render: raw.qrPng, close() {} };
    }
    case '3': {
      const mode = opts.napiMode || DEFAULT_NAPI_MODE;
      if (!NAPI_MODES.includes(mode)) throw new Error(`napi mode must be sync or async, not ${mode}`);
      const addon = require(requireArtifact(paths.napi, 'tier 3 addon (qr_napi.node)'));
      const render = mode === 'sync' ? (text) => addon.qrPng(text) : (text) => addon.qrPngAsync(text);
      return { name: `tier 3 (napi addon, ${mode})`, render, close() {} };
    }
    default:
      throw new Error(`unknown tier ${tier}; expected one of ${TIERS.join(', ')}`);
  }
}

module.exports = { TIERS, NAPI_MODES, DEFAULT_NAPI_MODE, createTier };
