//! Which files of a source tree go into the archive.

use std::path::Path;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::ArchiveError;

/// The file at the source root whose gitignore-style lines exclude files, as in Flux.
pub const SOURCEIGNORE: &str = ".sourceignore";

/// Gitignore-style exclusion rules for one source tree.
#[derive(Debug, Clone)]
pub struct IgnoreRules {
    matcher: Gitignore,
}

impl IgnoreRules {
    /// Rules for the tree at `root`: `.git/` always, then `root/.sourceignore` if present, then
    /// `extra` (the object's `spec.ignore`), later lines winning as in a `.gitignore`.
    ///
    /// # Errors
    /// [`ArchiveError::IgnoreRule`] for a malformed line, [`ArchiveError::Io`] if
    /// `.sourceignore` exists but cannot be read.
    pub fn new(root: &Path, extra: Option<&str>) -> Result<Self, ArchiveError> {
        let mut builder = GitignoreBuilder::new(root);
        builder
            .add_line(None, ".git/")
            .map_err(|e| ArchiveError::IgnoreRule(e.to_string()))?;
        let file = root.join(SOURCEIGNORE);
        if file.is_file() {
            let text = std::fs::read_to_string(&file).map_err(|source| ArchiveError::Io {
                path: file.clone(),
                source,
            })?;
            add_lines(&mut builder, &text)?;
        }
        if let Some(extra) = extra {
            add_lines(&mut builder, extra)?;
        }
        let matcher = builder
            .build()
            .map_err(|e| ArchiveError::IgnoreRule(e.to_string()))?;
        Ok(Self { matcher })
    }

    /// Whether `relative` (a path inside the root) is excluded.
    pub fn excludes(&self, relative: &Path, is_dir: bool) -> bool {
        self.matcher
            .matched_path_or_any_parents(relative, is_dir)
            .is_ignore()
    }
}

fn add_lines(builder: &mut GitignoreBuilder, text: &str) -> Result<(), ArchiveError> {
    for line in text.lines() {
        builder
            .add_line(None, line)
            .map_err(|e| ArchiveError::IgnoreRule(format!("{line:?}: {e}")))?;
    }
    Ok(())
}
