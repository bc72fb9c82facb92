//! The documentation names files a reader can open: every backticked
//! repository path in ARCHITECTURE.md, docs/ and the READMEs exists, and no
//! document points at material outside the repository.

use std::path::Path;

fn docs() -> Vec<std::path::PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("ARCHITECTURE.md"), root.join("README.md")];
    for dir in ["docs", "crates"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "md") {
                files.push(p.clone());
            }
            if p.join("README.md").exists() {
                files.push(p.join("README.md"));
            }
        }
    }
    files
}

/// Backticked words that look like repository paths: `src/...`, `crates/...`,
/// `tests/...`, `docs/...`, `scripts/...`, `deploy/...`, `fuzz/...`.
fn paths_in(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|w| w.trim_end_matches([',', '.', ')']))
        .filter(|w| {
            [
                "src/", "crates/", "tests/", "docs/", "scripts/", "deploy/", "fuzz/",
            ]
            .iter()
            .any(|p| w.starts_with(p))
                && !w.contains([' ', '*', '{', '<', '…'])
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn every_path_named_in_the_docs_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let base = doc.parent().unwrap();
        for p in paths_in(&text) {
            checked += 1;
            // Paths are relative to the repository, or to the crate of a crate README.
            if !root.join(&p).exists() && !base.join(&p).exists() {
                missing.push(format!(
                    "{}: `{p}`",
                    doc.strip_prefix(root).unwrap().display()
                ));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} paths found: is the pattern right?"
    );
    assert!(
        missing.is_empty(),
        "documents name files that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn no_document_points_outside_the_repository() {
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for bad in ["SEEDS.md", "shared/seeds", "../shared"] {
            assert!(!text.contains(bad), "{} mentions {bad}", doc.display());
        }
    }
    for lib in [
        "crates/nvjournal/src/lib.rs",
        "crates/ublk-target/src/lib.rs",
        "crates/ftl/src/lib.rs",
    ] {
        let text =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(lib)).unwrap();
        assert!(!text.contains("SEEDS.md"), "{lib} cites SEEDS.md");
    }
}
