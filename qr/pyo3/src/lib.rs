//! Tier 3 of the QR ladder for Python: `qr_core::png` as a CPython extension module (PyO3).
//!
//! Built by maturin as an abi3 wheel (the stable ABI from CPython 3.11 on: one wheel for
//! every later interpreter) by `scripts/build-qr.sh`, installed into the Python host's
//! virtual environment (`qr/python`, docs/qr-python.md). Exports, `import qr_pyo3`:
//!
//! * `png(text: str | bytes) -> bytes` — the PNG of `text` (a `str`, or its UTF-8 bytes as
//!   the host percent-decoded them). The GIL is released for the render, so other Python
//!   threads run meanwhile (the host's thread-pool variant renders on a worker thread).
//! * `MAX_TEXT_BYTES` — 512.
//! * `bare_ns(text: str, calls: int) -> int` — for the per-call bench only
//!   (`qr/python/bench/percall.py`): `calls` renders of `text` in a Rust loop, no Python in
//!   between, the GIL released; the wall nanoseconds they took. It is the bare function,
//!   timed in the same process as the binding, so the binding's overhead is a difference
//!   of two figures taken side by side.
//!
//! Failures raise `ValueError` whose message is the wire code of every tier: `empty`,
//! `too_long`, `invalid_utf8` (bytes only) or `encode: …`; another type is a `TypeError`.
//!
//! This crate must NOT hold state between calls and must NOT touch Python objects while the
//! GIL is released: the input is borrowed before, the `bytes` made after.
//!
//! ```python
//! import qr_pyo3
//! png = qr_pyo3.png("hi")          # bytes, b"\x89PNG..."
//! same = qr_pyo3.png(b"hi")        # the same bytes
//! ```
// The #[pymodule] and #[pyfunction] macros expand to registration items without docs.
#![allow(missing_docs)]

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

fn value_error(e: qr_core::QrError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// `text` → PNG bytes, the GIL released during the render.
#[pyfunction]
fn png<'py>(py: Python<'py>, text: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    let text: &str = if let Ok(bytes) = text.cast::<PyBytes>() {
        let b = bytes.as_bytes();
        // The order of checks of every tier: the length in bytes before UTF-8.
        if b.len() > qr_core::MAX_TEXT_BYTES {
            return Err(value_error(qr_core::QrError::TooLong { len: b.len() }));
        }
        std::str::from_utf8(b).map_err(|_| PyValueError::new_err("invalid_utf8"))?
    } else if let Ok(s) = text.cast::<PyString>() {
        // CPython keeps a str's UTF-8 form once made (an ASCII str is its own).
        s.to_str()?
    } else {
        return Err(PyTypeError::new_err("text must be str or bytes"));
    };
    // Nothing of Python is touched inside: `text` borrows memory the argument keeps alive.
    let rendered = py.detach(|| qr_core::png(text));
    Ok(PyBytes::new(py, &rendered.map_err(value_error)?))
}

/// `calls` bare renders of `text`, timed in Rust (the per-call bench's reference).
#[pyfunction]
fn bare_ns(py: Python<'_>, text: &str, calls: u64) -> PyResult<u64> {
    py.detach(|| {
        let start = std::time::Instant::now();
        for _ in 0..calls {
            qr_core::png(std::hint::black_box(text)).map_err(value_error)?;
        }
        Ok(u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    })
}

#[pymodule]
fn qr_pyo3(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(png, m)?)?;
    m.add_function(wrap_pyfunction!(bare_ns, m)?)?;
    m.add("MAX_TEXT_BYTES", qr_core::MAX_TEXT_BYTES)?;
    Ok(())
}
