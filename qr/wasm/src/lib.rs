//! Tier 2 of the QR ladder: qr-core compiled to wasm32, with wasm-bindgen and with a raw ABI.
