//! A crate's source files, parsed, each with the module it is.

use std::path::Path;

use anyhow::Context;

/// One parsed file of a crate.
pub struct SourceFile {
    /// Its path from the repository's root (how findings name it).
    pub path: String,
    /// The crate (`tfops_core`), or the binary (`bin tfops`) for files of `src/bin`.
    pub krate: String,
    /// Its module path inside the crate (`["reconcile", "run"]`; empty for the root).
    pub module: Vec<String>,
    /// The number of lines.
    pub lines: usize,
    /// The syntax tree.
    pub ast: syn::File,
}

/// Every `.rs` file under `root/src_dir`, parsed.
pub fn read_crate(root: &Path, src_dir: &str) -> anyhow::Result<Vec<SourceFile>> {
    let base = root.join(src_dir);
    let krate = src_dir
        .trim_end_matches("/src")
        .rsplit('/')
        .next()
        .unwrap_or(src_dir)
        .replace('-', "_");
    let mut paths = Vec::new();
    walk(&base, &mut paths)?;
    paths.sort();
    let mut files = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let ast = syn::parse_file(&text).with_context(|| format!("parsing {}", path.display()))?;
        let inner = path.strip_prefix(&base).unwrap_or(&path);
        let (krate, module) = module_of(&krate, inner);
        files.push(SourceFile {
            path: format!("{src_dir}/{}", inner.display()),
            krate,
            module,
            lines: text.lines().count(),
            ast,
        });
    }
    // A file whose `mod` declaration is `#[cfg(test)]` is test code, as an inline test
    // module is.
    let tests: Vec<(String, Vec<String>)> = files
        .iter()
        .flat_map(|f| {
            f.ast.items.iter().filter_map(move |i| match i {
                syn::Item::Mod(m) if m.content.is_none() && is_test(&m.attrs) => {
                    let mut path = f.module.clone();
                    path.push(m.ident.to_string());
                    Some((f.krate.clone(), path))
                }
                _ => None,
            })
        })
        .collect();
    files.retain(|f| {
        !tests
            .iter()
            .any(|(k, t)| *k == f.krate && f.module.starts_with(t))
    });
    Ok(files)
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            walk(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// `lib.rs` → the root; `a/mod.rs` and `a.rs` → `a`; `a/b.rs` → `a::b`; `bin/x.rs` → the
/// root of binary `x`.
fn module_of(krate: &str, inner: &Path) -> (String, Vec<String>) {
    let mut parts: Vec<String> = inner
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.first().is_some_and(|p| p == "bin") && parts.len() == 2 {
        return (format!("bin {}", parts[1]), Vec::new());
    }
    if parts
        .last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        parts.pop();
    }
    (krate.to_string(), parts)
}

/// Whether the attributes hold `#[cfg(test)]` or a test attribute (`#[test]`,
/// `#[tokio::test]`, `#[test_case(…)]`).
pub fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let path = a.path();
        let last = path.segments.last().map(|s| s.ident.to_string());
        if path.is_ident("cfg") {
            return a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test");
        }
        matches!(last.as_deref(), Some("test" | "test_case"))
    })
}
