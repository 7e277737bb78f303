//! The shape of the workspace that CONTRIBUTING.md describes, kept by a test: one name per type
//! across the crates, and the crate edges that must not exist (the proxy never depends on the
//! load generator; the report crate has no tokio and no redis).
//!
//! The layering inside `src/` is `tests/layers.rs`'s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every crate's source folder, as the workspace lists its members.
const CRATE_SOURCES: &[&str] = &[
    "src",
    "harness/src",
    "loadgen/src",
    "report/src",
    "proxy/src",
    "cli/src",
    "redis-proc/src",
    "tests/support/src",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("a folder entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The type names a file defines (`struct`, `enum`, `trait`, `type`, `union`), with their line
/// numbers, leaving out what follows the file's first `#[cfg(test)]` (unit-test helpers).
fn defined_types(text: &str) -> Vec<(usize, String)> {
    let mut names = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            break;
        }
        let mut words = t.split_whitespace().peekable();
        // Visibility: `pub`, `pub(crate)`, `pub(super)`, `pub(in path)`.
        if words.peek().is_some_and(|w| w.starts_with("pub")) {
            let w = words.next().unwrap_or_default();
            if w == "pub(in" {
                words.next();
            }
        }
        let Some(kind) = words.next() else { continue };
        if !matches!(kind, "struct" | "enum" | "trait" | "type" | "union") {
            continue;
        }
        let Some(rest) = words.next() else { continue };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.chars().next().is_some_and(char::is_uppercase) {
            names.push((i + 1, name));
        }
    }
    names
}

/// Type name -> the crates (source folders) defining it, with one place each.
fn definitions() -> BTreeMap<String, BTreeMap<&'static str, String>> {
    let root = repo();
    let mut by_name: BTreeMap<String, BTreeMap<&'static str, String>> = BTreeMap::new();
    for krate in CRATE_SOURCES {
        let mut files = Vec::new();
        rust_files(&root.join(krate), &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).expect("read a source file");
            for (line, name) in defined_types(&text) {
                let place = format!(
                    "{}:{line}",
                    file.strip_prefix(&root).unwrap_or(&file).display()
                );
                by_name
                    .entry(name)
                    .or_default()
                    .entry(krate)
                    .or_insert(place);
            }
        }
    }
    by_name
}

#[test]
fn no_type_name_is_defined_in_two_crates() {
    let clashes: Vec<String> = definitions()
        .into_iter()
        .filter(|(_, crates)| crates.len() > 1)
        .map(|(name, crates)| {
            let places: Vec<String> = crates.into_values().collect();
            format!("`{name}` in {}", places.join(" and "))
        })
        .collect();
    assert!(
        clashes.is_empty(),
        "one name per type across the crates (CONTRIBUTING.md); rename one of each:\n{}",
        clashes.join("\n")
    );
}

#[test]
fn the_scan_sees_definitions_in_every_form() {
    let text = "pub struct A;\npub(crate) enum B {}\ntrait C {}\n  pub(in crate::x) type D = u8;\n\
                struct lower;\n#[cfg(test)]\nmod tests { struct E; }\n";
    let names: Vec<String> = defined_types(text).into_iter().map(|(_, n)| n).collect();
    assert_eq!(names, ["A", "B", "C", "D"]);
    // The real tree has hundreds: an empty scan would pass the clash test for nothing.
    assert!(definitions().len() > 200, "the scan found too few types");
}

/// The normal and dev dependencies a crate's Cargo.toml names, by package name.
fn dependencies(manifest: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join(manifest)).expect("read a Cargo.toml");
    let mut section = String::new();
    let mut deps = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            section = t.to_string();
            continue;
        }
        if section.ends_with("dependencies]") {
            if let Some((name, _)) = t.split_once('=') {
                deps.push(name.trim().trim_end_matches(".workspace").to_string());
            }
        }
    }
    deps
}

#[test]
fn the_proxy_never_depends_on_the_load_generator() {
    let deps = dependencies("proxy/Cargo.toml");
    assert!(
        deps.iter().any(|d| d == "lockkit-report"),
        "the scan read nothing: {deps:?}"
    );
    assert!(
        !deps.iter().any(|d| d == "lockkit-loadgen"),
        "proxy/Cargo.toml names lockkit-loadgen: what both need belongs in report/ (CONTRIBUTING.md)"
    );
}

#[test]
fn the_report_crate_has_no_runtime_and_no_redis() {
    let deps = dependencies("report/Cargo.toml");
    assert!(
        deps.iter().any(|d| d == "serde"),
        "the scan read nothing: {deps:?}"
    );
    for banned in [
        "tokio",
        "redis",
        "lockkit",
        "lockkit-loadgen",
        "lockkit-proxy",
    ] {
        assert!(
            !deps.iter().any(|d| d == banned),
            "report/Cargo.toml names {banned}: the report crate stays free of runtimes and servers"
        );
    }
}
