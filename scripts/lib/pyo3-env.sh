# Sourced by scripts/build.sh and scripts/build-qr.sh: the Python that PyO3's build script
# configures against, spelled as maturin spells it when it builds the tier-3 wheel (the
# interpreter's own path, not a shim's, and its "cpython-3.11-64bit" signature). pyo3's
# build script re-runs when PYO3_PYTHON or PYO3_ENVIRONMENT_SIGNATURE change, and every
# pyo3 crate above it is compiled again: with the same two values in the workspace build
# and in maturin's, the wheel reuses what the workspace build compiled (docs/CI.md).
if command -v python3 >/dev/null 2>&1; then
    read -r PYO3_PYTHON PYO3_ENVIRONMENT_SIGNATURE < <(python3 -c 'import platform, struct, sys; v = sys.version_info; print(sys.executable, "%s-%d.%d-%dbit" % (platform.python_implementation().lower(), v[0], v[1], struct.calcsize("P") * 8))')
    export PYO3_PYTHON PYO3_ENVIRONMENT_SIGNATURE
fi
