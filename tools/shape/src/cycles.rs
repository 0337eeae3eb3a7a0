//! Modules of one crate that import each other in a circle.
//!
//! An edge runs from a module to every module of the same crate a path in it names
//! (`crate::…`, `super::…`, `self::…`, in `use` or in code), the longest module prefix of the
//! path being the target. A parent re-exporting a descendant's items (`pub use child::X`) is
//! the module tree, not a dependency, and makes no edge; test modules make none either.

use std::collections::{BTreeMap, BTreeSet};

use syn::visit::Visit;

use crate::Finding;
use crate::source::{SourceFile, is_test};

type Module = Vec<String>;

/// Every circle of module imports in `files`, one finding per strongly connected set.
pub fn circles(files: &[SourceFile]) -> Vec<Finding> {
    let mut by_crate: BTreeMap<&str, Vec<&SourceFile>> = BTreeMap::new();
    for f in files.iter().filter(|f| !f.krate.starts_with("bin ")) {
        by_crate.entry(&f.krate).or_default().push(f);
    }
    let mut found = Vec::new();
    for (krate, files) in by_crate {
        let modules: BTreeSet<Module> = files.iter().map(|f| f.module.clone()).collect();
        let mut edges: BTreeMap<Module, BTreeMap<Module, String>> = BTreeMap::new();
        for file in &files {
            let mut paths = Paths::new(&file.module);
            paths.visit_file(&file.ast);
            for (target, line) in paths.found {
                let Some(to) = longest_module(&modules, &target) else {
                    continue;
                };
                let Some((from, to)) = siblings(&file.module, &to) else {
                    continue;
                };
                edges
                    .entry(from)
                    .or_default()
                    .entry(to)
                    .or_insert_with(|| format!("{}:{line}", file.path));
            }
        }
        let nodes: BTreeSet<Module> = edges
            .iter()
            .flat_map(|(from, tos)| std::iter::once(from).chain(tos.keys()))
            .cloned()
            .collect();
        for set in strongly_connected(&nodes, &edges) {
            let names: Vec<String> = set.iter().map(|m| name(krate, m)).collect();
            let mut detail = Vec::new();
            for from in &set {
                for (to, at) in edges.get(from).into_iter().flatten() {
                    if set.contains(to) {
                        detail.push(format!(
                            "{} → {} ({at})",
                            name(krate, from),
                            name(krate, to)
                        ));
                    }
                }
            }
            found.push(Finding {
                key: format!("cycle {}", names.join(" ")),
                detail: detail.join("; "),
            });
        }
    }
    found
}

/// The edge `from → to` between the two children of their closest common module (a file
/// deep in `reconcile/` using `history` makes `reconcile → history`); none when one is the
/// other's ancestor: a parent uses its children, a child its parent's shared items.
fn siblings(from: &Module, to: &Module) -> Option<(Module, Module)> {
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    if common == from.len() || common == to.len() {
        return None;
    }
    Some((from[..=common].to_vec(), to[..=common].to_vec()))
}

fn name(krate: &str, m: &Module) -> String {
    std::iter::once(krate.to_string())
        .chain(m.iter().cloned())
        .collect::<Vec<_>>()
        .join("::")
}

fn longest_module(modules: &BTreeSet<Module>, path: &[String]) -> Option<Module> {
    (0..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
}

/// Tarjan's algorithm: the sets of two or more modules that reach each other.
fn strongly_connected(
    modules: &BTreeSet<Module>,
    edges: &BTreeMap<Module, BTreeMap<Module, String>>,
) -> Vec<BTreeSet<Module>> {
    struct State<'a> {
        edges: &'a BTreeMap<Module, BTreeMap<Module, String>>,
        index: BTreeMap<&'a Module, (usize, usize)>,
        stack: Vec<&'a Module>,
        on_stack: BTreeSet<&'a Module>,
        next: usize,
        sets: Vec<BTreeSet<Module>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Module) {
        s.index.insert(v, (s.next, s.next));
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.edges.get(v).into_iter().flat_map(BTreeMap::keys) {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low_w = s.index[w].1;
                let entry = s.index.get_mut(v).map(|e| &mut e.1);
                if let Some(low) = entry {
                    *low = (*low).min(low_w);
                }
            } else if s.on_stack.contains(w) {
                let index_w = s.index[w].0;
                if let Some(e) = s.index.get_mut(v) {
                    e.1 = e.1.min(index_w);
                }
            }
        }
        let (index, low) = s.index[v];
        if index == low {
            let mut set = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                set.insert(w.clone());
                if w == v {
                    break;
                }
            }
            if set.len() > 1 {
                s.sets.push(set);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        sets: Vec::new(),
    };
    for m in modules {
        if !s.index.contains_key(m) {
            visit(&mut s, m);
        }
    }
    s.sets
}

