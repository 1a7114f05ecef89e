'use strict';
// The fixed text set of every QR bench: several lengths, ASCII and multi-byte.
// Labels carry the UTF-8 byte length.

const TEXTS = [
  ['hello world', ''],
  ['https://example.com/orders/12345?ref=qr&x=1', 'url'],
  ['Zażółć gęślą jaźń — 日本語のテキスト — '.padEnd(96, '·'), 'utf8'],
  ['k'.repeat(256), ''],
  ['z'.repeat(512), ''],
].map(([text, note]) => ({ label: `${Buffer.byteLength(text)} B${note ? ` ${note}` : ''}`, text }));

module.exports = { TEXTS };
