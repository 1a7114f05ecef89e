//! Module matrix → grayscale PNG bytes, with the fixed scale, margin, filter and deflate.

use crate::{MARGIN_MODULES, Modules, PIXELS_PER_MODULE, QrError};

/// PNG row filter: chosen by measurement, see the crate docs.
pub(crate) const FILTER: png::Filter = png::Filter::Adaptive;
/// Deflate setting: chosen by measurement, see the crate docs.
pub(crate) const DEFLATE: png::DeflateCompression = png::DeflateCompression::FdeflateUltraFast;

/// Side of the image in pixels for a symbol of `modules` modules.
pub(crate) fn image_side(modules: usize) -> usize {
    (modules + 2 * MARGIN_MODULES) * PIXELS_PER_MODULE
}

/// Raw 8-bit grayscale pixels (0 = dark, 255 = light), row-major, no filter bytes.
pub(crate) fn pixels(m: &Modules) -> Vec<u8> {
    let side = image_side(m.size());
    let mut img = vec![255u8; side * side];
    let mut row = vec![255u8; side];
    for y in 0..m.size() {
        for x in 0..m.size() {
            let v = if m.is_dark(x, y) { 0 } else { 255 };
            let start = (x + MARGIN_MODULES) * PIXELS_PER_MODULE;
            row[start..start + PIXELS_PER_MODULE].fill(v);
        }
        let top = (y + MARGIN_MODULES) * PIXELS_PER_MODULE;
        for r in top..top + PIXELS_PER_MODULE {
            img[r * side..(r + 1) * side].copy_from_slice(&row);
        }
    }
    img
}

/// Encodes `m` as the contract's PNG.
pub(crate) fn encode_png(m: &Modules) -> Result<Vec<u8>, QrError> {
    let side = image_side(m.size());
    let img = pixels(m);
    // Header + a well compressed body stays far below the raw size; avoid regrowth.
    let mut out = Vec::with_capacity(1024 + side * side / 16);
    let side32 = u32::try_from(side).map_err(|_| QrError::Encode("image too large".into()))?;
    let mut encoder = png::Encoder::new(&mut out, side32, side32);
    encoder.set_color(png::ColorType::Grayscale);
    encoder.set_depth(png::BitDepth::Eight);
    // Deflate first, filter second: `set_compression` would also reset the filter.
    encoder.set_deflate_compression(DEFLATE);
    encoder.set_filter(FILTER);
    let png_err = |e: png::EncodingError| QrError::Encode(format!("png: {e}"));
    let mut writer = encoder.write_header().map_err(png_err)?;
    writer.write_image_data(&img).map_err(png_err)?;
    writer.finish().map_err(png_err)?;
    Ok(out)
}