/// The crate-relative paths a file names: (absolute path, line).
struct Paths<'m> {
    module: &'m Module,
    found: Vec<(Module, usize)>,
}

impl<'m> Paths<'m> {
    fn new(module: &'m Module) -> Self {
        Self {
            module,
            found: Vec::new(),
        }
    }

    /// `crate::a::b` → `[a, b]`; `super::x` → the parent's path and `x`; else nothing.
    fn absolute(&self, segments: &[String]) -> Option<Module> {
        let mut base = self.module.clone();
        let mut rest = segments;
        match rest.first().map(String::as_str) {
            Some("crate") => {
                base.clear();
                rest = &rest[1..];
            }
            Some("self") => rest = &rest[1..],
            Some("super") => {
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
            }
            _ => return None,
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    fn note(&mut self, segments: &[String], line: usize) {
        if let Some(path) = self.absolute(segments) {
            self.found.push((path, line));
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                prefix.push(n.ident.to_string());
                self.note(prefix, n.ident.span().start().line);
                prefix.pop();
            }
            syn::UseTree::Rename(r) => {
                prefix.push(r.ident.to_string());
                self.note(prefix, r.ident.span().start().line);
                prefix.pop();
            }
            syn::UseTree::Glob(g) => self.note(prefix, g.star_token.spans[0].start().line),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let test = match item {
            syn::Item::Mod(m) => is_test(&m.attrs),
            syn::Item::Fn(f) => is_test(&f.attrs),
            syn::Item::Use(u) => is_test(&u.attrs),
            syn::Item::Impl(i) => is_test(&i.attrs),
            _ => false,
        };
        if !test {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segments: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(first) = p.segments.first() {
            self.note(&segments, first.ident.span().start().line);
        }
        syn::visit::visit_path(self, p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, module: &[&str], text: &str) -> SourceFile {
        SourceFile {
            path: path.into(),
            krate: "k".into(),
            module: module.iter().map(|s| s.to_string()).collect(),
            lines: text.lines().count(),
            ast: syn::parse_file(text).unwrap_or_else(|e| panic!("{e}")),
        }
    }

    #[test]
    fn siblings_importing_each_other_are_a_circle_and_a_tree_is_not() {
        let files = [
            file("lib.rs", &[], "pub mod a; pub mod b; pub use a::X;"),
            file("a.rs", &["a"], "use super::b::Y; pub struct X;"),
            file(
                "b.rs",
                &["b"],
                "pub struct Y; fn f() { let _ = crate::a::X; }",
            ),
        ];
        let found = circles(&files);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].key, "cycle k::a k::b");
        let tree = [
            file(
                "lib.rs",
                &[],
                "pub mod a; pub mod b; pub use a::X; fn g() { b::f() }",
            ),
            file("a.rs", &["a"], "use super::b::Y; pub struct X;"),
            file(
                "b.rs",
                &["b"],
                "pub struct Y; pub fn f() { let _ = super::g; }",
            ),
        ];
        assert!(circles(&tree).is_empty());
    }

    #[test]
    fn a_file_deep_in_a_directory_speaks_for_the_directory() {
        let files = [
            file("r/mod.rs", &["r"], "mod d;"),
            file("r/d.rs", &["r", "d"], "fn f() { crate::h::tail(); }"),
            file("h.rs", &["h"], "use crate::r::Outcome; pub fn tail() {}"),
        ];
        assert_eq!(circles(&files)[0].key, "cycle k::h k::r");
    }

    #[test]
    fn test_modules_make_no_edge() {
        let files = [
            file("a.rs", &["a"], "use crate::b::Y;"),
            file(
                "b.rs",
                &["b"],
                "pub struct Y; #[cfg(test)] mod tests { use crate::a; }",
            ),
        ];
        assert!(circles(&files).is_empty());
    }
}
