//! Choosing a revision among a repository's refs (what `git ls-remote` lists), and matching
//! Argo CD repository credentials to a URL. Pure: the Git client lists, this decides.

use crate::api::SourceRevisionRef;

/// A ref as listed by the remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteRef {
    /// Full name (`refs/heads/main`, `refs/tags/v1.2.0`, or `refs/tags/v1.2.0^{}` for the
    /// commit an annotated tag points to).
    pub name: String,
    /// The object id, hex.
    pub oid: String,
}

/// The ref chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedRef {
    /// The short name shown in revisions and plan ids (`main`, `v1.2.0`, the commit).
    pub name: String,
    /// The ref to fetch (`refs/heads/main`), empty for an exact commit.
    pub fetch: String,
    /// The commit, hex.
    pub sha: String,
}

/// Why no revision could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    /// The branch or tag does not exist.
    #[error("{kind} {name:?} does not exist")]
    NotFound {
        /// `branch` or `tag`.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// No tag satisfies the range.
    #[error("no tag matches the semver range {range:?} (among {tags} semver tags)")]
    NoSemverMatch {
        /// The range.
        range: String,
        /// How many tags parsed as versions.
        tags: usize,
    },
    /// The range is not a semver range.
    #[error("{0:?} is not a semver range")]
    BadRange(String),
}

/// Parses a semver range, accepting npm-style spaces (`>=1.2.0 <2.0.0`) as well as commas.
///
/// # Errors
/// [`RefError::BadRange`].
pub fn semver_range(text: &str) -> Result<semver::VersionReq, RefError> {
    let text = text.trim();
    let normalized = if text.contains(',') {
        text.to_string()
    } else {
        let mut parts: Vec<String> = Vec::new();
        for token in text.split_whitespace() {
            match parts.last_mut() {
                Some(last) if last.chars().all(|c| "<>=~^".contains(c)) => last.push_str(token),
                _ => parts.push(token.to_string()),
            }
        }
        parts.join(", ")
    };
    semver::VersionReq::parse(&normalized).map_err(|_| RefError::BadRange(text.to_string()))
}

/// The version a tag names (`v1.2.3` or `1.2.3`), if any.
pub fn tag_version(tag: &str) -> Option<semver::Version> {
    semver::Version::parse(tag.strip_prefix('v').unwrap_or(tag)).ok()
}

fn commit_of<'a>(refs: &'a [RemoteRef], name: &str) -> Option<&'a str> {
    // An annotated tag's peeled entry names the commit; a lightweight tag is the commit.
    let peeled = format!("{name}^{{}}");
    refs.iter()
        .find(|r| r.name == peeled)
        .or_else(|| refs.iter().find(|r| r.name == name))
        .map(|r| r.oid.as_str())
}

/// Chooses the revision `reference` names among `refs`. No ref set means the `main` branch.
/// A commit is taken as given (the fetch checks it exists).
///
/// # Errors
/// A [`RefError`] naming what is missing.
pub fn resolve(reference: &SourceRevisionRef, refs: &[RemoteRef]) -> Result<ResolvedRef, RefError> {
    if let Some(commit) = &reference.commit {
        return Ok(ResolvedRef {
            name: commit.clone(),
            fetch: String::new(),
            sha: commit.to_ascii_lowercase(),
        });
    }
    if let Some(range) = &reference.semver {
        let req = semver_range(range)?;
        let versions: Vec<(semver::Version, &str)> = refs
            .iter()
            .filter_map(|r| r.name.strip_prefix("refs/tags/"))
            .filter(|t| !t.ends_with("^{}"))
            .filter_map(|t| tag_version(t).map(|v| (v, t)))
            .collect();
        let best = versions
            .iter()
            .filter(|(v, _)| req.matches(v))
            .max_by(|a, b| a.0.cmp(&b.0))
            .ok_or_else(|| RefError::NoSemverMatch {
                range: range.clone(),
                tags: versions.len(),
            })?;
        let full = format!("refs/tags/{}", best.1);
        let sha = commit_of(refs, &full).unwrap_or_default().to_string();
        return Ok(ResolvedRef {
            name: best.1.to_string(),
            fetch: full,
            sha,
        });
    }
    let (kind, name, full) = match (&reference.tag, &reference.branch) {
        (Some(tag), _) => ("tag", tag.clone(), format!("refs/tags/{tag}")),
        (None, Some(branch)) => ("branch", branch.clone(), format!("refs/heads/{branch}")),
        (None, None) => ("branch", "main".to_string(), "refs/heads/main".to_string()),
    };
    let sha = commit_of(refs, &full).ok_or(RefError::NotFound {
        kind,
        name: name.clone(),
    })?;
    Ok(ResolvedRef {
        name,
        fetch: full,
        sha: sha.to_string(),
    })
}

