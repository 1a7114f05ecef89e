'use strict';
// The HTTP contract every tier shares (the Rust tier-4 server implements the same one):
// which text is accepted, and how each failure maps to a status and a JSON body.

/** Longest accepted text, counted in UTF-8 bytes (the published bindings counted UTF-16 units). */
const MAX_TEXT_BYTES = 512;

/** A failure with the HTTP status it answers with. `kind` is stable, for tests and logs. */
class QrError extends Error {
  constructor(kind, status, message) {
    super(message);
    this.name = 'QrError';
    this.kind = kind;
    this.status = status;
  }
}

const emptyText = () => new QrError('empty', 400, 'text is missing or empty');
const tooLong = (bytes) =>
  new QrError('too_long', 413, `text is ${bytes} UTF-8 bytes; the limit is ${MAX_TEXT_BYTES}`);
const internal = (message) => new QrError('internal', 500, message);

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The first `text` parameter of `rawQuery`, or null, reading the decoded bytes as strict
 * UTF-8. URLSearchParams replaces invalid UTF-8 (`%FF`) with U+FFFD; the contract (and the
 * Rust server) answer 400 instead of encoding a different text than the one sent. Only
 * called when URLSearchParams' result contains U+FFFD, so the common path stays cheap.
 * Throws QrError 400 on invalid UTF-8.
 */
function strictTextParam(rawQuery) {
  for (const pair of rawQuery.split('&')) {
    const eq = pair.indexOf('=');
    const key = eq === -1 ? pair : pair.slice(0, eq);
    if (new URLSearchParams(`${key}=`).keys().next().value !== 'text') continue;
    const value = eq === -1 ? '' : pair.slice(eq + 1);
    try {
      return strictUtf8.decode(percentDecodeBytes(value));
    } catch {
      throw new QrError('invalid_utf8', 400, 'text is not valid UTF-8');
    }
  }
  return null;
}

/** application/x-www-form-urlencoded byte decoding: `+` is a space, `%XX` a byte, a malformed `%` stays. */
function percentDecodeBytes(s) {
  const raw = Buffer.from(s, 'utf8');
  const out = Buffer.alloc(raw.length);
  let n = 0;
  for (let i = 0; i < raw.length; i++) {
    const b = raw[i];
    if (b === 0x2b) out[n++] = 0x20;
    else if (b === 0x25 && i + 2 < raw.length && isHex(raw[i + 1]) && isHex(raw[i + 2])) {
      out[n++] = parseInt(String.fromCharCode(raw[i + 1], raw[i + 2]), 16);
      i += 2;
    } else out[n++] = b;
  }
  return out.subarray(0, n);
}

function isHex(b) {
  return (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x46) || (b >= 0x61 && b <= 0x66);
}

/**
 * Checks the text before any tier sees it. Returns the text, or throws a QrError.
 * `text` is what URLSearchParams.get returned (null when the parameter is absent).
 */
function validateText(text) {
  if (text === null || text === '') throw emptyText();
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > MAX_TEXT_BYTES) throw tooLong(bytes);
  return text;
}

/**
 * Maps an error thrown by a Rust binding (wasm-bindgen, napi: message `empty`,
 * `too_long` or `encode: ...`) to a QrError. Anything else is a 500.
 */
function fromBindingError(err) {
  if (err instanceof QrError) return err;
  const message = err && typeof err.message === 'string' ? err.message : String(err);
  if (message === 'empty') return emptyText();
  if (message === 'too_long') return new QrError('too_long', 413, 'text is longer than 512 UTF-8 bytes');
  return internal(`qr function failed: ${message}`);
}

module.exports = { MAX_TEXT_BYTES, QrError, emptyText, tooLong, internal, validateText, fromBindingError, strictTextParam };
