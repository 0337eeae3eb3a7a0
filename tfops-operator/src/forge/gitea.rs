//! [`Forge`] on Gitea's API (v1): reqwest and the few calls tfops makes, each paged where
//! Gitea pages.

use std::collections::BTreeSet;

use async_trait::async_trait;
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use tfops_core::api::ForgeRepository;
use tfops_core::ports::PortError;
use tfops_core::pulls::{
    CommitStatus, Forge, MARKER, Merged, PullComment, PullRequest, Review, ReviewState,
};

/// Items per page asked of Gitea (its default maximum is 50; an instance may allow fewer, so
/// a short page does not mean the last).
const PAGE: usize = 50;

/// Pages read at most of one list (a server that ignored `page` would repeat itself).
const MAX_PAGES: usize = 200;

/// One repository on a Gitea, with one token.
pub struct GiteaForge {
    http: reqwest::Client,
    repository: ForgeRepository,
    token: String,
    counted: super::ForgeRequests,
    /// The token's login, once asked.
    login: tokio::sync::OnceCell<String>,
}

impl std::fmt::Debug for GiteaForge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("GiteaForge")
            .field("repository", &self.repository)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct User {
    login: String,
}

#[derive(Deserialize)]
struct Branch {
    #[serde(rename = "ref")]
    reference: String,
    sha: String,
    repo_id: i64,
}

#[derive(Deserialize)]
struct Pull {
    number: u64,
    user: User,
    head: Branch,
    base: Branch,
}

#[derive(Deserialize)]
struct GiteaReview {
    #[serde(default)]
    user: Option<User>,
    #[serde(default)]
    state: String,
    #[serde(default)]
    commit_id: String,
    #[serde(default)]
    stale: bool,
    #[serde(default)]
    dismissed: bool,
}

#[derive(Deserialize)]
struct ChangedFile {
    filename: String,
    #[serde(default)]
    previous_filename: String,
}

#[derive(Deserialize)]
struct Comment {
    id: u64,
    body: String,
    user: User,
}

