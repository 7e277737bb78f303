//! `src/` stays in layers: the layer list in the crate docs (`src/lib.rs`, "# Layers") puts
//! every file of `src/` in one layer, and a file names (in `use` lines, multi-line groups
//! included, and in inline paths) only `crate::`/`super::` items of its own layer or a lower
//! one, but for the exception the list names. No import circle spans more than 3 files.
//! Unit-test modules (`#[cfg(test)] mod tests`) may use the whole crate: they are not counted.
//! The proxy (`proxy/src`) has no layer list, but the same scan keeps its import circles to at
//! most 2 files.
//!
//! The crates' shape, from CONTRIBUTING.md, is kept here too: one name per type across the
//! crates, the proxy never on the load generator, the report crate without tokio or redis.
//!
//! `LOCKKIT_LAYERS_SRC=<dir>` checks another `src/` (e.g. an older checkout) instead.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The longest import circle allowed: the documented exception's.
const MAX_CIRCLE: usize = 3;

#[test]
fn src_imports_follow_the_layer_list() {
    let src = std::env::var_os("LOCKKIT_LAYERS_SRC")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("src"));
    let problems = check(&src);
    assert!(
        problems.is_empty(),
        "src/ breaks its layer list (src/lib.rs, \"# Layers\"):\n{}",
        problems.join("\n")
    );
}

/// The proxy has no layer list, but no wide import circle either: at most 2 files (issue 30).
#[test]
fn proxy_import_circles_are_at_most_two_files() {
    let src = repo().join("proxy/src");
    let graph = import_graph(&src, &rust_files(&src));
    assert!(
        graph.len() > 20,
        "the scan found too few proxy files: {}",
        graph.len()
    );
    assert!(
        graph.values().map(BTreeSet::len).sum::<usize>() > 20,
        "the scan found too few imports in proxy/src"
    );
    let wide: Vec<String> = circles(&graph)
        .into_iter()
        .filter(|c| c.len() > 2)
        .map(|c| c.join(", "))
        .collect();
    assert!(
        wide.is_empty(),
        "proxy/src: import circles wider than 2 files (move the shared piece down into a module of its own):\n{}",
        wide.join("\n")
    );
}

/// File -> the files of the same crate it imports (`crate::`, `super::`, `self::` paths).
fn import_graph(
    src: &Path,
    files: &BTreeMap<String, String>,
) -> BTreeMap<String, BTreeSet<String>> {
    let lib = fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let modules: BTreeMap<Vec<String>, String> =
        files.keys().map(|f| (module_path(f), f.clone())).collect();
    let aliases = root_aliases(&lib);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, text) in files {
        let edges = graph.entry(file.clone()).or_default();
        for (_, path) in crate_paths(text) {
            if let Some(target) = resolve(file, &path, &modules, &aliases) {
                if &target != file {
                    edges.insert(target);
                }
            }
        }
    }
    graph
}

