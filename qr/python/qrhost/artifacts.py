"""Where the Rust artifacts of the ladder live. Every path honours CARGO_TARGET_DIR, as
qr/node's do: CI builds into its own target directory, developers into theirs."""

import os

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BUILD_HINT = "run `./run build` (or `bash scripts/build-qr.sh`) from the repository root"


def target_dir():
    t = os.environ.get("CARGO_TARGET_DIR")
    return os.path.abspath(t) if t else os.path.join(REPO_ROOT, "target")


def paths():
    """Paths of every artifact, by name."""
    t = target_dir()
    return {
        "cli": os.path.join(t, "release", "qr-cli"),
        "wasm_raw": os.path.join(t, "qr", "qr_raw.wasm"),
        "server": os.path.join(t, "release", "qr-server"),
        "percall": os.path.join(t, "release", "examples", "percall"),
    }


def require(path, what):
    """`path` if it exists, else a FileNotFoundError that says how to build it."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"missing {what} at {path}: {BUILD_HINT}")
    return path
