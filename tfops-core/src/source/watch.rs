//! Which files of a source concern an object: those under its `spec.path`, and those matching
//! its `spec.sourceRef.watchPaths` (gitignore-style). A new revision that changed none of them
//! is no reason to plan (monorepos, where one commit touches one object of hundreds).

use std::path::Path;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

/// What a source comparison found between two revisions ([`crate::ports::SourcePort::changes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceChanges {
    /// The source cannot tell (no history to compare, or a kind without files): every new
    /// revision counts as a change.
    Unknown,
    /// The two revisions hold the same tree (an OCI artifact pushed again with the same layer).
    Identical,
    /// The paths (relative to the source root, `/`-separated) whose content, mode or presence
    /// differs between the two revisions.
    Files(Vec<String>),
}

/// `spec.path` as [`Watched`] compares it: no leading `./` or `/`, no trailing `/`; empty for
/// the source's root (`""`, `.`, `./`, `/`).
fn normal_path(path: &str) -> &str {
    let path = path
        .trim_start_matches("./")
        .trim_end_matches('/')
        .trim_start_matches('/');
    if path == "." { "" } else { path }
}

/// Whether `path` (an object's `spec.path`) is the source's root: then every file concerns
/// the object, and there is nothing to compare.
pub fn is_root(path: &str) -> bool {
    normal_path(path).is_empty()
}

/// The files of a source that concern one object.
#[derive(Debug, Clone)]
pub struct Watched {
    /// `spec.path` without leading `./` and trailing `/`; empty: the whole source.
    path: String,
    patterns: Option<Gitignore>,
}

/// A `watchPaths` line that is not a valid gitignore-style pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid pattern {pattern:?}: {message}")]
pub struct PatternError {
    /// The line.
    pub pattern: String,
    /// What is wrong with it.
    pub message: String,
}

impl Watched {
    /// The files under `path` (the object's `spec.path`) or matching `patterns` (its
    /// `watchPaths`, later lines winning as in a `.gitignore`, `!` excluding again).
    ///
    /// # Errors
    /// [`PatternError`] naming the first malformed pattern.
    pub fn new(path: &str, patterns: &[String]) -> Result<Self, PatternError> {
        let path = normal_path(path);
        let patterns = if patterns.is_empty() {
            None
        } else {
            let mut builder = GitignoreBuilder::new("/");
            for line in patterns {
                builder.add_line(None, line).map_err(|e| PatternError {
                    pattern: line.clone(),
                    message: e.to_string(),
                })?;
            }
            Some(builder.build().map_err(|e| PatternError {
                pattern: patterns.join(", "),
                message: e.to_string(),
            })?)
        };
        Ok(Self {
            path: path.to_string(),
            patterns,
        })
    }

    /// Whether every file of the source concerns the object (`spec.path` is the root): then
    /// any new revision is a change, and there is nothing to compare.
    pub fn is_everything(&self) -> bool {
        self.path.is_empty()
    }

    /// Whether `file` (relative to the source root) concerns the object.
    pub fn matches(&self, file: &str) -> bool {
        let file = file.trim_start_matches('/');
        if self.path.is_empty()
            || file == self.path
            || file
                .strip_prefix(self.path.as_str())
                .is_some_and(|rest| rest.starts_with('/'))
        {
            return true;
        }
        self.patterns.as_ref().is_some_and(|p| {
            p.matched_path_or_any_parents(Path::new("/").join(file), false)
                .is_ignore()
        })
    }

    /// The first of `changes` that concerns the object, or why every change does (`None`: no
    /// change concerns it).
    pub fn touched(&self, changes: &SourceChanges) -> Option<String> {
        match changes {
            SourceChanges::Unknown => Some("the source cannot list what changed".into()),
            SourceChanges::Identical => None,
            SourceChanges::Files(files) => files.iter().find(|f| self.matches(f)).cloned(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn files(list: &[&str]) -> SourceChanges {
        SourceChanges::Files(list.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn a_file_under_the_path_concerns_the_object_and_a_sibling_does_not() {
        let w = Watched::new("./envs/prod/", &[]).unwrap();
        assert!(w.matches("envs/prod/main.tf"));
        assert!(w.matches("envs/prod/sub/x.tf"));
        assert!(!w.matches("envs/production/main.tf"));
        assert!(!w.matches("envs/staging/main.tf"));
        assert_eq!(w.touched(&files(&["envs/staging/main.tf"])), None);
        assert_eq!(
            w.touched(&files(&["README.md", "envs/prod/main.tf"])),
            Some("envs/prod/main.tf".into())
        );
    }

    #[test]
    fn watch_paths_add_shared_files_with_gitignore_rules() {
        let patterns = [
            "modules/network/".to_string(),
            "/common/*.tfvars".to_string(),
            "!modules/network/README.md".to_string(),
        ];
        let w = Watched::new("envs/prod", &patterns).unwrap();
        assert!(w.matches("modules/network/main.tf"));
        assert!(w.matches("modules/network/sub/vars.tf"));
        assert!(!w.matches("modules/network/README.md"));
        assert!(!w.matches("modules/storage/main.tf"));
        assert!(w.matches("common/prod.tfvars"));
        assert!(!w.matches("envs/common/prod.tfvars"));
    }

    #[test]
    fn the_root_path_makes_every_change_count() {
        for path in ["", ".", "./", "/"] {
            let w = Watched::new(path, &[]).unwrap();
            assert!(w.is_everything(), "{path:?}");
            assert!(w.matches("anything/at/all"));
        }
        assert!(!Watched::new("a", &[]).unwrap().is_everything());
    }

    #[test]
    fn unknown_changes_count_and_identical_trees_do_not() {
        let w = Watched::new("a", &[]).unwrap();
        assert!(w.touched(&SourceChanges::Unknown).is_some());
        assert_eq!(w.touched(&SourceChanges::Identical), None);
        assert_eq!(w.touched(&files(&[])), None);
    }

    #[test]
    fn a_malformed_pattern_is_named() {
        let e = Watched::new("a", &["ok/".into(), "{unclosed".into()]).unwrap_err();
        assert_eq!(e.pattern, "{unclosed");
    }
}
