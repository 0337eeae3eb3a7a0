//! Why a Git operation failed, with credentials kept out of every message.

use tfops_core::source::refs::RefError;

use super::credentials::HostKeyVerdict;

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
    /// The server is not the one configured: its SSH host key is not the one `known_hosts`
    /// names (or is unknown), or its TLS certificate does not chain to the configured CA.
    #[error("{url}: {message}")]
    HostKey {
        /// The URL, without credentials.
        url: String,
        /// What did not match.
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
    /// The server answered, and there is no repository at that path (or, as a Git server may
    /// say for a private one, none this client may see).
    #[error("{url}: no such repository ({message})")]
    NoSuchRepository {
        /// The URL, without credentials.
        url: String,
        /// The server's words.
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

pub(super) fn classify(url: &str, e: &git2::Error, verdict: &HostKeyVerdict) -> GitError {
    let url = redact(url);
    let message = e.message().to_string();
    if let Some(message) = verdict.lock().unwrap_or_else(|e| e.into_inner()).take() {
        // A refused host key or TLS certificate: the server is not the one configured.
        return GitError::HostKey { url, message };
    }
    let denied = e.code() == git2::ErrorCode::Auth
        || message.contains("401")
        || message.contains("403")
        || message.to_ascii_lowercase().contains("authentication");
    let lower = message.to_ascii_lowercase();
    // What Git servers answer for a path that holds no repository: git daemon's "repository
    // not exported", smart HTTP's 404, an SSH server's "does not appear to be a git
    // repository" or "repository not found".
    let missing = e.code() == git2::ErrorCode::NotFound
        || message.contains("404")
        || lower.contains("not exported")
        || lower.contains("does not appear to be a git repository")
        || lower.contains("repository not found");
    if denied {
        GitError::AccessDenied { url, message }
    } else if missing {
        GitError::NoSuchRepository { url, message }
    } else {
        GitError::Unreachable { url, message }
    }
}