/// The workspace's root (this crate's manifest folder).
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every crate's source folder, as the workspace lists its members.
const CRATE_SOURCES: &[&str] = &[
    "src",
    "resp/src",
    "harness/src",
    "loadgen/src",
    "report/src",
    "proxy/src",
    "cli/src",
    "redis-proc/src",
    "tests/support/src",
];

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
    let mut by_name: BTreeMap<String, BTreeMap<&'static str, String>> = BTreeMap::new();
    for krate in CRATE_SOURCES {
        for (file, text) in rust_files(&repo().join(krate)) {
            for (line, name) in defined_types(&text) {
                let place = format!("{krate}/{file}:{line}");
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
    let text = fs::read_to_string(repo().join(manifest)).expect("read a Cargo.toml");
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

/// Every problem found in `src`, one line each.
fn check(src: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let files = rust_files(src);
    let lib = fs::read_to_string(src.join("lib.rs")).expect("src/lib.rs");
    let (layers, exceptions) = layer_list(&lib);
    if layers.is_empty() {
        problems.push("src/lib.rs has no layer table under \"# Layers\"".to_string());
    }
    let layer_of = |file: &str| -> Option<usize> {
        layers.iter().position(|(_, members)| {
            members
                .iter()
                .any(|m| file == m || (m.ends_with('/') && file.starts_with(m.as_str())))
        })
    };
    for file in files.keys() {
        if layer_of(file).is_none() {
            problems.push(format!("src/{file}: in no layer of the list"));
        }
    }
    let modules: BTreeMap<Vec<String>, String> =
        files.keys().map(|f| (module_path(f), f.clone())).collect();
    let aliases = root_aliases(&lib);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, text) in &files {
        let edges = graph.entry(file.clone()).or_default();
        for (line, path) in crate_paths(text) {
            let Some(target) = resolve(file, &path, &modules, &aliases) else {
                continue;
            };
            if &target == file {
                continue;
            }
            edges.insert(target.clone());
            let (Some(from), Some(to)) = (layer_of(file), layer_of(&target)) else {
                continue;
            };
            if to > from && !exceptions.contains(&(file.clone(), target.clone())) {
                problems.push(format!(
                    "src/{file}:{line}: `{}` reaches up to src/{target} (layer {}, {}) from layer {} ({})",
                    path.join("::"),
                    to + 1,
                    layers[to].0,
                    from + 1,
                    layers[from].0
                ));
            }
        }
    }
    for circle in circles(&graph) {
        if circle.len() > MAX_CIRCLE {
            problems.push(format!(
                "an import circle of {} files (at most {MAX_CIRCLE}): {}",
                circle.len(),
                circle.join(", ")
            ));
        }
    }
    problems
}

/// The `.rs` files below `src`, by path relative to it (`/`-separated), with their text.
fn rust_files(src: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeMap<String, String>) {
        for entry in fs::read_dir(dir).expect("read src/") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                walk(&path, src, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).unwrap().to_string_lossy();
                let text = fs::read_to_string(&path).expect("read a source file");
                out.insert(rel.replace('\\', "/"), text);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

/// The layer table of lib.rs's crate docs: rows `| N name | `file`, `folder/` |` under
/// "# Layers", bottom first, and the exception line
/// "The one import upward: `a.rs` → `b.rs`, `c.rs` ...".
#[allow(clippy::type_complexity)]
fn layer_list(lib: &str) -> (Vec<(String, Vec<String>)>, BTreeSet<(String, String)>) {
    let docs: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(str::trim)
        .skip_while(|l| *l != "# Layers")
        .skip(1)
        .take_while(|l| !l.starts_with("# "))
        .collect();
    let ticked = |s: &str| -> Vec<String> {
        s.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect()
    };
    let mut layers = Vec::new();
    for row in docs.iter().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let [name, files, ..] = cells[..] else {
            continue;
        };
        if name.starts_with(|c: char| c.is_ascii_digit()) {
            let name = name.trim_start_matches(|c: char| c.is_ascii_digit()).trim();
            layers.push((name.to_string(), ticked(files)));
        }
    }
    let mut exceptions = BTreeSet::new();
    for line in docs
        .iter()
        .filter(|l| l.starts_with("The one import upward"))
    {
        if let Some((from, to)) = line.split_once('→') {
            if let Some(from) = ticked(from).pop() {
                let to = to.split(" (").next().unwrap_or(to);
                for target in ticked(to) {
                    exceptions.insert((from.clone(), target));
                }
            }
        }
    }
    (layers, exceptions)
}

/// A file's module path: `lib.rs` is the crate, `a/mod.rs` and `a.rs` are `a`, `a/b.rs` is `a::b`.
fn module_path(file: &str) -> Vec<String> {
    let stem = file.strip_suffix(".rs").unwrap_or(file);
    let mut parts: Vec<String> = stem.split('/').map(str::to_string).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The names lib.rs brings into the crate root (`use a::b::{C, D as E};`), with their paths.
fn root_aliases(lib: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for (_, _, stmt) in use_statements(lib) {
        for path in expand_use(&stmt) {
            let (path, name) = match path.iter().position(|s| s == "as") {
                Some(i) => (path[..i].to_vec(), path[i + 1].clone()),
                None => (path.clone(), path.last().cloned().unwrap_or_default()),
            };
            let path: Vec<String> = path.into_iter().filter(|s| s != "crate").collect();
            out.insert(name, path);
        }
    }
    out
}

/// The file that `path` (seen in `file`) names, if it is one of the crate's own.
fn resolve(
    file: &str,
    path: &Path2,
    modules: &BTreeMap<Vec<String>, String>,
    aliases: &BTreeMap<String, Vec<String>>,
) -> Option<String> {
    let here = module_path(file);
    let mut segs = path.segs.iter().map(String::as_str).peekable();
    let mut base = match segs.peek() {
        Some(&"crate") => {
            segs.next();
            Vec::new()
        }
        Some(&"super") => {
            let mut ups: usize = 0;
            while segs.peek() == Some(&"super") {
                segs.next();
                ups += 1;
            }
            // `super` inside an inline `mod tests {}` is the file itself first.
            let ups = ups.saturating_sub(path.inline_depth);
            if ups > here.len() {
                return None;
            }
            here[..here.len() - ups].to_vec()
        }
        // `self::child` and a bare `child::...` (a `use` relative to the module) name a child
        // module of the file's own module; anything else (`std::`, `redis::`) is not ours.
        Some(&first) if path.inline_depth == 0 => {
            if first == "self" {
                segs.next();
            }
            let child = segs.peek().copied().unwrap_or_default();
            let mut next = here.clone();
            next.push(child.to_string());
            if !modules.contains_key(&next) {
                return None;
            }
            here.clone()
        }
        _ => return None,
    };
    let rest: Vec<&str> = segs.filter(|s| *s != "self" && *s != "*").collect();
    let mut rest = rest.into_iter();
    let mut first = true;
    while let Some(seg) = rest.next() {
        let mut next = base.clone();
        next.push(seg.to_string());
        if modules.contains_key(&next) {
            base = next;
        } else if first && base.is_empty() {
            // A name lib.rs brings into the root: follow it.
            let target = aliases.get(seg)?;
            let mut full = vec!["crate".to_string()];
            full.extend(target.iter().cloned());
            full.extend(rest.map(str::to_string));
            let again = Path2 {
                segs: full,
                inline_depth: 0,
            };
            return resolve("lib.rs", &again, modules, aliases);
        } else {
            break;
        }
        first = false;
    }
    modules.get(&base).cloned()
}

/// A `crate::`/`super::` path as written, with how deep in inline modules it stands.
#[derive(Debug, Clone)]
struct Path2 {
    segs: Vec<String>,
    inline_depth: usize,
}

impl Path2 {
    fn join(&self, sep: &str) -> String {
        self.segs.join(sep)
    }
}

/// Every path of a file that may name a module of the crate, with its line number: from `use`
/// statements (groups spread over lines expanded; `crate::`, `super::`, `self::` and relative
/// ones) and `crate::`/`super::` paths inline in code. Comments are skipped, and so are
/// `#[cfg(test)]` modules: unit tests may drive the whole crate, as the tests in `tests/` do.
fn crate_paths(text: &str) -> Vec<(usize, Path2)> {
    let depths = inline_depths(text);
    let mut out = Vec::new();
    let uses = use_statements(text);
    let in_use: BTreeSet<usize> = uses.iter().flat_map(|(l, end, _)| *l..=*end).collect();
    for (line, _, stmt) in &uses {
        for segs in expand_use(stmt) {
            let segs: Vec<String> = segs.into_iter().take_while(|s| s != "as").collect();
            if segs.first().is_some_and(|s| s != "std" && s != "core") {
                let Some(inline_depth) = depths[*line - 1] else {
                    continue;
                };
                out.push((*line, Path2 { segs, inline_depth }));
            }
        }
    }
    for (i, raw) in text.lines().enumerate() {
        let Some(inline_depth) = depths[i] else {
            continue;
        };
        if in_use.contains(&(i + 1)) {
            continue;
        }
        let code = strip_comment(raw);
        let bytes = code.as_bytes();
        for start in ["crate::", "super::"] {
            let mut from = 0;
            while let Some(at) = code[from..].find(start).map(|p| p + from) {
                from = at + start.len();
                let boundary = at == 0
                    || !(bytes[at - 1].is_ascii_alphanumeric()
                        || bytes[at - 1] == b'_'
                        || bytes[at - 1] == b':');
                if !boundary {
                    continue;
                }
                let tail: String = code[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                let segs: Vec<String> = tail
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect();
                out.push((i + 1, Path2 { segs, inline_depth }));
            }
        }
    }
    out
}

/// The line's code without a `//` comment (a `//` inside a string literal is rare enough in
/// `src/` to ignore).
fn strip_comment(line: &str) -> &str {
    line.find("//").map_or(line, |at| &line[..at])
}

/// For every line, how many inline `mod name {` blocks it stands in (rustfmt layout: the block
/// ends at a `}` with the `mod` line's indent), or `None` inside a `#[cfg(test)]` one.
fn inline_depths(text: &str) -> Vec<Option<usize>> {
    // (indent, a #[cfg(test)] module) of each open block.
    let mut open: Vec<(usize, bool)> = Vec::new();
    let mut out = Vec::new();
    let mut cfg_test = false;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let code = strip_comment(line).trim();
        if code == "}" && open.last().is_some_and(|(i, _)| *i == indent) {
            open.pop();
        }
        let is_mod = code
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ")
            .starts_with("mod ");
        let test = open.iter().any(|(_, t)| *t) || (cfg_test && is_mod);
        out.push((!test).then_some(open.len()));
        if is_mod && code.ends_with('{') {
            open.push((indent, cfg_test));
        }
        if !code.starts_with("#[") {
            cfg_test = false;
        }
        if code == "#[cfg(test)]" {
            cfg_test = true;
        }
    }
    out
}

/// The `use` statements of a file (`pub`/`pub(crate)` ones too), each joined onto one line,
/// with the lines it starts and ends on.
fn use_statements(text: &str) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (i, raw) in text.lines().enumerate() {
        let code = strip_comment(raw).trim();
        if current.is_none() {
            let rest = code
                .strip_prefix("pub(crate) ")
                .or_else(|| code.strip_prefix("pub(super) "))
                .or_else(|| code.strip_prefix("pub "))
                .unwrap_or(code);
            if let Some(rest) = rest.strip_prefix("use ") {
                current = Some((i + 1, String::new()));
                current.as_mut().unwrap().1.push_str(rest);
            }
        } else if let Some((_, stmt)) = current.as_mut() {
            stmt.push(' ');
            stmt.push_str(code);
        }
        if current.as_ref().is_some_and(|(_, s)| s.contains(';')) {
            let (line, stmt) = current.take().unwrap();
            let stmt = stmt.split(';').next().unwrap_or("").to_string();
            out.push((line, i + 1, stmt));
        }
    }
    out
}

/// The paths of one use tree: `a::{b, c::{d, e as f}}` is `a::b`, `a::c::d`, `a::c::e as f`
/// (`as` kept as a segment).
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    fn parse(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let s = s.trim();
        if s.is_empty() {
            return;
        }
        if let Some(open) = s.find('{') {
            let head: Vec<String> = s[..open]
                .split("::")
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect();
            let mut full = prefix.to_vec();
            full.extend(head);
            let inner = &s[open + 1..s.rfind('}').unwrap_or(s.len())];
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        parse(&inner[start..i], &full, out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            parse(&inner[start..], &full, out);
        } else {
            let mut full = prefix.to_vec();
            for part in s.split("::") {
                full.extend(part.split_whitespace().map(str::to_string));
            }
            out.push(full);
        }
    }
    let mut out = Vec::new();
    parse(tree, &[], &mut out);
    out
}

/// The import circles (strongly connected components of more than one file), largest first.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Kosaraju: finish order on the graph, then components on the reversed graph.
    fn visit<'a>(
        n: &'a str,
        g: &'a BTreeMap<String, BTreeSet<String>>,
        seen: &mut BTreeSet<&'a str>,
        order: &mut Vec<&'a str>,
    ) {
        if !seen.insert(n) {
            return;
        }
        for m in g.get(n).into_iter().flatten() {
            visit(m, g, seen, order);
        }
        order.push(n);
    }
    let mut reversed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in graph {
        for to in tos {
            reversed.entry(to.clone()).or_default().insert(from.clone());
        }
    }
    let mut seen = BTreeSet::new();
    let mut order = Vec::new();
    for n in graph.keys() {
        visit(n, graph, &mut seen, &mut order);
    }
    let mut assigned = BTreeSet::new();
    let mut out = Vec::new();
    for n in order.into_iter().rev() {
        let mut component = Vec::new();
        visit(n, &reversed, &mut assigned, &mut component);
        if component.len() > 1 {
            component.sort();
            out.push(
                component
                    .into_iter()
                    .map(str::to_string)
                    .collect::<Vec<_>>(),
            );
        }
    }
    out.sort_by_key(|c| std::cmp::Reverse(c.len()));
    out
}