impl GiteaForge {
    /// `repository` through its API with `token`.
    ///
    /// # Errors
    /// When no HTTP client can be made (no TLS provider).
    pub fn new(repository: ForgeRepository, token: impl Into<String>) -> Result<Self, PortError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| PortError::Unavailable(format!("building an HTTP client: {e}")))?;
        Ok(Self {
            http,
            repository,
            token: token.into(),
            counted: super::ForgeRequests::default(),
            login: tokio::sync::OnceCell::new(),
        })
    }

    /// Counts every request in `counted` (the manager's metrics).
    #[must_use]
    pub fn counting(mut self, counted: super::ForgeRequests) -> Self {
        self.counted = counted;
        self
    }

    fn count(&self, method: &Method, code: u16) {
        self.counted
            .get_or_create(&super::ForgeRequest {
                method: method.to_string(),
                code,
            })
            .inc();
    }

    /// `/repos/<owner>/<name>` + `rest`.
    fn repo_path(&self, rest: &str) -> String {
        format!(
            "/repos/{}/{}{rest}",
            self.repository.owner, self.repository.name
        )
    }

    /// Sends a request to `path` of the API; the JSON answer (`Null` for none).
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, PortError> {
        self.send(method, path, body).await.map(|(v, _)| v)
    }

    /// [`GiteaForge::call`], with the list's whole length when Gitea says it
    /// (`X-Total-Count`).
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<(Value, Option<usize>), PortError> {
        let what = format!("{method} {path} on {}", self.repository.api_url);
        let counted = method.clone();
        let mut auth = reqwest::header::HeaderValue::from_str(&format!("token {}", self.token))
            .map_err(|_| {
                PortError::Invalid("the forge token is not a valid header value".into())
            })?;
        // Kept out of any debug output of the request.
        auth.set_sensitive(true);
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.repository.api_url))
            .header(reqwest::header::AUTHORIZATION, auth)
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(body) = body {
            request = request.json(&body);
        }
        let sent = request.send().await;
        self.count(&counted, sent.as_ref().map_or(0, |r| r.status().as_u16()));
        let response = sent.map_err(|e| PortError::Unavailable(format!("{what}: {e}")))?;
        let status = response.status();
        let total = response
            .headers()
            .get("x-total-count")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let text = response
            .text()
            .await
            .map_err(|e| PortError::Unavailable(format!("{what}: {e}")))?;
        match status {
            s if s.is_success() => Ok((serde_json::from_str(&text).unwrap_or(Value::Null), total)),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                Err(PortError::AccessDenied(format!(
                    "{what}: {status} (is the token valid, with the scopes docs/pull-requests.md lists?)"
                )))
            }
            StatusCode::NOT_FOUND => Err(PortError::NotFound(format!("{what}: {status}"))),
            _ => Err(PortError::Unavailable(format!(
                "{what}: {status}: {}",
                text.chars().take(300).collect::<String>()
            ))),
        }
    }

    /// Every item of a paged list at `path` (which has no query of its own but `extra`).
    async fn all<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        extra: &str,
    ) -> Result<Vec<T>, PortError> {
        let mut items = Vec::new();
        for page in 1..=MAX_PAGES {
            let (answer, total) = self
                .send(
                    Method::GET,
                    &format!("{path}?{extra}page={page}&limit={PAGE}"),
                    None,
                )
                .await?;
            let batch: Vec<T> = serde_json::from_value(answer).map_err(|e| {
                PortError::Invalid(format!("Gitea's answer to GET {path} is not a list: {e}"))
            })?;
            // Gitea caps `limit` at its MAX_RESPONSE_ITEMS, so a short page is not the last:
            // read until the whole count it gives (X-Total-Count), or an empty page without.
            if batch.is_empty() {
                return Ok(items);
            }
            items.extend(batch);
            if total.is_some_and(|t| items.len() >= t) {
                return Ok(items);
            }
        }
        // A partial list must not pass for a whole one (pull requests not listed would count
        // as closed).
        Err(PortError::Unavailable(format!(
            "GET {path}: more than {MAX_PAGES} pages of {PAGE}; refusing a partial list"
        )))
    }

    /// Every comment of issue or pull request `number`. Gitea does not page an issue's
    /// comments (the endpoint takes no `page`): one request gives them all.
    async fn issue_comments(&self, number: u64) -> Result<Vec<Comment>, PortError> {
        let path = self.repo_path(&format!("/issues/{number}/comments"));
        serde_json::from_value(self.call(Method::GET, &path, None).await?).map_err(|e| {
            PortError::Invalid(format!("Gitea's answer to GET {path} is not a list: {e}"))
        })
    }

    /// The login the token acts as (asked once per client).
    async fn me(&self) -> Result<String, PortError> {
        self.login
            .get_or_try_init(|| async {
                let user: User = serde_json::from_value(
                    self.call(Method::GET, "/user", None).await?,
                )
                .map_err(|e| PortError::Invalid(format!("Gitea's answer to GET /user: {e}")))?;
                Ok(user.login)
            })
            .await
            .cloned()
    }
}

#[async_trait]
impl Forge for GiteaForge {
    async fn open_pull_requests(&self) -> Result<Vec<PullRequest>, PortError> {
        let pulls: Vec<Pull> = self.all(&self.repo_path("/pulls"), "state=open&").await?;
        let mut out = Vec::with_capacity(pulls.len());
        for pull in pulls {
            let files: Vec<ChangedFile> = self
                .all(
                    &self.repo_path(&format!("/pulls/{}/files", pull.number)),
                    "",
                )
                .await?;
            // A rename changes both paths.
            let mut changed: Vec<String> = files
                .into_iter()
                .flat_map(|f| [f.filename, f.previous_filename])
                .filter(|f| !f.is_empty())
                .collect();
            changed.sort();
            changed.dedup();
            out.push(PullRequest {
                number: pull.number,
                head_sha: pull.head.sha,
                base_ref: pull.base.reference,
                author: pull.user.login,
                from_fork: pull.head.repo_id != pull.base.repo_id,
                changed_files: changed,
            });
        }
        Ok(out)
    }

