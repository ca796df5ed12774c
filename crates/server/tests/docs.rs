//! docs/architecture.md names every source file of the server: a module added without a line
//! there fails here (issue 49: docs true to the code).

use std::path::{Path, PathBuf};

fn sources(dir: &Path, root: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p: PathBuf = e.unwrap().path();
        if p.is_dir() {
            sources(&p, root, out);
        } else if p.extension().is_some_and(|x| x == "rs")
            && p.file_name().is_some_and(|n| n != "tests.rs")
        {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            out.push(rel);
        }
    }
}

#[test]
fn the_architecture_doc_lists_every_server_module() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = crate_dir.join("src");
    let doc = std::fs::read_to_string(crate_dir.join("../../docs/architecture.md")).unwrap();
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    files.sort();
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| !doc.contains(&format!("  {f} ")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md's file list lacks {missing:?}"
    );
}
