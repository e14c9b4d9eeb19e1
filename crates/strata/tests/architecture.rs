//! The floors of docs/architecture.md, enforced: every `crate::` path (and every `super::` that
//! climbs out of its module) in the library's sources points to a lower floor or stays inside
//! its own top-level module, and no engine names another engine.
//!
//! The check reads the sources as text: comments and string literals are blanked first, then
//! every `crate::a::b` and every item of a `crate::{a, b::c}` group is resolved to its
//! top-level module (and, under `engines`, its engine). A new top-level module must be given a
//! floor here and in docs/architecture.md before it builds clean.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Top-level modules, lowest first; a module may use only modules on lower floors (and itself).
/// Modules on one floor are peers and do not use each other.
const FLOORS: &[(&str, u32)] = &[
    ("error", 0),
    ("codec", 0),
    ("model", 1),
    ("storage", 2),
    ("kv", 3),
    ("layout", 4),
    ("engine", 5),
    ("engines", 6),
    ("profile", 7),
    ("tune", 8),
    ("options", 9),
    ("wal", 9),
    ("metrics", 9),
    ("db", 10),
    ("versioned_db", 10),
    ("salvage", 11),
    ("decode_fuzz", 13),
];

/// The crate root's re-exports (`crate::Db`): the public API, above every module but the
/// test-only ones.
const ROOT_ITEMS: u32 = 12;

fn floor(module: &str) -> Option<u32> {
    if module.starts_with(|c: char| c.is_ascii_uppercase()) {
        return Some(ROOT_ITEMS);
    }
    FLOORS.iter().find(|(m, _)| *m == module).map(|&(_, f)| f)
}

/// Blank out comments, string and char literals (keeping line breaks), so that only code is
/// searched for paths.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if b[i] == b'"' || (b[i] == b'r' && rest.starts_with(b"r\"")) {
            if b[i] == b'r' {
                i += 1;
            }
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                } else if b[i] == b'\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            // 'x' (a lifetime has no closing quote two bytes on)
            i += 3;
        } else if b[i] == b'\'' && b.get(i + 1) == Some(&b'\\') {
            i += 2;
            while i < b.len() && b[i] != b'\'' {
                i += 1;
            }
            i += 1;
        } else {
            let ch = src[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The paths named after `crate::` (each as its segments), one per item of a brace group.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(p) = code[at..].find("crate::") {
        let start = at + p;
        at = start + "crate::".len();
        // `crate::` preceded by an identifier character is some other path (`my_crate::`).
        if code[..start]
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            continue;
        }
        group_paths(&code[at..], &mut Vec::new(), &mut out);
    }
    out
}

/// Read one path or brace group at the start of `s`, with `prefix` already read.
fn group_paths(s: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let s = s.trim_start();
    if let Some(inner) = s.strip_prefix('{') {
        // Split the group's items at top-level commas.
        let mut depth = 0;
        let mut item_start = 0;
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    let mut p = prefix.clone();
                    group_paths(&inner[item_start..i], &mut p, out);
                    return;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    let mut p = prefix.clone();
                    group_paths(&inner[item_start..i], &mut p, out);
                    item_start = i + 1;
                }
                _ => {}
            }
        }
        return;
    }
    let id = ident_at(s);
    if id.is_empty() {
        if !prefix.is_empty() {
            out.push(prefix.clone());
        }
        return;
    }
    prefix.push(id.to_string());
    match s[id.len()..].strip_prefix("::") {
        Some(rest) => group_paths(rest, prefix, out),
        None => out.push(prefix.clone()),
    }
}

/// The module path of a source file: `engines/betree/node.rs` is engines::betree::node,
/// `engines/mod.rs` is engines, `lib.rs` is the root.
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop().unwrap();
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts
}

