//! Checking a fetched commit out: its tree written to disk, and its submodules fetched with
//! the parent's credentials only where they belong.

use std::collections::BTreeMap;
use std::path::Path;

use tfops_core::source::refs::ResolvedRef;

use super::GitSource;
use super::credentials::{GitCredentials, HostKeyVerdict, callbacks, scheme_and_host};
use super::error::{GitError, classify, redact};

/// Writes `tree` into `dest`: files with their executable bit, symlinks, and an empty
/// directory for each submodule. (libgit2's checkout wants a working tree for submodules; a
/// plain walk needs none.)
pub(super) fn write_tree(
    repo: &git2::Repository,
    tree: &git2::Tree<'_>,
    dest: &Path,
) -> Result<(), GitError> {
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
pub(super) fn parse_gitmodules(text: &str) -> BTreeMap<String, String> {
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

/// The credentials a submodule at `sub` gets when its parent is `parent` (see
/// [`GitSource::checkout_with`]), or why it is refused.
pub(super) fn submodule_credentials(
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
pub(super) fn join_url(parent: &str, sub: &str) -> String {
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

impl GitSource {
    /// The gitlinks of `commit`'s tree with their URLs from `.gitmodules`: (path, url, commit).
    pub(super) fn submodules(
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

    pub(super) fn checkout_tree(
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
        let repo = self.cached_repo(url)?;
        let commit = fetch_commit(&repo, url, resolved, creds)?;
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

    /// The bare repository caching `url`, made when there is none yet.
    pub(super) fn cached_repo(&self, url: &str) -> Result<git2::Repository, GitError> {
        let dir = self.repo_dir(url);
        match git2::Repository::open_bare(&dir) {
            Ok(r) => Ok(r),
            Err(_) => git2::Repository::init_bare(&dir).map_err(|e| GitError::Local(e.to_string())),
        }
    }
}

/// The commit `resolved` names, fetched into `repo` unless it is there already: shallow when
/// `resolved` says which ref to fetch (a branch or tag tip, or a commit by id), else every
/// branch and tag.
pub(super) fn fetch_commit(
    repo: &git2::Repository,
    url: &str,
    resolved: &ResolvedRef,
    creds: &GitCredentials,
) -> Result<git2::Oid, GitError> {
    let have = |repo: &git2::Repository| -> Option<git2::Oid> {
        repo.revparse_single(&resolved.sha)
            .ok()
            .and_then(|o| o.peel_to_commit().ok())
            .map(|c| c.id())
    };
    if let Some(id) = have(repo) {
        return Ok(id);
    }
    let verdict = HostKeyVerdict::default();
    let mut remote = repo
        .remote_anonymous(url)
        .map_err(|e| classify(url, &e, &verdict))?;
    let mut options = git2::FetchOptions::new();
    options.remote_callbacks(callbacks(creds, url, &verdict));
    let specs: Vec<String> = if resolved.fetch.is_empty() {
        if repo.is_shallow() {
            // Earlier shallow fetches cut the history off at their tips: deepen it all the way
            // (libgit2's GIT_FETCH_DEPTH_UNSHALLOW), or an older commit stays out of reach.
            options.depth(i32::MAX);
        }
        vec![
            "+refs/heads/*:refs/tfops/heads/*".into(),
            "+refs/tags/*:refs/tfops/tags/*".into(),
            // Pull requests' heads (Gitea and GitHub publish them here): a fork's head is
            // in no branch of the repository.
            "+refs/pull/*/head:refs/tfops/pull/*".into(),
        ]
    } else {
        options.depth(1);
        vec![format!("+{}:refs/tfops/fetched", resolved.fetch)]
    };
    remote
        .fetch(&specs, Some(&mut options), None)
        .map_err(|e| classify(url, &e, &verdict))?;
    have(repo).ok_or_else(|| GitError::NoSuchCommit {
        url: redact(url),
        commit: resolved.sha.clone(),
    })
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
