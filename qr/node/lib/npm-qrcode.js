'use strict';
// Tier 0: pure Node, npm `qrcode`, in two configurations.
//
// - matched: the SAME image as the Rust function (docs/qr.md): EC level M, 4 px per
//   module, a 4-module quiet zone, the same segment (mode) rule, 8-bit grayscale, and
//   PNG filter/deflate settings comparable to the Rust encoder's. Rendered with npm
//   qrcode's own renderer, packed synchronously (the Rust function is synchronous too).
// - article: the published configuration, kept to show what changing only the
//   settings does: `QRCode.toBuffer(text, { width: 200, rendererOpts: { deflateLevel: 9,
//   deflateStrategy: 3 } })`: RGBA, non-integer scale, adaptive filters, RLE-only deflate.

const QRCode = require('qrcode');
// npm qrcode's own PNG renderer; it fills a pngjs PNG (its bundled pngjs) with RGBA.
const pngRenderer = require('qrcode/lib/renderer/png');

// pngjs constants, spelled out.
const COLORTYPE_GRAYSCALE = 0;
const COLORTYPE_COLOR_ALPHA = 6;

/** Output settings of the matched configuration; keep in step with docs/qr.md. */
const MATCHED = Object.freeze({
  errorCorrectionLevel: 'M',
  scale: 4,
  margin: 4,
  // pngjs: filterType -1 = adaptive (all five tried per row), or one fixed filter 0..4.
  filterType: 2, // Up on every row, like the Rust encoder
  // The Rust encoder uses fdeflate's fast mode; zlib's fastest level is the nearest
  // counterpart pngjs offers (and still writes smaller files: docs/qr-node.md).
  deflateLevel: 1,
  deflateStrategy: 0, // Z_DEFAULT_STRATEGY
});

/** The published options, verbatim. */
const ARTICLE_OPTIONS = Object.freeze({ width: 200, rendererOpts: { deflateLevel: 9, deflateStrategy: 3 } });

/** The segment rule of docs/qr.md: one byte-mode segment of the UTF-8 bytes, no ECI. */
function segmentsFor(text) {
  return [{ data: Buffer.from(text, 'utf8'), mode: 'byte' }];
}

function matchedQrData(text) {
  return QRCode.create(segmentsFor(text), { errorCorrectionLevel: MATCHED.errorCorrectionLevel });
}

/** text -> PNG (sync), the matched configuration. */
function matchedPng(text) {
  const qr = matchedQrData(text);
  // render() fills RGBA pixels; the packer converts them to 8-bit grayscale.
  const png = pngRenderer.render(qr, { scale: MATCHED.scale, margin: MATCHED.margin, rendererOpts: {} });
  return png.constructor.sync.write(png, {
    colorType: COLORTYPE_GRAYSCALE,
    inputColorType: COLORTYPE_COLOR_ALPHA,
    bitDepth: 8,
    filterType: MATCHED.filterType,
    deflateLevel: MATCHED.deflateLevel,
    deflateStrategy: MATCHED.deflateStrategy,
  });
}

/** The matched image through the public async API (stream deflate on the libuv pool); bench only. */
function matchedPngViaToBuffer(text) {
  return QRCode.toBuffer(segmentsFor(text), {
    errorCorrectionLevel: MATCHED.errorCorrectionLevel,
    scale: MATCHED.scale,
    margin: MATCHED.margin,
    rendererOpts: {
      colorType: COLORTYPE_GRAYSCALE,
      inputColorType: COLORTYPE_COLOR_ALPHA,
      bitDepth: 8,
      filterType: MATCHED.filterType,
      deflateLevel: MATCHED.deflateLevel,
      deflateStrategy: MATCHED.deflateStrategy,
    },
  });
}

/** text -> Promise<PNG>, the published configuration (a fresh options object: qrcode mutates rendererOpts). */
function articlePng(text) {
  return QRCode.toBuffer(text, { width: ARTICLE_OPTIONS.width, rendererOpts: { ...ARTICLE_OPTIONS.rendererOpts } });
}

module.exports = { MATCHED, ARTICLE_OPTIONS, segmentsFor, matchedQrData, matchedPng, matchedPngViaToBuffer, articlePng };