#[test]
fn use_trees_expand_and_paths_resolve() {
    assert_eq!(
        expand_use("crate::lock::{self, Lock, x::{A, B as C}}"),
        [
            vec!["crate", "lock", "self"],
            vec!["crate", "lock", "Lock"],
            vec!["crate", "lock", "x", "A"],
            vec!["crate", "lock", "x", "B", "as", "C"],
        ]
    );
    let text = "use crate::a::{\n    B,\n    C,\n};\nfn f() { crate::b::g(); }\n\nmod inner {\n    use super::*;\n    use super::super::c::D;\n}\n#[cfg(test)]\nmod tests {\n    use crate::Top;\n    fn t() { crate::top::f(); }\n}\n";
    let paths: Vec<(usize, String)> = crate_paths(text)
        .into_iter()
        .map(|(l, p)| (l, format!("{}@{}", p.join("::"), p.inline_depth)))
        .collect();
    assert_eq!(
        paths,
        [
            (1, "crate::a::B@0".to_string()),
            (1, "crate::a::C@0".to_string()),
            (8, "super::*@1".to_string()),
            (9, "super::super::c::D@1".to_string()),
            (5, "crate::b::g@0".to_string()),
        ]
    );
    let modules: BTreeMap<Vec<String>, String> = ["lib.rs", "a.rs", "x/mod.rs", "x/y.rs", "c.rs"]
        .iter()
        .map(|f| (module_path(f), f.to_string()))
        .collect();
    let aliases = root_aliases("pub use x::y::Thing;\nuse x as z;\n");
    let p = |s: &str, d| Path2 {
        segs: s.split("::").map(str::to_string).collect(),
        inline_depth: d,
    };
    let r = |file, path| resolve(file, &path, &modules, &aliases);
    assert_eq!(r("a.rs", p("crate::Thing", 0)).as_deref(), Some("x/y.rs"));
    assert_eq!(
        r("a.rs", p("crate::z::y::Thing", 0)).as_deref(),
        Some("x/y.rs")
    );
    assert_eq!(r("x/y.rs", p("super::Q", 0)).as_deref(), Some("x/mod.rs"));
    assert_eq!(r("x/y.rs", p("super::Q", 1)).as_deref(), Some("x/y.rs"));
    assert_eq!(
        r("x/y.rs", p("super::super::c::D", 1)).as_deref(),
        Some("x/mod.rs")
    );
    assert_eq!(r("a.rs", p("crate::x::y::f", 0)).as_deref(), Some("x/y.rs"));
    assert_eq!(r("x/mod.rs", p("self::y::f", 0)).as_deref(), Some("x/y.rs"));
    assert_eq!(r("x/mod.rs", p("y::f", 0)).as_deref(), Some("x/y.rs"));
    assert_eq!(r("x/mod.rs", p("redis::Cmd", 0)), None);
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
            .iter()
            .fold(BTreeMap::new(), |mut g, (f, t)| {
                g.entry(f.to_string()).or_default().insert(t.to_string());
                g.entry(t.to_string()).or_default();
                g
            });
    assert_eq!(circles(&graph), [vec!["a", "b", "c"]]);
}

