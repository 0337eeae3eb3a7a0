//! Git sources with git2: resolving a ref without cloning (`ls-remote`), fetching exactly the
//! resolved commit (shallow for branches and tags) into a cache keyed by URL, and checking the
//! tree out for archiving.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tfops_core::api::SourceRevisionRef;
use tfops_core::source::refs::{self, RefError, RemoteRef, ResolvedRef};

/// Credentials for a Git remote: a username and password or token (HTTP), or a private key
/// checked against `known_hosts` (SSH).
#[derive(Clone, Default)]
pub struct GitCredentials {
    /// The username (`git` or anything for a token).
    pub username: Option<String>,
    /// The password or token.
    pub password: Option<String>,
    /// An SSH private key (OpenSSH PEM).
    pub ssh_private_key: Option<String>,
    /// Its passphrase.
    pub ssh_passphrase: Option<String>,
    /// `known_hosts` lines the server's host key must match.
    pub known_hosts: Option<String>,
    /// Accept a server whose host is not in `known_hosts` at all (a mismatch is never accepted).
    pub allow_unknown_host_key: bool,
    /// CA certificates (PEM) an `https://` server's certificate must chain to, instead of the
    /// system's roots.
    pub ca_bundle: Option<String>,
}

impl std::fmt::Debug for GitCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("GitCredentials")
            .field("username", &self.username)
            .field("password", &secret(&self.password))
            .field("ssh_private_key", &secret(&self.ssh_private_key))
            .field("ssh_passphrase", &secret(&self.ssh_passphrase))
            .field("allow_unknown_host_key", &self.allow_unknown_host_key)
            .finish()
    }
}

/// How a server's SSH host key compares with `known_hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostKeyCheck {
    /// An entry for the host has this key.
    Known,
    /// Entries for the host exist, none with this key.
    Mismatch,
    /// No entry names the host.
    Unknown,
}

/// Checks `key` (type name like `ssh-ed25519`, raw key blob) of `host` (and `port`) against
/// plain (unhashed) `known_hosts` lines.
pub fn check_host_key(
    known_hosts: &str,
    host: &str,
    port: u16,
    key_type: &str,
    key: &[u8],
) -> HostKeyCheck {
    use base64::Engine;
    let names = [host.to_string(), format!("[{host}]:{port}")];
    let mut seen = false;
    for line in known_hosts
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let mut fields = line.split_whitespace();
        let (Some(hosts), Some(kind), Some(blob)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if !hosts
            .split(',')
            .any(|h| names.iter().any(|n| n == h) || (port == 22 && h == host))
        {
            continue;
        }
        seen = true;
        let matches = kind == key_type
            && base64::engine::general_purpose::STANDARD
                .decode(blob)
                .is_ok_and(|b| b == key);
        if matches {
            return HostKeyCheck::Known;
        }
    }
    if seen {
        HostKeyCheck::Mismatch
    } else {
        HostKeyCheck::Unknown
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

fn classify(url: &str, e: &git2::Error, verdict: &HostKeyVerdict) -> GitError {
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
    if denied {
        GitError::AccessDenied { url, message }
    } else {
        GitError::Unreachable { url, message }
    }
}

/// Writes `tree` into `dest`: files with their executable bit, symlinks, and an empty
/// directory for each submodule. (libgit2's checkout wants a working tree for submodules; a
/// plain walk needs none.)
fn write_tree(repo: &git2::Repository, tree: &git2::Tree<'_>, dest: &Path) -> Result<(), GitError> {
    use std::os::unix::fs::PermissionsExt;
    let local = |e: &dyn std::fmt::Display| GitError::Local(e.to_string());
    std::fs::create_dir_all(dest).map_err(|e| local(&e))?;
    for entry in tree.iter() {
        let name = entry
            .name()
            .map_err(|_| GitError::Local("a tree entry name is not UTF-8".into()))?;
        if name.contains('/') || name == ".." || name == "." {
            return Err(GitError::Local(format!("refusing tree entry {name:?}")));
        }
        let path = dest.join(name);
        match entry.filemode() {
            0o040000 => {
                let sub = repo.find_tree(entry.id()).map_err(|e| local(&e))?;
                write_tree(repo, &sub, &path)?;
            }
            0o160000 => std::fs::create_dir_all(&path).map_err(|e| local(&e))?,
            mode => {
                let blob = repo.find_blob(entry.id()).map_err(|e| local(&e))?;
                if mode == 0o120000 {
                    let target = String::from_utf8_lossy(blob.content()).into_owned();
                    std::os::unix::fs::symlink(target, &path).map_err(|e| local(&e))?;
                } else {
                    std::fs::write(&path, blob.content()).map_err(|e| local(&e))?;
                    let perms = if mode == 0o100755 { 0o755 } else { 0o644 };
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(perms))
                        .map_err(|e| local(&e))?;
                }
            }
        }
    }
    Ok(())
}

/// `path` → `url` of the submodules in a `.gitmodules` file.
fn parse_gitmodules(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let (mut path, mut url): (Option<String>, Option<String>) = (None, None);
    let mut flush = |path: &mut Option<String>, url: &mut Option<String>| {
        if let (Some(p), Some(u)) = (path.take(), url.take()) {
            out.insert(p, u);
        }
    };
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            flush(&mut path, &mut url);
        } else if let Some((k, v)) = line.split_once('=') {
            match k.trim() {
                "path" => path = Some(v.trim().to_string()),
                "url" => url = Some(v.trim().to_string()),
                _ => {}
            }
        }
    }
    flush(&mut path, &mut url);
    out
}

