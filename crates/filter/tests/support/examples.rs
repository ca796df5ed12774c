//! The SDK's example filters, built once per test binary: WebAssembly (wasm32-unknown-unknown)
//! and native (shared libraries for this host), both in release mode, in a target directory
//! of their own so the build never waits on the `cargo test` that runs us.
//!
//! Shared by the filter host's tests, the server's black-box tests and the SDK's native tests
//! (`#[path]`-included).

#![allow(dead_code)] // each test binary uses part of it

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

pub struct Examples {
    wasm: PathBuf,
    native: PathBuf,
}

impl Examples {
    /// `topk`, `select`, `hostile_loop`, ... as a `.wasm` module.
    pub fn wasm(&self, name: &str) -> PathBuf {
        let p = self.wasm.join(format!("{name}.wasm"));
        assert!(p.exists(), "{} was not built", p.display());
        p
    }

    /// The same example as a native shared library.
    pub fn native(&self, name: &str) -> PathBuf {
        let p = self.native.join(format!("lib{name}.so"));
        assert!(p.exists(), "{} was not built", p.display());
        p
    }
}

pub fn examples() -> &'static Examples {
    static BUILT: OnceLock<Examples> = OnceLock::new();
    BUILT.get_or_init(build)
}

fn build() -> Examples {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let dir = target.join("filter-examples");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    for extra in [&["--target", "wasm32-unknown-unknown"][..], &[]] {
        let status = Command::new(&cargo)
            .current_dir(&root)
            .args([
                "build",
                "--quiet",
                "--release",
                "-p",
                "mnemo-filter-examples",
                "--examples",
            ])
            // Optimized, but without the workspace release profile's thin LTO and debug info:
            // seven cdylibs each linked with LTO took 31 s of CPU, 1.5 s without.
            .args([
                "--config",
                "profile.release.lto=false",
                "--config",
                "profile.release.debug=0",
            ])
            .arg("--target-dir")
            .arg(&dir)
            .args(extra)
            .status()
            .expect("run cargo");
        assert!(
            status.success(),
            "building the example filters failed{}",
            if extra.is_empty() {
                ""
            } else {
                " (is the target installed? rustup target add wasm32-unknown-unknown)"
            }
        );
    }
    Examples {
        wasm: dir.join("wasm32-unknown-unknown/release/examples"),
        native: dir.join("release/examples"),
    }
}
