//! Tier 3 of the QR ladder: qr-core as a Node native addon (napi-rs).
