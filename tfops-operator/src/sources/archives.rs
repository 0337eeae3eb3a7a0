//! The archives made lately, so that objects sharing a repository at one commit share one
//! checkout and one archive.
//!
//! In a monorepo every object's archive is the whole tree at the commit (a configuration may
//! read `../modules`), so without this, N objects on one commit wrote the tree N times: the
//! `scale` benchmark's 1,000 objects on a 1,000-directory repository spent minutes of system
//! time writing files. An archive depends only on the commit, the `ignore` rules and whether
//! submodules are fetched; the key also names the credentials' namespace and Secret, so that
//! an archive made with one object's credentials serves only objects reading the source with
//! the same ones (every fetch follows the object's own resolution with its own credentials
//! anyway).

use std::collections::VecDeque;
use std::sync::Mutex;

use tfops_core::ports::Artifact;

/// Archives kept at most.
const ENTRIES: usize = 16;
/// Bytes of archives kept at most (an archive alone above it is not kept).
const BYTES: usize = 128 << 20;

/// What makes an archive the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ArchiveKey {
    /// The source URL.
    pub url: String,
    /// The commit (or OCI digest).
    pub revision: String,
    /// `spec.ignore`.
    pub ignore: Option<String>,
    /// `sourceRef.recurseSubmodules`.
    pub submodules: bool,
    /// `namespace/secret` of the credentials read, empty without any.
    pub credentials: String,
}

/// The archives made lately, the most recently used last.
#[derive(Default)]
pub(super) struct Archives {
    kept: Mutex<VecDeque<(ArchiveKey, Artifact)>>,
}

impl Archives {
    fn kept(&self) -> std::sync::MutexGuard<'_, VecDeque<(ArchiveKey, Artifact)>> {
        // Only a cache: a panic elsewhere leaves it whole (each change is one push or pop).
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The archive made for `key`, if kept.
    pub(super) fn get(&self, key: &ArchiveKey) -> Option<Artifact> {
        let mut kept = self.kept();
        let at = kept.iter().position(|(k, _)| k == key)?;
        let entry = kept.remove(at)?;
        let artifact = entry.1.clone();
        kept.push_back(entry);
        Some(artifact)
    }

    /// Keeps `artifact` for `key`, dropping the least recently used beyond the bounds.
    pub(super) fn put(&self, key: ArchiveKey, artifact: Artifact) {
        if artifact.data.len() > BYTES {
            return;
        }
        let mut kept = self.kept();
        kept.retain(|(k, _)| *k != key);
        kept.push_back((key, artifact));
        while kept.len() > ENTRIES || kept.iter().map(|(_, a)| a.data.len()).sum::<usize>() > BYTES
        {
            kept.pop_front();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn key(revision: &str, credentials: &str) -> ArchiveKey {
        ArchiveKey {
            url: "git://h/r".into(),
            revision: revision.into(),
            ignore: None,
            submodules: false,
            credentials: credentials.into(),
        }
    }

    fn artifact(len: usize) -> Artifact {
        Artifact {
            sha256: format!("{len}"),
            data: Arc::new(vec![0; len]),
        }
    }

    #[test]
    fn an_archive_serves_the_same_commit_and_credentials_only_and_old_ones_go() {
        let archives = Archives::default();
        archives.put(key("a", ""), artifact(1));
        assert_eq!(archives.get(&key("a", "")).unwrap().sha256, "1");
        assert!(
            archives.get(&key("a", "team/git")).is_none(),
            "other credentials"
        );
        assert!(archives.get(&key("b", "")).is_none());
        for i in 0..ENTRIES {
            archives.put(key(&format!("c{i}"), ""), artifact(2));
        }
        assert!(
            archives.get(&key("a", "")).is_none(),
            "the least recently used went"
        );
        archives.put(key("big", ""), artifact(BYTES + 1));
        assert!(archives.get(&key("big", "")).is_none(), "too big to keep");
    }
}
