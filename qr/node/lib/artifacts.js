'use strict';
// Where the Rust artifacts of the ladder live. Every path honours CARGO_TARGET_DIR,
// because CI builds into /work/main/target and developers into their own dirs.

const fs = require('node:fs');
const path = require('node:path');

const REPO_ROOT = path.resolve(__dirname, '..', '..', '..');
const BUILD_HINT = 'run `bash scripts/build-qr.sh` from the repository root';

function targetDir() {
  const t = process.env.CARGO_TARGET_DIR;
  return t ? path.resolve(t) : path.join(REPO_ROOT, 'target');
}

/** Paths of every artifact, by tier. */
function artifactPaths() {
  const t = targetDir();
  return {
    cli: path.join(t, 'release', 'qr-cli'),
    wasmBindgen: path.join(t, 'qr', 'wasm-bindgen', 'qr_wasm.js'),
    wasmRaw: path.join(t, 'qr', 'qr_raw.wasm'),
    napi: path.join(t, 'qr', 'qr_napi.node'),
    server: path.join(t, 'release', 'qr-server'),
  };
}

/** Returns `file` if it exists, else throws an Error that says how to build it. */
function requireArtifact(file, what) {
  if (!fs.existsSync(file)) {
    throw new Error(`missing ${what} at ${file}: ${BUILD_HINT}`);
  }
  return file;
}

module.exports = { REPO_ROOT, BUILD_HINT, targetDir, artifactPaths, requireArtifact };
