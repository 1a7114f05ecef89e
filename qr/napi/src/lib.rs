//! Tier 3 of the QR ladder: `qr_core::png` as a Node native addon (napi-rs).
//!
//! Exports, loaded with `require('…/qr_napi.node')`:
//!
//! * `qrPng(text: string): Buffer` — synchronous, on the calling JS thread.
//! * `qrPngAsync(text: string): Promise<Buffer>` — an `AsyncTask`: the PNG is rendered on
//!   the libuv thread pool, the event loop stays free.
//!
//! Failures throw (or reject with) an `Error` whose message is `empty`, `too_long` or
//! `encode: …`, the same strings as every other tier.
//!
//! This crate must NOT hold state between calls, and must NOT do work on the JS thread
//! in the async export beyond copying the string in and the bytes out.
//!
//! Built by `scripts/build-qr.sh` (cargo, release) and copied to
//! `$CARGO_TARGET_DIR/qr/qr_napi.node`; no `@napi-rs/cli` needed.
//!
//! ```js
//! const { qrPng, qrPngAsync } = require(process.env.CARGO_TARGET_DIR + '/qr/qr_napi.node');
//! const png = qrPng('hi');            // Buffer
//! const same = await qrPngAsync('hi'); // Buffer, rendered off the event loop
//! ```
// The #[napi] macro expands to registration items without docs.
#![allow(missing_docs)]

use napi::bindgen_prelude::{AsyncTask, Buffer};
use napi::{Env, Task};
use napi_derive::napi;

fn js_error(e: qr_core::QrError) -> napi::Error {
    // from_reason: the JS Error's message is exactly the wire code.
    napi::Error::from_reason(e.to_string())
}

/// `text` → PNG, synchronously.
#[napi]
pub fn qr_png(text: String) -> napi::Result<Buffer> {
    qr_core::png(&text).map(Buffer::from).map_err(js_error)
}

/// The libuv-pool job behind `qrPngAsync`.
#[derive(Debug)]
pub struct PngTask {
    text: String,
}

impl Task for PngTask {
    type Output = Vec<u8>;
    type JsValue = Buffer;

    fn compute(&mut self) -> napi::Result<Vec<u8>> {
        qr_core::png(&self.text).map_err(js_error)
    }

    fn resolve(&mut self, _env: Env, output: Vec<u8>) -> napi::Result<Buffer> {
        Ok(Buffer::from(output))
    }
}

/// `text` → `Promise<PNG>`, rendered on the libuv thread pool.
#[napi]
pub fn qr_png_async(text: String) -> AsyncTask<PngTask> {
    AsyncTask::new(PngTask { text })
}