/// An Argo CD repository Secret, as far as matching goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoSecret {
    /// `repository` (exact URL) or `repo-creds` (a URL prefix: a credential template).
    pub template: bool,
    /// Its `url` key.
    pub url: String,
    /// The Secret's name (for messages).
    pub name: String,
}

/// A URL as Argo CD compares it: lowercase, without a trailing `/` or `.git`.
pub fn normalize_url(url: &str) -> String {
    let lower = url.trim().to_ascii_lowercase();
    let trimmed = lower.trim_end_matches('/');
    trimmed.strip_suffix(".git").unwrap_or(trimmed).to_string()
}

/// The credentials Argo CD would use for `url`: a `repository` Secret with that exact URL,
/// else the `repo-creds` template with the longest URL prefix of it.
pub fn matching_credentials<'a>(url: &str, secrets: &'a [RepoSecret]) -> Option<&'a RepoSecret> {
    let wanted = normalize_url(url);
    secrets
        .iter()
        .find(|s| !s.template && normalize_url(&s.url) == wanted)
        .or_else(|| {
            secrets
                .iter()
                .filter(|s| s.template && wanted.starts_with(&s.url.trim().to_ascii_lowercase()))
                .max_by_key(|s| s.url.len())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs() -> Vec<RemoteRef> {
        let r = |n: &str, o: &str| RemoteRef {
            name: n.into(),
            oid: o.into(),
        };
        vec![
            r("HEAD", "aaa"),
            r("refs/heads/main", "aaa"),
            r("refs/heads/dev", "bbb"),
            r("refs/tags/v1.0.0", "c10"),
            r("refs/tags/v1.2.0", "tagobj"),
            r("refs/tags/v1.2.0^{}", "c12"),
            r("refs/tags/v2.0.0", "c20"),
            r("refs/tags/latest", "c20"),
        ]
    }

    fn reference(json: serde_json::Value) -> SourceRevisionRef {
        serde_json::from_value(json).unwrap_or_default()
    }

    #[test]
    fn branches_tags_semver_and_commits() {
        let got = |j| resolve(&reference(j), &refs());
        assert_eq!(got(serde_json::json!({})).map(|r| r.sha), Ok("aaa".into()));
        assert_eq!(
            got(serde_json::json!({"branch": "dev"})).map(|r| r.sha),
            Ok("bbb".into())
        );
        assert_eq!(
            got(serde_json::json!({"tag": "v1.2.0"})).map(|r| r.sha),
            Ok("c12".into()),
            "annotated tags are peeled"
        );
        let semver =
            got(serde_json::json!({"semver": ">=1.0.0 <2.0.0"})).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (semver.name.as_str(), semver.sha.as_str()),
            ("v1.2.0", "c12")
        );
        assert_eq!(
            got(serde_json::json!({"semver": "~1.0"})).map(|r| r.name),
            Ok("v1.0.0".into())
        );
        assert_eq!(
            got(serde_json::json!({"commit": "ABCDEF1"})).map(|r| r.sha),
            Ok("abcdef1".into())
        );
    }

    #[test]
    fn what_is_missing_is_named() {
        let got = |j| resolve(&reference(j), &refs());
        assert_eq!(
            got(serde_json::json!({"branch": "nope"})),
            Err(RefError::NotFound {
                kind: "branch",
                name: "nope".into()
            })
        );
        assert_eq!(
            got(serde_json::json!({"semver": ">=3"})),
            Err(RefError::NoSemverMatch {
                range: ">=3".into(),
                tags: 3
            })
        );
        assert_eq!(
            got(serde_json::json!({"semver": "not a range"})),
            Err(RefError::BadRange("not a range".into()))
        );
    }

    #[test]
    fn argo_cd_credentials_exact_url_then_longest_prefix() {
        let s = |template: bool, url: &str, name: &str| RepoSecret {
            template,
            url: url.into(),
            name: name.into(),
        };
        let secrets = vec![
            s(true, "https://git.example/", "all"),
            s(true, "https://git.example/platform/", "platform"),
            s(false, "https://git.example/platform/network.git", "network"),
        ];
        let name = |url| matching_credentials(url, &secrets).map(|s| s.name.clone());
        assert_eq!(
            name("https://git.example/platform/network"),
            Some("network".into())
        );
        assert_eq!(
            name("https://Git.example/platform/network.git/"),
            Some("network".into())
        );
        assert_eq!(
            name("https://git.example/platform/dns.git"),
            Some("platform".into())
        );
        assert_eq!(name("https://git.example/apps/web.git"), Some("all".into()));
        assert_eq!(name("https://other.example/x.git"), None);
    }
}
