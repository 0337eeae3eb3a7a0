//! Git sources with git2: resolving a ref without cloning (`ls-remote`), fetching exactly the
//! resolved commit (shallow for branches and tags) into a cache keyed by URL, and checking the
//! tree out for archiving.

mod cache;
mod changes;
mod checkout;
mod credentials;
mod error;

pub use credentials::{GitCredentials, HostKeyCheck, check_host_key};
pub use error::{GitError, redact};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tfops_core::api::SourceRevisionRef;
use tfops_core::source::refs::{self, RemoteRef, ResolvedRef};

use checkout::submodule_credentials;
use credentials::{HostKeyVerdict, callbacks};
use error::classify;

/// Git fetching with a cache of bare repositories under `cache_root`, one per URL, bounded
/// in size: past the limit, the least recently used repositories are removed.
pub struct GitSource {
    cache_root: PathBuf,
    limit: u64,
    locks: Mutex<BTreeMap<String, Arc<Mutex<()>>>>,
}

/// The default cache size limit: 2 GiB.
pub const DEFAULT_CACHE_LIMIT: u64 = 2 << 30;

impl GitSource {
    /// A source caching under `cache_root`.
    pub fn new(cache_root: &Path) -> Self {
        Self::with_limit(cache_root, DEFAULT_CACHE_LIMIT)
    }

    /// A source whose cache holds at most about `limit` bytes (the repository in use is
    /// always kept).
    pub fn with_limit(cache_root: &Path, limit: u64) -> Self {
        Self {
            cache_root: cache_root.to_path_buf(),
            limit,
            locks: Mutex::new(BTreeMap::new()),
        }
    }
    /// The refs of `url` (`git ls-remote`).
    ///
    /// # Errors
    /// [`GitError::AccessDenied`] or [`GitError::Unreachable`].
    pub fn list(&self, url: &str, creds: &GitCredentials) -> Result<Vec<RemoteRef>, GitError> {
        let verdict = HostKeyVerdict::default();
        let mut remote =
            git2::Remote::create_detached(url).map_err(|e| classify(url, &e, &verdict))?;
        let connection = remote
            .connect_auth(
                git2::Direction::Fetch,
                Some(callbacks(creds, url, &verdict)),
                None,
            )
            .map_err(|e| classify(url, &e, &verdict))?;
        let list = connection.list().map_err(|e| classify(url, &e, &verdict))?;
        Ok(list
            .iter()
            .map(|h| RemoteRef {
                name: h.name().to_string(),
                oid: h.oid().to_string(),
            })
            .collect())
    }

    /// Resolves `reference` on `url` without cloning.
    ///
    /// # Errors
    /// A [`GitError`].
    pub fn resolve(
        &self,
        url: &str,
        reference: &SourceRevisionRef,
        creds: &GitCredentials,
    ) -> Result<ResolvedRef, GitError> {
        let listed = self.list(url, creds)?;
        refs::resolve(reference, &listed).map_err(|source| GitError::Ref {
            url: redact(url),
            source,
        })
    }

    fn repo_dir(&self, url: &str) -> PathBuf {
        let digest = Sha256::digest(url.as_bytes());
        let name = tfops_core::digest::hex(&digest[..12]);
        self.cache_root.join(name)
    }

    fn lock_for(&self, url: &str) -> Arc<Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(url.to_string()).or_default().clone()
    }

    /// Fetches the resolved commit (shallow when it is a branch or tag tip) and checks its tree
    /// out into `dest` (which must not exist). Returns the full commit id.
    ///
    /// # Errors
    /// A [`GitError`].
    pub fn checkout(
        &self,
        url: &str,
        resolved: &ResolvedRef,
        creds: &GitCredentials,
        dest: &Path,
    ) -> Result<String, GitError> {
        self.checkout_with(url, resolved, creds, dest, false)
    }

    /// [`GitSource::checkout`], and with `submodules` the submodules the tree names, each at
    /// the commit the tree records, recursively (relative URLs resolve against `url`).
    ///
    /// A submodule URL is whatever the repository's authors wrote, so it is not trusted like
    /// the source itself: it must use `https`, `ssh` or the parent's own scheme (never, say,
    /// `file://` on the controller's disk from an `https` source), and the parent's
    /// credentials go only to a submodule on the parent's own host; others are fetched
    /// anonymously (host keys and CA bundle still apply).
    ///
    /// # Errors
    /// A [`GitError`].
    pub fn checkout_with(
        &self,
        url: &str,
        resolved: &ResolvedRef,
        creds: &GitCredentials,
        dest: &Path,
        submodules: bool,
    ) -> Result<String, GitError> {
        let commit = self.checkout_tree(url, resolved, creds, dest)?;
        if submodules {
            for (path, sub_url, sub_commit) in self.submodules(url, &commit)? {
                let pinned = ResolvedRef {
                    name: sub_commit.clone(),
                    fetch: String::new(),
                    sha: sub_commit,
                };
                let sub_creds = submodule_credentials(url, &sub_url, creds)?;
                self.checkout_with(&sub_url, &pinned, &sub_creds, &dest.join(&path), true)?;
            }
        }
        Ok(commit)
    }
}