/// The byte ranges of the inline `mod name { ... }` blocks of `code` (comments and strings
/// already blanked), nested ones included.
fn inline_mods(code: &str) -> Vec<(usize, usize)> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(p) = code[at..].find("mod ") {
        let start = at + p;
        at = start + 4;
        if start > 0 && (b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_') {
            continue;
        }
        let rest = &code[at..];
        let name = rest.trim_start();
        let len = name
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(name.len());
        let after = name[len..].trim_start();
        if len == 0 || !after.starts_with('{') {
            continue; // `mod name;`: a file of its own
        }
        let open = code.len() - after.len();
        let mut depth = 0usize;
        for (i, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        out.push((open, i));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Paths reached with `super::` that leave the file's module, resolved from the crate root. A
/// `super::` inside an inline `mod tests { ... }` first climbs out of that block.
fn super_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mods = inline_mods(code);
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(p) = code[at..].find("super::") {
        let start = at + p;
        if code[..start]
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        {
            at = start + 1;
            continue;
        }
        let mut s = &code[start..];
        let mut ups: usize = 0;
        while let Some(rest) = s.strip_prefix("super::") {
            ups += 1;
            s = rest;
        }
        at = code.len() - s.len();
        let inline = mods
            .iter()
            .filter(|&&(a, b)| a < start && start < b)
            .count();
        // Climbs that stay inside the file name nothing another module owns.
        let Some(ups) = ups.checked_sub(inline).filter(|&u| u > 0) else {
            continue;
        };
        if ups <= module.len() {
            let mut base: Vec<String> = module[..module.len() - ups].to_vec();
            let mut paths = Vec::new();
            group_paths(s, &mut base, &mut paths);
            out.extend(paths);
        }
    }
    out
}

/// Every upward, sideways or cross-engine reference in `code`, as "what: why" lines.
fn violations(rel: &Path, code: &str) -> Vec<String> {
    let module = module_of(rel);
    let Some(top) = module.first() else {
        return Vec::new(); // lib.rs: the crate root re-exports from every floor
    };
    let mut bad = Vec::new();
    let Some(own) = floor(top) else {
        return vec![format!(
            "{}: top-level module `{top}` has no floor in tests/architecture.rs",
            rel.display()
        )];
    };
    let mut seen = BTreeSet::new();
    let code = code_only(code);
    for path in crate_paths(&code)
        .into_iter()
        .chain(super_paths(&code, &module))
    {
        let Some(target) = path.first() else { continue };
        if !seen.insert(path.clone()) {
            continue;
        }
        if target == top {
            // Inside one top-level module; engines must still keep to themselves.
            if top == "engines" && module.len() > 1 && path.len() > 1 && path[1] != module[1] {
                bad.push(format!(
                    "{}: engine `{}` uses engine `{}` (crate::{}); move what both need into kv or layout",
                    rel.display(),
                    module[1],
                    path[1],
                    path.join("::")
                ));
            }
            continue;
        }
        match floor(target) {
            Some(f) if f < own => {}
            Some(f) => bad.push(format!(
                "{}: `{top}` (floor {own}) uses `{target}` (floor {f}) via crate::{}",
                rel.display(),
                path.join("::")
            )),
            None => bad.push(format!(
                "{}: crate::{} names no module with a floor",
                rel.display(),
                path.join("::")
            )),
        }
    }
    bad
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn imports_point_down_and_engines_keep_to_themselves() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    assert!(files.len() > 30, "found the sources");
    let mut bad = Vec::new();
    let mut refs = 0;
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let text = std::fs::read_to_string(f).unwrap();
        refs += crate_paths(&code_only(&text)).len();
        bad.extend(violations(rel, &text));
    }
    assert!(refs > 100, "read the crate's paths ({refs})");
    assert!(bad.is_empty(), "layering violations:\n{}", bad.join("\n"));
}

#[test]
fn every_floor_is_in_the_architecture_doc() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/architecture.md");
    let doc = std::fs::read_to_string(doc).unwrap();
    for (m, _) in FLOORS {
        assert!(
            doc.contains(&format!("`{m}")),
            "docs/architecture.md does not name `{m}`"
        );
    }
}

// The checker itself: it must see what it is meant to refuse.

#[test]
fn paths_are_read_from_groups_and_not_from_comments_or_strings() {
    let code = code_only(
        "use crate::{db::Db, kv::{Op, WriteBatch}};\n\
         // use crate::salvage;\n\
         let s = \"crate::tune\";\n\
         let x = crate::storage::block::PAGE;\n\
         fn f<'a>(c: char) -> bool { c == '{' }\n\
         use crate::model;",
    );
    let tops: BTreeSet<String> = crate_paths(&code)
        .into_iter()
        .map(|p| p[0].clone())
        .collect();
    let want: BTreeSet<String> = ["db", "kv", "storage", "model"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(tops, want);
}

#[test]
fn upward_sideways_and_cross_engine_uses_are_refused() {
    let up = violations(
        Path::new("storage/pager.rs"),
        "use crate::engines::btree::BTree;",
    );
    assert_eq!(up.len(), 1, "{up:?}");
    let sideways = violations(Path::new("wal.rs"), "use crate::options::Durability;");
    assert_eq!(sideways.len(), 1, "{sideways:?}");
    let cross = violations(
        Path::new("engines/betree/node.rs"),
        "use crate::engines::btree::node::Leaf;",
    );
    assert_eq!(cross.len(), 1, "{cross:?}");
    let climb = violations(
        Path::new("engines/betree/node.rs"),
        "use super::super::btree::Leaf;",
    );
    assert_eq!(climb.len(), 1, "{climb:?}");
    let from_mod_rs = violations(Path::new("engines/lsm/mod.rs"), "use super::btree::Leaf;");
    assert_eq!(from_mod_rs.len(), 1, "{from_mod_rs:?}");
    // Inside a file's `mod tests`, one more `super::` stays within the file's engine.
    let in_tests = "mod tests {\n    use super::super::array::Builder;\n}";
    assert!(violations(Path::new("engines/sda/format.rs"), in_tests).is_empty());
    let out_of_tests = "mod tests {\n    use super::super::super::btree::Leaf;\n}";
    assert_eq!(
        violations(Path::new("engines/sda/format.rs"), out_of_tests).len(),
        1
    );
    let unknown = violations(Path::new("newthing.rs"), "");
    assert_eq!(unknown.len(), 1, "{unknown:?}");
    // And what is allowed.
    let fine = "use crate::kv::Op;\nuse super::msg::Msg;\nuse crate::engines::betree::node::Run;";
    assert!(violations(Path::new("engines/betree/node.rs"), fine).is_empty());
    assert!(violations(Path::new("db.rs"), "use crate::engines::{btree, betree};").is_empty());
}
