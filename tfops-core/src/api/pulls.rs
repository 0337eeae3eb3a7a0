//! `spec.sourceRef.pullRequests`: where the source's pull requests are, and whose are planned.
//!
//! Each object says it once, so an object can opt in or out on its own; the manager groups
//! the objects of one repository (most of a monorepo's objects are not touched by a given pull
//! request, and are never planned for it).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Plans of the source's open pull requests (a speculative plan per touched object, shown on
/// the pull request as one comment and a commit status per object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PullRequests {
    /// The forge that hosts the repository: `gitea`.
    pub forge: ForgeKind,
    /// The forge's API base, e.g. `https://git.example.com/api/v1`. Default: derived from
    /// `spec.sourceRef.url`: its scheme, host, port and any path before `<owner>/<repo>`,
    /// then `/api/v1`.
    #[serde(default, rename = "apiURL", skip_serializing_if = "Option::is_none")]
    pub api_url: Option<String>,
    /// A Secret in the object's namespace and its key holding the forge token tfops acts with
    /// (Gitea: a user with admin permission on the repository, scopes `read:user`,
    /// `read:repository`, `write:repository` for commit statuses and `write:issue` for the
    /// comment). Read by the controller only.
    pub token_secret_ref: TokenSecretRef,
    /// Forge logins whose pull requests are planned as soon as they are opened or pushed to.
    /// Default (empty): the repository's collaborators with write permission. Listed or not,
    /// the author of a pull request from a fork is trusted only when listed here. Another's
    /// pull request is planned once a trusted user has read it and comments `/tfops plan
    /// <commit>` naming its head (a later push needs a new comment).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_authors: Vec<String>,
    /// Who may approve this object's plans on a pull request. An approving review of one of
    /// them (not the author), given on the head that was planned and neither stale nor
    /// dismissed, approves that plan's content: after the merge, the object's plan at the
    /// merge commit is applied without another approval when it does exactly the same.
    /// Default (empty): approvals on pull requests count for nothing.
    #[serde(default, skip_serializing_if = "Approvers::is_empty")]
    pub approvers: Approvers,
}

/// Forge users and teams whose approving reviews count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Approvers {
    /// Forge logins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// Teams, as `<organisation>/<team>`: their members, as the forge says when the review is
    /// read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub teams: Vec<String>,
}

impl Approvers {
    /// No one.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty() && self.teams.is_empty()
    }

    /// The teams as (organisation, team); a name without `/` is left out (validation refuses
    /// it).
    pub fn team_names(&self) -> Vec<(&str, &str)> {
        self.teams
            .iter()
            .filter_map(|t| t.split_once('/'))
            .filter(|(o, t)| !o.is_empty() && !t.is_empty())
            .collect()
    }
}

/// A Secret, and the key of it holding a token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TokenSecretRef {
    /// The Secret's name.
    pub name: String,
    /// The key. Default `token`.
    #[serde(default = "token_key")]
    pub key: String,
    /// The Secret's namespace. Default: the object's, where every run's identity (the runner
    /// role) can read it. Keep it in a namespace where no runner runs (the manager's, or one
    /// of its own): the Secret must then say which namespaces' objects may use it, in its
    /// annotation `infra.argocd.io/forge-token-namespaces` (comma-separated names, or `*`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// The annotation by which a forge token's Secret in another namespace lets objects of the
/// namespaces it lists (comma-separated, or `*` for all) use it.
pub const FORGE_TOKEN_NAMESPACES: &str = "infra.argocd.io/forge-token-namespaces";

impl TokenSecretRef {
    /// The namespace of the Secret for an object in `object_namespace`.
    pub fn namespace_for<'a>(&'a self, object_namespace: &'a str) -> &'a str {
        self.namespace
            .as_deref()
            .filter(|n| !n.is_empty())
            .unwrap_or(object_namespace)
    }
}