/// Every run folder in `results/` (named `<date>-...`) can be read and repeated on its own: a
/// README.md saying what ran and what it showed, the run.sh that ran it, the machine.txt it ran on,
/// and a row in results/README.md's table.
#[test]
fn every_results_folder_has_readme_run_script_machine_and_a_row() {
    let results = repo().join("results");
    let index = fs::read_to_string(results.join("README.md")).expect("results/README.md");
    let mut problems = Vec::new();
    let mut folders = 0;
    let mut entries: Vec<PathBuf> = fs::read_dir(&results)
        .expect("results/")
        .map(|entry| entry.expect("a results/ entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .to_string();
        if !path.is_dir() || !name.starts_with("20") {
            continue;
        }
        folders += 1;
        for file in ["README.md", "run.sh", "machine.txt"] {
            match fs::read_to_string(path.join(file)) {
                Ok(text) if text.trim().is_empty() => {
                    problems.push(format!("{name}/{file} is empty"))
                }
                Ok(text) if file == "run.sh" && !text.starts_with("#!") => {
                    problems.push(format!("{name}/run.sh does not start with #!"))
                }
                Ok(_) => {}
                Err(_) => problems.push(format!("{name}/ has no {file}")),
            }
        }
        if !index.contains(&format!("`{name}/`")) {
            problems.push(format!("{name}/ has no row in results/README.md"));
        }
    }
    assert!(folders > 20, "found only {folders} run folders in results/");
    assert!(
        problems.is_empty(),
        "results/ folders that cannot be repeated:\n{}",
        problems.join("\n")
    );
}

/// docs/ARCHITECTURE.md walks an acquire and a proxied command file by file: every row of its
/// tables (`| step | `file` | `function` | ... |`) names a file that exists and has that
/// function, so the walk stays true as code moves (issue 43).
#[test]
fn the_architecture_page_names_files_and_functions_that_exist() {
    let page =
        fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md");
    let (steps, problems) = architecture_problems(&page, &repo());
    assert!(
        steps >= 25,
        "the scan found only {steps} steps in docs/ARCHITECTURE.md"
    );
    assert!(
        problems.is_empty(),
        "docs/ARCHITECTURE.md names what is not there (move the step with the code):\n{}",
        problems.join("\n")
    );
}

/// The steps of the page's tables, and one line per step whose file is missing or lacks the
/// function.
fn architecture_problems(page: &str, root: &Path) -> (usize, Vec<String>) {
    let mut steps = 0;
    let mut problems = Vec::new();
    for row in page.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let [step, file, function, ..] = cells[..] else {
            continue;
        };
        if !step.starts_with(|c: char| c.is_ascii_digit()) {
            continue;
        }
        steps += 1;
        let (file, function) = (file.trim_matches('`'), function.trim_matches('`'));
        let Ok(text) = fs::read_to_string(root.join(file)) else {
            problems.push(format!("step {step}: no file {file}"));
            continue;
        };
        let defined = [format!("fn {function}("), format!("fn {function}<")]
            .iter()
            .any(|d| text.contains(d.as_str()));
        if !defined {
            problems.push(format!("step {step}: {file} has no fn {function}"));
        }
    }
    (steps, problems)
}