/// The scheme and host (with port) of a Git URL; scp-like `user@host:path` is `ssh`.
fn scheme_and_host(url: &str) -> (String, String) {
    // `<transport>::<address>` picks a remote helper (`ext::` runs a command).
    if let Some((transport, _)) = url.split_once("::")
        && !transport.contains('/')
    {
        return (
            format!("{}::", transport.to_ascii_lowercase()),
            String::new(),
        );
    }
    if let Some((scheme, rest)) = url.split_once("://") {
        let authority = rest.split('/').next().unwrap_or_default();
        let host = authority.rsplit('@').next().unwrap_or_default();
        return (scheme.to_ascii_lowercase(), host.to_ascii_lowercase());
    }
    match url.split_once(':') {
        Some((user_host, _)) if !user_host.contains('/') => (
            "ssh".into(),
            user_host
                .rsplit('@')
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase(),
        ),
        _ => ("file".into(), String::new()),
    }
}

/// The credentials a submodule at `sub` gets when its parent is `parent` (see
/// [`GitSource::checkout_with`]), or why it is refused.
fn submodule_credentials(
    parent: &str,
    sub: &str,
    creds: &GitCredentials,
) -> Result<GitCredentials, GitError> {
    let (parent_scheme, parent_host) = scheme_and_host(parent);
    let (scheme, host) = scheme_and_host(sub);
    let allowed = scheme == "https" || scheme == "ssh" || scheme == parent_scheme;
    if !allowed {
        return Err(GitError::Local(format!(
            "submodule {} uses {scheme}, which a submodule of a {parent_scheme} source may not (allowed: https, ssh, {parent_scheme})",
            redact(sub)
        )));
    }
    if host == parent_host {
        return Ok(creds.clone());
    }
    Ok(GitCredentials {
        known_hosts: creds.known_hosts.clone(),
        allow_unknown_host_key: creds.allow_unknown_host_key,
        ca_bundle: creds.ca_bundle.clone(),
        ..GitCredentials::default()
    })
}

/// A submodule URL, relative ones (`../x`, `./x`) resolved against the parent's URL.
fn join_url(parent: &str, sub: &str) -> String {
    if !(sub.starts_with("../") || sub.starts_with("./")) {
        return sub.to_string();
    }
    let mut base: Vec<&str> = parent.trim_end_matches('/').split('/').collect();
    for part in sub.split('/') {
        match part {
            "." => {}
            ".." => {
                base.pop();
            }
            p => base.push(p),
        }
    }
    base.join("/")
}

