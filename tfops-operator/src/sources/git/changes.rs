//! What changed between two commits of a repository: their trees compared in the cache, with
//! no checkout (what lets a monorepo's objects skip plans for commits elsewhere).

use std::collections::BTreeSet;

use tfops_core::source::refs::ResolvedRef;

use super::GitSource;
use super::checkout::fetch_commit;
use super::credentials::GitCredentials;
use super::error::GitError;

impl GitSource {
    /// The paths (relative to the root, `/`-separated) whose content, mode or presence differs
    /// between commit `from` (a full id, fetched by id when the cache lacks it) and the commit
    /// `to` names. Renames count at both paths; a submodule counts at its path.
    ///
    /// # Errors
    /// A [`GitError`]: either commit cannot be fetched (a server that refuses fetches by
    /// commit id, a commit no longer on the server).
    pub fn changed_files(
        &self,
        url: &str,
        from: &str,
        to: &ResolvedRef,
        creds: &GitCredentials,
    ) -> Result<Vec<String>, GitError> {
        let lock = self.lock_for(url);
        let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        let repo = self.cached_repo(url)?;
        let to = fetch_commit(&repo, url, to, creds)?;
        let by_id = ResolvedRef {
            name: from.to_string(),
            fetch: from.to_string(),
            sha: from.to_string(),
        };
        // By id, shallow; a server that refuses fetches by id (git's default for protocol v0:
        // uploadpack.allowReachableSHA1InWant is off) gives it with its branches and tags.
        let from = match fetch_commit(&repo, url, &by_id, creds) {
            Ok(id) => id,
            Err(e @ (GitError::AccessDenied { .. } | GitError::HostKey { .. })) => return Err(e),
            Err(_) => {
                let all = ResolvedRef {
                    fetch: String::new(),
                    ..by_id
                };
                fetch_commit(&repo, url, &all, creds)?
            }
        };
        let local = |e: git2::Error| GitError::Local(e.to_string());
        let tree = |id| repo.find_commit(id).and_then(|c| c.tree()).map_err(local);
        let (old, new) = (tree(from)?, tree(to)?);
        let diff = repo
            .diff_tree_to_tree(Some(&old), Some(&new), None)
            .map_err(local)?;
        let mut files = BTreeSet::new();
        for delta in diff.deltas() {
            for file in [delta.old_file(), delta.new_file()] {
                if let Some(path) = file.path().and_then(|p| p.to_str()) {
                    files.insert(path.to_string());
                }
            }
        }
        Ok(files.into_iter().collect())
    }
}
