//! Reads the workspace's Cargo.lock and hands each peer library's exact locked version to the
//! adapters (`env!("STRATA_COMPARE_<CRATE>")`), so that a report names what was really linked and
//! cannot drift from the lock file after a `cargo update`.

use std::path::{Path, PathBuf};

/// The crates whose versions the adapters report: (environment variable, parent, crate).
const WANTED: &[(&str, &str, &str)] = &[
    ("STRATA_COMPARE_REDB", "strata-compare", "redb"),
    ("STRATA_COMPARE_HEED", "strata-compare", "heed"),
    ("STRATA_COMPARE_LMDB_SYS", "heed", "lmdb-master-sys"),
    ("STRATA_COMPARE_FJALL", "strata-compare", "fjall"),
    ("STRATA_COMPARE_LSM_TREE", "fjall", "lsm-tree"),
    ("STRATA_COMPARE_ROCKSDB", "strata-compare", "rocksdb"),
    ("STRATA_COMPARE_LIBROCKSDB_SYS", "rocksdb", "librocksdb-sys"),
];

struct Package {
    name: String,
    version: String,
    /// As the lock writes them: "name", or "name version" when several versions are locked.
    dependencies: Vec<String>,
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let lock = find_lock(&manifest);
    let packages = match &lock {
        Some(path) => {
            println!("cargo:rerun-if-changed={}", path.display());
            parse(&std::fs::read_to_string(path).unwrap_or_default())
        }
        None => Vec::new(),
    };
    for (var, parent, name) in WANTED {
        let version = resolve(&packages, parent, name).unwrap_or_else(|| "unknown".into());
        println!("cargo:rustc-env={var}={version}");
    }
}

/// The nearest Cargo.lock at or above the crate (the workspace root's).
fn find_lock(from: &Path) -> Option<PathBuf> {
    from.ancestors()
        .map(|d| d.join("Cargo.lock"))
        .find(|p| p.is_file())
}

fn unquote(s: &str) -> String {
    s.trim()
        .trim_end_matches(',')
        .trim()
        .trim_matches('"')
        .to_string()
}

fn parse(text: &str) -> Vec<Package> {
    let mut out = Vec::new();
    for block in text.split("[[package]]").skip(1) {
        let mut p = Package {
            name: String::new(),
            version: String::new(),
            dependencies: Vec::new(),
        };
        let mut in_deps = false;
        for line in block.lines() {
            let line = line.trim();
            if in_deps {
                if line.starts_with(']') {
                    in_deps = false;
                } else if !line.is_empty() {
                    p.dependencies.push(unquote(line));
                }
            } else if let Some(v) = line.strip_prefix("name = ") {
                p.name = unquote(v);
            } else if let Some(v) = line.strip_prefix("version = ") {
                p.version = unquote(v);
            } else if line.starts_with("dependencies = [") {
                in_deps = !line.ends_with(']');
            }
        }
        out.push(p);
    }
    out
}

/// The version of `name` that `parent` depends on.
fn resolve(packages: &[Package], parent: &str, name: &str) -> Option<String> {
    let parent = packages.iter().find(|p| p.name == parent)?;
    let dep = parent
        .dependencies
        .iter()
        .find(|d| d.split_whitespace().next() == Some(name))?;
    if let Some(version) = dep.split_whitespace().nth(1) {
        return Some(version.to_string());
    }
    // Only one version of the crate is locked.
    packages
        .iter()
        .find(|p| p.name == name)
        .map(|p| p.version.clone())
}