/// Verifies a server certificate (DER) for `host` against the CA certificates of `ca_pem`.
fn verify_with_ca(ca_pem: &str, leaf: &[u8], host: &str) -> Result<(), String> {
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| format!("the CA bundle is not PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("the CA bundle holds an unusable certificate: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    verifier
        .verify_server_cert(
            &CertificateDer::from(leaf.to_vec()),
            &[],
            &name,
            &[],
            UnixTime::now(),
        )
        .map(drop)
        .map_err(|e| e.to_string())
}

fn port_of(url: &str) -> u16 {
    url.split_once("://")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|authority| {
            authority
                .rsplit_once('@')
                .map_or(Some(authority), |(_, h)| Some(h))
        })
        .and_then(|hostport| hostport.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or(22)
}

/// Why the host-key check refused a server, kept because libgit2 replaces the callback's
/// error with a generic one.
type HostKeyVerdict = Mutex<Option<String>>;

fn callbacks<'a>(
    creds: &'a GitCredentials,
    url: &str,
    verdict: &'a HostKeyVerdict,
) -> git2::RemoteCallbacks<'a> {
    let mut cb = git2::RemoteCallbacks::new();
    let mut tried = false;
    cb.credentials(move |_url, username, allowed| {
        // SSH without a user in the URL: libgit2 first asks only for the user name.
        if allowed == git2::CredentialType::USERNAME {
            return git2::Cred::username(creds.username.as_deref().unwrap_or("git"));
        }
        // Offer the credentials once; libgit2 asks again when they are refused.
        if tried {
            return Err(git2::Error::from_str("authentication refused"));
        }
        tried = true;
        if allowed.contains(git2::CredentialType::SSH_KEY)
            && let Some(key) = &creds.ssh_private_key
        {
            let user = creds.username.as_deref().or(username).unwrap_or("git");
            return git2::Cred::ssh_key_from_memory(
                user,
                None,
                key,
                creds.ssh_passphrase.as_deref(),
            );
        }
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
    let port = port_of(url);
    cb.certificate_check(move |cert, host| {
        let Some(hostkey) = cert.as_hostkey() else {
            // TLS: against the configured CA, else libgit2 checks the system's roots.
            let (Some(ca), Some(x509)) = (&creds.ca_bundle, cert.as_x509()) else {
                return Ok(git2::CertificateCheckStatus::CertificatePassthrough);
            };
            return match verify_with_ca(ca, x509.data(), host) {
                Ok(()) => Ok(git2::CertificateCheckStatus::CertificateOk),
                Err(why) => {
                    let refusal = format!("TLS certificate of {host} was refused: {why}");
                    *verdict.lock().unwrap_or_else(|e| e.into_inner()) = Some(refusal.clone());
                    Err(git2::Error::from_str(&refusal))
                }
            };
        };
        let (Some(key), Some(kind)) = (hostkey.hostkey(), hostkey.hostkey_type()) else {
            return Err(git2::Error::from_str("host key of an unknown type"));
        };
        let known = creds.known_hosts.as_deref().unwrap_or("");
        let refusal = match check_host_key(known, host, port, kind.name(), key) {
            HostKeyCheck::Known => return Ok(git2::CertificateCheckStatus::CertificateOk),
            HostKeyCheck::Unknown if creds.allow_unknown_host_key => {
                return Ok(git2::CertificateCheckStatus::CertificateOk);
            }
            HostKeyCheck::Unknown => format!(
                "host key of {host} is unknown: add it to known_hosts (or allow unknown host keys explicitly)"
            ),
            HostKeyCheck::Mismatch => format!(
                "host key mismatch for {host}: the server's {} key is not the one known_hosts names",
                kind.name()
            ),
        };
        *verdict.lock().unwrap_or_else(|e| e.into_inner()) = Some(refusal.clone());
        Err(git2::Error::from_str(&refusal))
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

    /// The gitlinks of `commit`'s tree with their URLs from `.gitmodules`: (path, url, commit).
    fn submodules(
        &self,
        url: &str,
        commit: &str,
    ) -> Result<Vec<(String, String, String)>, GitError> {
        let local = |e: git2::Error| GitError::Local(e.to_string());
        let repo = git2::Repository::open_bare(self.repo_dir(url)).map_err(local)?;
        let tree = repo
            .find_commit(git2::Oid::from_str(commit).map_err(local)?)
            .and_then(|c| c.tree())
            .map_err(local)?;
        let mut links = Vec::new();
        tree.walk(git2::TreeWalkMode::PreOrder, |root, entry| {
            if entry.filemode() == 0o160000 {
                links.push((
                    format!("{root}{}", entry.name().unwrap_or_default()),
                    entry.id().to_string(),
                ));
            }
            git2::TreeWalkResult::Ok
        })
        .map_err(local)?;
        if links.is_empty() {
            return Ok(Vec::new());
        }
        let modules = tree
            .get_path(Path::new(".gitmodules"))
            .and_then(|e| e.to_object(&repo))
            .map_err(local)?;
        let text = modules
            .as_blob()
            .map(|b| String::from_utf8_lossy(b.content()).into_owned())
            .unwrap_or_default();
        let urls = parse_gitmodules(&text);
        links
            .into_iter()
            .map(|(path, sha)| {
                let sub = urls.get(&path).ok_or_else(|| {
                    GitError::Local(format!("submodule {path} has no URL in .gitmodules"))
                })?;
                Ok((path, join_url(url, sub), sha))
            })
            .collect()
    }

    fn checkout_tree(
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
                let verdict = HostKeyVerdict::default();
                let mut remote = repo
                    .remote_anonymous(url)
                    .map_err(|e| classify(url, &e, &verdict))?;
                let mut options = git2::FetchOptions::new();
                options.remote_callbacks(callbacks(creds, url, &verdict));
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
                    .map_err(|e| classify(url, &e, &verdict))?;
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
        write_tree(&repo, &tree, dest)?;
        let _ = std::fs::write(dir.join(".last-used"), b"");
        drop(_guard);
        self.evict(&dir);
        Ok(commit.to_string())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::{GitCredentials, redact, submodule_credentials};

    fn creds() -> GitCredentials {
        GitCredentials {
            username: Some("ci".into()),
            password: Some("token".into()),
            known_hosts: Some("git.example ssh-ed25519 AAAA".into()),
            ..GitCredentials::default()
        }
    }

    #[test]
    fn submodules_get_the_parents_credentials_only_on_its_host() {
        let same = submodule_credentials(
            "https://git.example/infra.git",
            "https://git.example/net.git",
            &creds(),
        )
        .unwrap();
        assert_eq!(same.password.as_deref(), Some("token"));
        let other = submodule_credentials(
            "https://git.example/infra.git",
            "https://evil.example/x.git",
            &creds(),
        )
        .unwrap();
        assert!(other.password.is_none() && other.username.is_none());
        assert_eq!(
            other.known_hosts,
            creds().known_hosts,
            "host keys still apply"
        );
        // Another port is another server.
        let port = submodule_credentials(
            "https://git.example/infra.git",
            "https://git.example:8443/x.git",
            &creds(),
        )
        .unwrap();
        assert!(port.password.is_none());
        // scp-like SSH URLs name their host too.
        let ssh = submodule_credentials(
            "git@git.example:infra.git",
            "git@git.example:net.git",
            &creds(),
        )
        .unwrap();
        assert_eq!(ssh.password.as_deref(), Some("token"));
    }

    #[test]
    fn submodules_may_not_switch_to_a_local_or_odd_scheme() {
        for bad in [
            "file:///etc/secrets",
            "/srv/repos/x",
            "ext::sh -c touch% /tmp/x",
        ] {
            let refused =
                submodule_credentials("https://git.example/infra.git", bad, &creds()).unwrap_err();
            assert!(refused.to_string().contains("may not"), "{refused}");
        }
        // The parent's own scheme stays allowed (a file:// source's file:// submodules).
        assert!(submodule_credentials("file:///r/infra", "file:///r/net", &creds()).is_ok());
        assert!(submodule_credentials("git://h/infra", "git://h/net", &creds()).is_ok());
    }

    #[test]
    fn gitmodules_and_relative_urls() {
        let text = "[submodule \"net\"]\n\tpath = modules/net\n\turl = ../net.git\n[submodule \"x\"]\n\tpath = x\n\turl = https://git.example/x\n";
        let m = super::parse_gitmodules(text);
        assert_eq!(m["modules/net"], "../net.git");
        assert_eq!(
            super::join_url("https://git.example/org/infra.git", "../net.git"),
            "https://git.example/org/net.git"
        );
        assert_eq!(
            super::join_url("git://h/infra", "./sub"),
            "git://h/infra/sub"
        );
        assert_eq!(
            super::join_url("git://h/infra", "https://o/x"),
            "https://o/x"
        );
    }

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