#[test]
fn the_architecture_check_sees_a_missing_file_and_a_missing_function() {
    let page = "| step | file | function | what |\n| --- | --- | --- | --- |\n\
                | 1 | `tests/it/layers.rs` | `repo` | here |\n\
                | 2 | `tests/it/layers.rs` | `no_such_function` | gone |\n\
                | 3 | `src/no_such_file.rs` | `f` | gone |\n";
    let (steps, problems) = architecture_problems(page, &repo());
    assert_eq!(steps, 3);
    assert_eq!(
        problems,
        [
            "step 2: tests/it/layers.rs has no fn no_such_function",
            "step 3: no file src/no_such_file.rs"
        ]
    );
}

/// The folders whose files and functions stay short (issue 43).
const SHORT_SOURCES: &[&str] = &["src", "proxy/src", "loadgen/src", "cli/src"];
/// The most lines a `.rs` file may have, its unit tests included.
const MAX_FILE_LINES: usize = 700;
/// The most lines a function may have, from its `fn` line to its closing brace.
const MAX_FN_LINES: usize = 120;

/// Files and functions (`file::fn`) allowed over the limits while a split is under way in another
/// branch: empty on main. The merge that lands the split empties it again (an entry no longer
/// over its limit fails the test, so none stays behind).
const TOO_LONG_FOR_NOW: &[&str] = &[];

