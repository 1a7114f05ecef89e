//! The QR ladder's one hot function: text to PNG bytes, with fixed output parameters.