/// Whether a token Secret whose [`FORGE_TOKEN_NAMESPACES`] annotation is `granted` (none:
/// `None`) may be used by an object in `object_namespace`, the Secret being in
/// `secret_namespace`: always in the object's own namespace, elsewhere only when listed.
pub fn token_granted(
    granted: Option<&str>,
    secret_namespace: &str,
    object_namespace: &str,
) -> bool {
    secret_namespace == object_namespace
        || granted.is_some_and(|list| {
            list.split(',')
                .map(str::trim)
                .any(|n| n == "*" || n == object_namespace)
        })
}

fn token_key() -> String {
    "token".into()
}

/// The forges tfops plans pull requests on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ForgeKind {
    /// Gitea (and its API, v1).
    #[serde(rename = "gitea")]
    Gitea,
}

/// A repository on a forge, as its API names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ForgeRepository {
    /// The API base, without a trailing `/` (`https://git.example.com/api/v1`).
    pub api_url: String,
    /// The owner (user or organisation).
    pub owner: String,
    /// The repository's name.
    pub name: String,
}

impl std::fmt::Display for ForgeRepository {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} at {}", self.owner, self.name, self.api_url)
    }
}

impl PullRequests {
    /// The repository `source_url` (`spec.sourceRef.url`) names on the forge.
    ///
    /// # Errors
    /// Why the URL names no repository of a forge's HTTP API, in words naming the field.
    pub fn repository(&self, source_url: &str) -> Result<ForgeRepository, String> {
        // Messages reach status and events: never the URL's credentials.
        let shown = redacted(source_url);
        let (scheme, rest) = source_url
            .split_once("://")
            .filter(|(s, _)| *s == "http" || *s == "https")
            .ok_or_else(|| {
                "spec.sourceRef.url must be an http:// or https:// URL of the forge's repository \
                 for pull requests to be planned"
                    .to_string()
            })?;
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
        let segments: Vec<&str> = path
            .trim_end_matches('/')
            .trim_end_matches(".git")
            .split('/')
            .filter(|s| !s.is_empty())
            .collect();
        let [prefix @ .., owner, name] = segments.as_slice() else {
            return Err(format!(
                "spec.sourceRef.url {shown} names no <owner>/<repository> on the forge"
            ));
        };
        if host.is_empty() {
            return Err(format!("spec.sourceRef.url {shown} has no host"));
        }
        let api_url = match &self.api_url {
            Some(url) => url.trim_end_matches('/').to_string(),
            None if prefix.is_empty() => format!("{scheme}://{host}/api/v1"),
            None => format!("{scheme}://{host}/{}/api/v1", prefix.join("/")),
        };
        Ok(ForgeRepository {
            api_url,
            owner: owner.to_string(),
            name: name.to_string(),
        })
    }
}

/// `url` without the user and password of its authority (`https://***@host/...`).
fn redacted(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find('/').unwrap_or(rest.len());
            match rest[..end].rsplit_once('@') {
                Some((_, host)) => format!("{scheme}://***@{host}{}", &rest[end..]),
                None => url.to_string(),
            }
        }
        None => url.to_string(),
    }
}