/// The source with comments, string and character literals blanked (newlines kept, so line
/// numbers hold): what is left of braces is code.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, ch: char| out.push(if ch == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&c, i) {
            // r"..", r#".."#, br"..": ends at a quote followed by as many hashes.
            let mut j = i;
            while c[j] != '"' {
                j += 1;
            }
            j += 1;
            while j < c.len() && !(c[j] == '"' && (1..=hashes).all(|k| c.get(j + k) == Some(&'#')))
            {
                j += 1;
            }
            let end = (j + 1 + hashes).min(c.len());
            for &ch in &c[i..end] {
                blank(&mut out, ch);
            }
            i = end;
        } else if c[i] == '"' {
            out.push(' ');
            i += 1;
            while i < c.len() && c[i] != '"' {
                if c[i] == '\\' {
                    blank(&mut out, c[i]);
                    i += 1;
                }
                if i < c.len() {
                    blank(&mut out, c[i]);
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c[i] == '\'' && next == Some('\\') {
            // '\n', '\'', '\u{7f}'
            let mut j = i + 2;
            while j < c.len() && c[j] != '\'' {
                j += 1;
            }
            out.extend(std::iter::repeat_n(' ', j + 1 - i));
            i = j + 1;
        } else if c[i] == '\'' && c.get(i + 2) == Some(&'\'') {
            // 'x' (a lifetime `'a` has no closing quote)
            out.push_str("   ");
            i += 3;
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// At `i`, the start of a raw string (`r"`, `r#"`, `br#"`, not an identifier ending in r):
/// its number of hashes.
fn raw_string_start(c: &[char], i: usize) -> Option<usize> {
    if i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_') {
        return None;
    }
    let mut j = i;
    if c[j] == 'b' {
        j += 1;
    }
    if c.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = c[j..].iter().take_while(|&&ch| ch == '#').count();
    (c.get(j + hashes) == Some(&'"')).then_some(hashes)
}

/// Every function with a body: its name, the line of its `fn` and its length in lines (from
/// the `fn` line to the line of its closing brace).
fn function_lengths(text: &str) -> Vec<(String, usize, usize)> {
    let code = code_only(text);
    let c: Vec<char> = code.chars().collect();
    let line_at = |i: usize| c[..i].iter().filter(|&&ch| ch == '\n').count() + 1;
    let is_ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut out = Vec::new();
    for i in 0..c.len() {
        let word_fn = c[i] == 'f'
            && c.get(i + 1) == Some(&'n')
            && c.get(i + 2).is_some_and(|ch| ch.is_whitespace())
            && (i == 0 || !is_ident(c[i - 1]));
        if !word_fn {
            continue;
        }
        let mut j = i + 2;
        while j < c.len() && c[j].is_whitespace() {
            j += 1;
        }
        let name: String = c[j..].iter().take_while(|&&ch| is_ident(ch)).collect();
        if name.is_empty() {
            continue;
        }
        // The body opens at the first `{` (a `;` first: a declaration without one).
        let Some(open) = (j..c.len()).find(|&k| c[k] == '{' || c[k] == ';') else {
            continue;
        };
        if c[open] == ';' {
            continue;
        }
        let mut depth = 0usize;
        let mut close = open;
        for (k, &ch) in c.iter().enumerate().skip(open) {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = k;
                        break;
                    }
                }
                _ => {}
            }
        }
        let first = line_at(i);
        out.push((name, first, line_at(close) - first + 1));
    }
    out
}