    async fn upsert_comment(&self, number: u64, body: &str) -> Result<(), PortError> {
        let me = self.me().await?;
        let comments = self.issue_comments(number).await?;
        let ours = comments
            .iter()
            .find(|c| c.user.login == me && c.body.starts_with(MARKER));
        let (method, path) = match ours {
            Some(c) => (
                Method::PATCH,
                self.repo_path(&format!("/issues/comments/{}", c.id)),
            ),
            None => (
                Method::POST,
                self.repo_path(&format!("/issues/{number}/comments")),
            ),
        };
        self.call(method, &path, Some(json!({"body": body})))
            .await
            .map(drop)
    }

    async fn set_status(
        &self,
        sha: &str,
        status: &CommitStatus,
        target_url: &str,
    ) -> Result<(), PortError> {
        let body = json!({
            "state": status.state.as_str(),
            "context": status.context,
            "description": status.description,
            "target_url": target_url,
        });
        self.call(
            Method::POST,
            &self.repo_path(&format!("/statuses/{sha}")),
            Some(body),
        )
        .await
        .map(drop)
    }

    async fn comments(&self, number: u64) -> Result<Vec<PullComment>, PortError> {
        Ok(self
            .issue_comments(number)
            .await?
            .into_iter()
            .map(|c| PullComment {
                author: c.user.login,
                body: c.body,
            })
            .collect())
    }

    async fn merged(&self, number: u64) -> Result<Option<Merged>, PortError> {
        let pull = self
            .call(
                Method::GET,
                &self.repo_path(&format!("/pulls/{number}")),
                None,
            )
            .await?;
        let merged = pull["merged"].as_bool().unwrap_or(false);
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        Ok(merged.then(|| Merged {
            merge_sha: text(&pull["merge_commit_sha"]),
            author: text(&pull["user"]["login"]),
            head_sha: text(&pull["head"]["sha"]),
        }))
    }

    async fn reviews(&self, number: u64) -> Result<Vec<Review>, PortError> {
        let listed: Vec<GiteaReview> = self
            .all(&self.repo_path(&format!("/pulls/{number}/reviews")), "")
            .await?;
        Ok(listed
            .into_iter()
            .map(|r| Review {
                reviewer: r.user.map(|u| u.login).unwrap_or_default(),
                state: match r.state.as_str() {
                    "APPROVED" => ReviewState::Approved,
                    "REQUEST_CHANGES" => ReviewState::RequestChanges,
                    _ => ReviewState::Other,
                },
                commit: r.commit_id,
                stale: r.stale,
                dismissed: r.dismissed,
            })
            .collect())
    }

    async fn team_members(
        &self,
        organisation: &str,
        team: &str,
    ) -> Result<BTreeSet<String>, PortError> {
        let path = format!("/orgs/{organisation}/teams/search");
        let found = self
            .call(Method::GET, &format!("{path}?q={team}"), None)
            .await;
        let found = match found {
            Ok(found) => found,
            Err(PortError::NotFound(_)) => return Ok(BTreeSet::new()),
            Err(e) => return Err(e),
        };
        // The search matches parts of names: only the team of exactly this name counts.
        let id = found["data"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| {
                t["name"]
                    .as_str()
                    .is_some_and(|n| n.eq_ignore_ascii_case(team))
            })
            .and_then(|t| t["id"].as_i64());
        let Some(id) = id else {
            return Ok(BTreeSet::new());
        };
        let members: Vec<User> = self.all(&format!("/teams/{id}/members"), "").await?;
        Ok(members.into_iter().map(|u| u.login).collect())
    }

    async fn can_write(&self, login: &str) -> Result<bool, PortError> {
        let path = self.repo_path(&format!("/collaborators/{login}/permission"));
        match self.call(Method::GET, &path, None).await {
            Ok(answer) => Ok(matches!(
                answer["permission"].as_str(),
                Some("write" | "admin" | "owner")
            )),
            // Not a collaborator (or no such user).
            Err(PortError::NotFound(_)) => Ok(false),
            // Gitea answers who may write only to the repository's admins.
            Err(PortError::AccessDenied(_)) => Err(PortError::AccessDenied(format!(
                "{}: Gitea tells who may write to {}/{} only to its admins: give the token's user \
                 admin permission on the repository, or list trustedAuthors",
                path, self.repository.owner, self.repository.name
            ))),
            Err(e) => Err(e),
        }
    }
}
