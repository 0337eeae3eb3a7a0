//! Git sources with git2: resolving a ref without cloning (`ls-remote`), fetching exactly the
//! resolved commit (shallow for branches and tags) into a cache keyed by URL, and checking the
//! tree out for archiving.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tfops_core::api::SourceRevisionRef;
use tfops_core::source::refs::{self, RefError, RemoteRef, ResolvedRef};

/// Credentials for a Git remote over HTTP(S): a username and password or token.
#[derive(Clone, Default)]
pub struct GitCredentials {
    /// The username (`git` or anything for a token).
    pub username: Option<String>,
    /// The password or token.
    pub password: Option<String>,
}

impl std::fmt::Debug for GitCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitCredentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// Why a Git operation failed. Messages name the URL with any credential removed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The remote refused the credentials (or asked for some and none were given).
    #[error("access to {url} was denied: {message}")]
    AccessDenied {
        /// The URL, without credentials.
        url: String,
        /// libgit2's message.
        message: String,
    },
    /// The remote could not be reached or talked to.
    #[error("cannot reach {url}: {message}")]
    Unreachable {
        /// The URL, without credentials.
        url: String,
        /// libgit2's message.
        message: String,
    },
    /// The ref does not resolve.
    #[error("{url}: {source}")]
    Ref {
        /// The URL, without credentials.
        url: String,
        /// What is missing.
        #[source]
        source: RefError,
    },
    /// The commit is not in the repository.
    #[error("{url}: commit {commit} does not exist")]
    NoSuchCommit {
        /// The URL, without credentials.
        url: String,
        /// The commit.
        commit: String,
    },
    /// A local repository or checkout operation failed.
    #[error("git: {0}")]
    Local(String),
}

/// `url` with any `user:password@` removed, for messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

fn classify(url: &str, e: &git2::Error) -> GitError {
    let url = redact(url);
    let message = e.message().to_string();
    let denied = e.code() == git2::ErrorCode::Auth
        || message.contains("401")
        || message.contains("403")
        || message.to_ascii_lowercase().contains("authentication");
    if denied {
        GitError::AccessDenied { url, message }
    } else {
        GitError::Unreachable { url, message }
    }
}

fn callbacks(creds: &GitCredentials) -> git2::RemoteCallbacks<'_> {
    let mut cb = git2::RemoteCallbacks::new();
    let mut tried = false;
    cb.credentials(move |_url, username, allowed| {
        // Offer the credentials once; libgit2 asks again when they are refused.
        if tried {
            return Err(git2::Error::from_str("authentication refused"));
        }
        tried = true;
        match (&creds.username, &creds.password) {
            (user, Some(password))
                if allowed.contains(git2::CredentialType::USER_PASS_PLAINTEXT) =>
            {
                git2::Cred::userpass_plaintext(
                    user.as_deref().or(username).unwrap_or("git"),
                    password,
                )
            }
            _ => Err(git2::Error::from_str(
                "authentication required but no credentials were given",
            )),
        }
    });
    cb
}

/// Git fetching with a cache of bare repositories under `cache_root`, one per URL, bounded
/// in size: past the limit, the least recently used repositories are removed.
pub struct GitSource {
    cache_root: PathBuf,
    limit: u64,
    locks: Mutex<BTreeMap<String, Arc<Mutex<()>>>>,
}

/// The default cache size limit: 2 GiB.
pub const DEFAULT_CACHE_LIMIT: u64 = 2 << 30;

fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

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

    /// Removes least recently used repositories until the cache fits its limit, never `keep`
    /// nor one in use by another fetch.
    fn evict(&self, keep: &Path) {
        let Ok(entries) = std::fs::read_dir(&self.cache_root) else {
            return;
        };
        let mut repos: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| {
                let used = std::fs::metadata(e.path().join(".last-used"))
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                (used, dir_size(&e.path()), e.path())
            })
            .collect();
        let mut total: u64 = repos.iter().map(|r| r.1).sum();
        repos.sort();
        let busy: Vec<PathBuf> = {
            let locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            locks
                .iter()
                .filter(|(_, l)| l.try_lock().is_err())
                .map(|(url, _)| self.repo_dir(url))
                .collect()
        };
        for (_, size, path) in repos {
            if total <= self.limit {
                break;
            }
            if path == keep || busy.contains(&path) {
                continue;
            }
            if std::fs::remove_dir_all(&path).is_ok() {
                total = total.saturating_sub(size);
            }
        }
    }

    /// The refs of `url` (`git ls-remote`).
    ///
    /// # Errors
    /// [`GitError::AccessDenied`] or [`GitError::Unreachable`].
    pub fn list(&self, url: &str, creds: &GitCredentials) -> Result<Vec<RemoteRef>, GitError> {
        let mut remote = git2::Remote::create_detached(url).map_err(|e| classify(url, &e))?;
        let connection = remote
            .connect_auth(git2::Direction::Fetch, Some(callbacks(creds)), None)
            .map_err(|e| classify(url, &e))?;
        let list = connection.list().map_err(|e| classify(url, &e))?;
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
        let name: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
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
        let lock = self.lock_for(url);
        // One fetch per repository at a time; different repositories proceed in parallel.
        let _guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        let dir = self.repo_dir(url);
        let repo = match git2::Repository::open_bare(&dir) {
            Ok(r) => r,
            Err(_) => {
                git2::Repository::init_bare(&dir).map_err(|e| GitError::Local(e.to_string()))?
            }
        };
        let have = |repo: &git2::Repository| -> Option<git2::Oid> {
            repo.revparse_single(&resolved.sha)
                .ok()
                .and_then(|o| o.peel_to_commit().ok())
                .map(|c| c.id())
        };
        let commit = match have(&repo) {
            Some(id) => id,
            None => {
                let mut remote = repo.remote_anonymous(url).map_err(|e| classify(url, &e))?;
                let mut options = git2::FetchOptions::new();
                options.remote_callbacks(callbacks(creds));
                let specs: Vec<String> = if resolved.fetch.is_empty() {
                    vec![
                        "+refs/heads/*:refs/tfops/heads/*".into(),
                        "+refs/tags/*:refs/tfops/tags/*".into(),
                    ]
                } else {
                    options.depth(1);
                    vec![format!("+{}:refs/tfops/fetched", resolved.fetch)]
                };
                remote
                    .fetch(&specs, Some(&mut options), None)
                    .map_err(|e| classify(url, &e))?;
                have(&repo).ok_or_else(|| GitError::NoSuchCommit {
                    url: redact(url),
                    commit: resolved.sha.clone(),
                })?
            }
        };
        let tree = repo
            .find_commit(commit)
            .and_then(|c| c.tree())
            .map_err(|e| GitError::Local(e.to_string()))?;
        std::fs::create_dir_all(dest).map_err(|e| GitError::Local(e.to_string()))?;
        let mut checkout = git2::build::CheckoutBuilder::new();
        checkout.target_dir(dest).force().recreate_missing(true);
        repo.checkout_tree(tree.as_object(), Some(&mut checkout))
            .map_err(|e| GitError::Local(e.to_string()))?;
        let _ = std::fs::write(dir.join(".last-used"), b"");
        drop(_guard);
        self.evict(&dir);
        Ok(commit.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn credentials_never_reach_messages() {
        assert_eq!(
            redact("https://bob:s3cret@git.example/r.git"),
            "https://git.example/r.git"
        );
        assert_eq!(
            redact("https://git.example/r.git"),
            "https://git.example/r.git"
        );
        assert_eq!(redact("git://127.0.0.1:9418/r"), "git://127.0.0.1:9418/r");
    }
}
