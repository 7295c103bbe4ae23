//! A test-only package: `tests/dependencies.rs` reads `cargo metadata` and fails when a
//! crate of the workspace depends on one it must not (see `docs/architecture.md`).
