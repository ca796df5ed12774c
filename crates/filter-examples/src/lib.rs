//! The example filters of `mnemo-filter-sdk`, as `examples/*.rs` (each a `cdylib`): what a
//! filter author copies from, and what the tests load into the filter host and the server.
//!
//! ```text
//!   examples/topk.rs, select.rs     seed 001's filters: the K newest records; records matching
//!                                   a predicate
//!   examples/hostile_*.rs           filters that loop, grow memory, trap, overflow the stack or
//!                                   write past their output: the host's limits are tested with
//!                                   them (as WebAssembly only: natively they would do it)
//! ```
//!
//! `cargo build -p mnemo-filter-examples --examples --release --target wasm32-unknown-unknown`
//! gives `target/wasm32-unknown-unknown/release/examples/<name>.wasm`; the same without
//! `--target` gives native `lib<name>.so` files. This library target is empty: a package needs
//! one, and the examples are the point. They are a package of their own, with no
//! dev-dependencies, because cargo builds a package's dev-dependencies for its examples.
