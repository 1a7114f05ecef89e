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

module.exports = { MAX_TEXT_BYTES, QrError, emptyText, tooLong, internal, validateText, fromBindingError };
