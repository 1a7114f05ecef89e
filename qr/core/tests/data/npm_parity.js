// Regenerates npm_parity.jsonl: the modules npm `qrcode` draws for a fixed set of texts,
// configured as docs/qr.md's output contract says (one byte segment, level M).
// Usage: node npm_parity.js /path/to/node_modules/qrcode > npm_parity.jsonl
const QRCode = require(process.argv[2] || 'qrcode');
let seed = 12345;
const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
const alphabet = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 -_./:?=&%żółć🚀';
const texts = ['hi', 'hello world', 'https://example.com/?a=1', 'HELLO WORLD', '0123456789',
  'zażółć gęślą jaźń 🚀', 'x'.repeat(512), '🚀'.repeat(128), 'A'.repeat(100)];
for (let i = 0; i < 40; i++) {
  const n = 1 + Math.floor(rnd() * 300);
  let t = '';
  for (let j = 0; j < n; j++) t += [...alphabet][Math.floor(rnd() * [...alphabet].length)];
  while (Buffer.byteLength(t) > 512) t = [...t].slice(0, -1).join('');
  texts.push(t);
}
for (const text of texts) {
  const q = QRCode.create([{ data: Buffer.from(text, 'utf8'), mode: 'byte' }], { errorCorrectionLevel: 'M' });
  const { size, data } = q.modules;
  const bytes = Buffer.alloc(Math.ceil(size * size / 8));
  for (let i = 0; i < size * size; i++) if (data[i]) bytes[i >> 3] |= 0x80 >> (i & 7);
  process.stdout.write(JSON.stringify({ text, size, mask: q.maskPattern, version: q.version, modules_hex: bytes.toString('hex') }) + '\n');
}
