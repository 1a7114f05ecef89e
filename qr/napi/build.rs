//! Emits the link arguments a Node addon needs (undefined napi symbols resolve at load).

fn main() {
    napi_build::setup();
}
