//! Files and functions over their limits.

use syn::spanned::Spanned;
use syn::visit::Visit;

use crate::Finding;
use crate::source::{SourceFile, is_test};

/// Every file of `files` over `max_file` lines (its test modules aside) and every function
/// over `max_fn` lines.
pub fn oversized(files: &[SourceFile], max_file: usize, max_fn: usize) -> Vec<Finding> {
    let mut found = Vec::new();
    for file in files {
        let test_lines: usize = file
            .ast
            .items
            .iter()
            .filter(|i| is_test(attrs(i)))
            .map(|i| lines(i.span()))
            .sum();
        let lines = file.lines.saturating_sub(test_lines);
        if lines > max_file {
            found.push(Finding {
                key: format!("file {}", file.path),
                detail: format!("{lines} lines, tests aside; at most {max_file}"),
            });
        }
        let mut functions = Functions::default();
        functions.visit_file(&file.ast);
        for (name, n) in functions.found {
            if n > max_fn {
                found.push(Finding {
                    key: format!("fn {} {name}", file.path),
                    detail: format!("{n} lines; at most {max_fn}"),
                });
            }
        }
    }
    found
}

fn lines(span: proc_macro2::Span) -> usize {
    span.end().line.saturating_sub(span.start().line) + 1
}

fn attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        _ => &[],
    }
}

/// Each function's name (`Type::name` for methods) and lines, from `fn` to its closing brace.
#[derive(Default)]
struct Functions {
    owner: Vec<String>,
    found: Vec<(String, usize)>,
}

impl Functions {
    fn record(&mut self, name: &syn::Ident, sig: &syn::Signature, body: &syn::Block) {
        let start = sig.fn_token.span.start().line;
        let end = body.brace_token.span.close().end().line;
        let name = match self.owner.last() {
            Some(owner) => format!("{owner}::{name}"),
            None => name.to_string(),
        };
        self.found.push((name, end.saturating_sub(start) + 1));
    }
}

impl<'ast> Visit<'ast> for Functions {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test(&f.attrs) {
            self.record(&f.sig.ident, &f.sig, &f.block);
            syn::visit::visit_item_fn(self, f);
        }
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if is_test(&i.attrs) {
            return;
        }
        let owner = match &*i.self_ty {
            syn::Type::Path(p) => p.path.segments.last().map(|s| s.ident.to_string()),
            _ => None,
        };
        self.owner.push(owner.unwrap_or_else(|| "impl".into()));
        syn::visit::visit_item_impl(self, i);
        self.owner.pop();
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        self.owner.push(t.ident.to_string());
        syn::visit::visit_item_trait(self, t);
        self.owner.pop();
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            self.record(&f.sig.ident, &f.sig, &f.block);
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(body) = &f.default {
            self.record(&f.sig.ident, &f.sig, body);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(text: &str) -> SourceFile {
        SourceFile {
            path: "x.rs".into(),
            krate: "k".into(),
            module: vec!["x".into()],
            lines: text.lines().count(),
            ast: syn::parse_file(text).unwrap_or_else(|e| panic!("{e}")),
        }
    }

    #[test]
    fn long_functions_and_files_are_found_and_tests_are_not_counted() {
        let body = "    let _ = 1;\n".repeat(5);
        let text = format!(
            "struct S;\nimpl S {{\n    fn long(&self) {{\n{body}    }}\n}}\nfn short() {{}}\n\
             #[cfg(test)]\nmod tests {{\n    fn long_test() {{\n{body}{body}    }}\n}}\n"
        );
        // 26 lines, of which 15 the test module: 11 count; `long` spans 7.
        let found = oversized(&[file(&text)], 11, 6);
        let keys: Vec<&str> = found.iter().map(|f| f.key.as_str()).collect();
        assert_eq!(keys, ["fn x.rs S::long"], "{found:?}");
        assert!(oversized(&[file(&text)], 11, 7).is_empty());
        let over = oversized(&[file(&text)], 10, 100);
        assert_eq!(over.len(), 1, "{over:?}");
        assert!(over[0].detail.starts_with("11 lines"), "{over:?}");
    }
}