#[test]
fn the_length_scan_skips_strings_comments_and_char_literals() {
    let text = r####"// fn commented() {
/* fn blocked() { /* nested } */ } */
fn short<'a>(x: &'a str) -> char {
    let _ = "} fn in_string() {";
    let _ = r#"}"#;
    let _ = b'}';
    let _ = '\'';
    '{'
}

trait T {
    fn declared(&self);
    fn provided(&self) {
        fn inner() {}
    }
}
"####;
    let found = function_lengths(text);
    let names: Vec<(&str, usize, usize)> = found
        .iter()
        .map(|(n, first, len)| (n.as_str(), *first, *len))
        .collect();
    assert_eq!(
        names,
        [("short", 3, 7), ("provided", 13, 3), ("inner", 14, 1)]
    );
}

/// No `.rs` file over 700 lines and no function over 120 in src/, proxy/, loadgen/ and cli/
/// (issue 43): a long file or function is several ideas; split it by concept.
#[test]
fn files_and_functions_stay_short() {
    let mut problems = Vec::new();
    let mut seen_allowed = BTreeSet::new();
    let mut functions = 0;
    for dir in SHORT_SOURCES {
        for (rel, text) in rust_files(&repo().join(dir)) {
            let file = format!("{dir}/{rel}");
            let lines = text.lines().count();
            if lines > MAX_FILE_LINES {
                if TOO_LONG_FOR_NOW.contains(&file.as_str()) {
                    seen_allowed.insert(file.clone());
                } else {
                    problems.push(format!(
                        "{file}: {lines} lines (at most {MAX_FILE_LINES}): split it by concept"
                    ));
                }
            }
            for (name, line, len) in function_lengths(&text) {
                functions += 1;
                if len <= MAX_FN_LINES {
                    continue;
                }
                let key = format!("{file}::{name}");
                if TOO_LONG_FOR_NOW.contains(&key.as_str()) {
                    seen_allowed.insert(key);
                } else {
                    problems.push(format!(
                        "{file}:{line}: fn {name} is {len} lines (at most {MAX_FN_LINES}): split it into steps that say what they do"
                    ));
                }
            }
        }
    }
    for entry in TOO_LONG_FOR_NOW {
        if !seen_allowed.contains(*entry) {
            problems.push(format!(
                "{entry} is no longer over its limit: take it off TOO_LONG_FOR_NOW"
            ));
        }
    }
    assert!(
        functions > 1000,
        "the scan found only {functions} functions"
    );
    assert!(
        problems.is_empty(),
        "too long (issue 43):\n{}",
        problems.join("\n")
    );
}
