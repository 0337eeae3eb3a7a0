//! Which repository a URL names, whatever its form: a forge's webhook names a repository by
//! its clone, web and SSH URLs, and objects name it by any of them (with credentials, with or
//! without `.git`).

/// `host/owner/repo` (lowercase, as forges compare them; no scheme, user, port, trailing `/`
/// or `.git`) for a
/// Git URL (`https://`, `http://`, `ssh://`, `git://`, or scp-like `user@host:path`); `None`
/// for anything else (a local path, an OCI reference). Two URLs of one repository give the
/// same identity; the port is left out so that a repository's SSH and HTTPS URLs match.
pub fn repository_id(url: &str) -> Option<String> {
    let url = url.trim();
    let (host, path) = match url.split_once("://") {
        Some(("http" | "https" | "ssh" | "git", rest)) => rest.split_once('/')?,
        Some(_) => return None,
        // scp-like: `git@host:owner/repo.git`.
        None => {
            let (host, path) = url.split_once(':')?;
            // A Windows path (`C:\x`) or a local path with a colon is not a repository.
            if host.contains('/') || host.len() < 2 || path.starts_with('\\') {
                return None;
            }
            (host, path)
        }
    };
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    let host = host.split(':').next().unwrap_or(host).to_ascii_lowercase();
    let path = path.trim_matches('/');
    let path = path
        .strip_suffix(".git")
        .unwrap_or(path)
        .trim_end_matches('/');
    if host.is_empty() || path.is_empty() {
        return None;
    }
    Some(format!("{host}/{}", path.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use super::repository_id;

    #[test]
    fn every_form_of_one_repository_gives_one_identity() {
        let id = Some("git.example.com/team/infra".to_string());
        for url in [
            "https://git.example.com/team/infra.git",
            "https://user:token@Git.Example.com:3000/team/infra/",
            "http://git.example.com/team/infra",
            "ssh://git@git.example.com:2222/team/infra.git",
            "git@git.example.com:team/infra.git",
        ] {
            assert_eq!(repository_id(url), id, "{url}");
        }
        assert_ne!(repository_id("https://git.example.com/team/infra-live"), id);
        assert_eq!(repository_id("oci://registry.example.com/infra"), None);
        assert_eq!(repository_id("/srv/infra"), None);
        assert_eq!(repository_id("C:\\infra"), None);
        assert_eq!(
            repository_id("https://git.example.com/Team/Infra.git"),
            id,
            "forges compare owner and name without case"
        );
    }
}
