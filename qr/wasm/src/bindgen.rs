//! The wasm-bindgen face (tier 2).

use wasm_bindgen::prelude::*;

/// `text` → PNG bytes (a fresh `Uint8Array` owned by JS).
///
/// # Errors
/// Throws `Error("empty")`, `Error("too_long")` or `Error("encode: …")`.
#[wasm_bindgen]
pub fn qr_png(text: &str) -> Result<Vec<u8>, JsError> {
    qr_core::png(text).map_err(|e| JsError::new(&e.to_string()))
}