/// What is wrong with `spec.sourceRef.pullRequests` of a source at `source_url`, as (field,
/// message) pairs.
pub(super) fn problems(source_url: &str, pulls: &PullRequests) -> Vec<(String, String)> {
    let field = |f: &str| format!("spec.sourceRef.pullRequests.{f}");
    let mut found = Vec::new();
    if let Err(e) = pulls.repository(source_url) {
        found.push(("spec.sourceRef.url".to_string(), e));
    }
    if let Some(url) = &pulls.api_url
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        found.push((field("apiURL"), "must be an http:// or https:// URL".into()));
    }
    if pulls.token_secret_ref.name.trim().is_empty() {
        found.push((field("tokenSecretRef.name"), "must name a Secret".into()));
    }
    if pulls.token_secret_ref.key.trim().is_empty() {
        found.push((
            field("tokenSecretRef.key"),
            "must name the Secret's key".into(),
        ));
    }
    for (i, login) in pulls.trusted_authors.iter().enumerate() {
        if login.trim().is_empty() || login.contains(char::is_whitespace) {
            found.push((
                field(&format!("trustedAuthors[{i}]")),
                "must be a forge login (no spaces)".into(),
            ));
        }
    }
    for (i, login) in pulls.approvers.users.iter().enumerate() {
        if login.trim().is_empty() || login.contains(char::is_whitespace) {
            found.push((
                field(&format!("approvers.users[{i}]")),
                "must be a forge login (no spaces)".into(),
            ));
        }
    }
    for (i, team) in pulls.approvers.teams.iter().enumerate() {
        let well_formed = team
            .split_once('/')
            .is_some_and(|(o, t)| !o.is_empty() && !t.is_empty() && !t.contains('/'));
        if !well_formed || team.contains(char::is_whitespace) {
            found.push((
                field(&format!("approvers.teams[{i}]")),
                "must be <organisation>/<team>".into(),
            ));
        }
    }
    found
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pulls(api_url: Option<&str>) -> PullRequests {
        PullRequests {
            forge: ForgeKind::Gitea,
            api_url: api_url.map(str::to_string),
            token_secret_ref: TokenSecretRef {
                name: "forge".into(),
                key: "token".into(),
                namespace: None,
            },
            trusted_authors: vec![],
            approvers: Approvers::default(),
        }
    }

    #[test]
    fn a_token_elsewhere_serves_only_the_namespaces_its_secret_names() {
        let here = TokenSecretRef {
            name: "forge".into(),
            key: "token".into(),
            namespace: None,
        };
        assert_eq!(here.namespace_for("team-a"), "team-a");
        let there = TokenSecretRef {
            namespace: Some("tfops-forge".into()),
            ..here
        };
        assert_eq!(there.namespace_for("team-a"), "tfops-forge");
        assert!(token_granted(None, "team-a", "team-a"), "its own namespace");
        assert!(!token_granted(None, "tfops-forge", "team-a"));
        assert!(!token_granted(Some(""), "tfops-forge", "team-a"));
        assert!(!token_granted(
            Some("team-b,team-ab"),
            "tfops-forge",
            "team-a"
        ));
        assert!(token_granted(
            Some("team-b, team-a"),
            "tfops-forge",
            "team-a"
        ));
        assert!(token_granted(Some("*"), "tfops-forge", "team-a"));
    }

    #[test]
    fn the_api_base_comes_from_the_repository_url_unless_given() {
        let p = pulls(None);
        let r = p
            .repository("https://git.example.com/team/infra.git")
            .unwrap();
        assert_eq!(r.api_url, "https://git.example.com/api/v1");
        assert_eq!((r.owner.as_str(), r.name.as_str()), ("team", "infra"));
        let r = p
            .repository("http://user@127.0.0.1:3000/gitea/team/infra/")
            .unwrap();
        assert_eq!(r.api_url, "http://127.0.0.1:3000/gitea/api/v1");
        let given = pulls(Some("https://api.example.com/v1/"));
        let r = given
            .repository("https://git.example.com/team/infra")
            .unwrap();
        assert_eq!(r.api_url, "https://api.example.com/v1");
    }

    #[test]
    fn a_url_that_names_no_repository_is_refused_naming_the_field() {
        let p = pulls(None);
        let e = p
            .repository("ssh://git@git.example.com/team/infra")
            .unwrap_err();
        assert!(e.starts_with("spec.sourceRef.url must be an http"), "{e}");
        let e = p.repository("https://git.example.com/infra").unwrap_err();
        assert!(e.contains("names no <owner>/<repository>"), "{e}");
        let e = p
            .repository("https://bot:s3cret@git.example.com/infra")
            .unwrap_err();
        assert!(
            e.contains("https://***@git.example.com/infra") && !e.contains("s3cret"),
            "{e}"
        );
        let mut bad = pulls(Some("git.example.com"));
        bad.trusted_authors = vec!["a b".into()];
        bad.token_secret_ref.name = String::new();
        let fields: Vec<_> = problems("https://git.example.com/t/r", &bad)
            .into_iter()
            .map(|(f, _)| f)
            .collect();
        assert_eq!(
            fields,
            [
                "spec.sourceRef.pullRequests.apiURL",
                "spec.sourceRef.pullRequests.tokenSecretRef.name",
                "spec.sourceRef.pullRequests.trustedAuthors[0]"
            ]
        );
    }
}
