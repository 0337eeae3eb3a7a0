//! A real Gitea on loopback, for the pull-request tests and by hand (`scripts/forge up`):
//! built from its published Go module by `scripts/install-gitea` ([`GITEA_VERSION`]), run with
//! SQLite in a temporary directory on a free port, with two users and their tokens made by its
//! own command line (an admin who owns the repositories, and a reviewer: an author cannot
//! approve their own pull request). Repositories are made through its API and filled with
//! `git push`. The process (and its directory) go when the value is dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::process::Process;

/// The Gitea release `scripts/install-gitea` builds.
pub const GITEA_VERSION: &str = "1.27.3";

/// Why Gitea could not be started or used.
#[derive(Debug, thiserror::Error)]
pub enum GiteaError {
    /// No binary: `scripts/install-gitea` builds it.
    #[error(
        "no gitea at {0}: run scripts/install-gitea (it builds Gitea {GITEA_VERSION}) and set TFOPS_GITEA to the path it prints"
    )]
    Missing(PathBuf),
    /// A file of its directory could not be written, or a program not run.
    #[error("preparing Gitea: {0}")]
    Io(#[from] std::io::Error),
    /// One of its commands failed.
    #[error("{what} failed ({status}): {output}")]
    Command {
        /// The command.
        what: String,
        /// How it exited.
        status: String,
        /// What it printed.
        output: String,
    },
    /// The server did not answer in time.
    #[error("gitea web was not ready after {secs} s; the end of its log:\n{log}")]
    NotReady {
        /// How long it was given.
        secs: u64,
        /// The end of its log.
        log: String,
    },
    /// An API request failed.
    #[error("{what}: {message}")]
    Api {
        /// The request.
        what: String,
        /// The status and body, or the transport error.
        message: String,
    },
}

/// A user of the test forge.
#[derive(Debug, Clone)]
pub struct User {
    /// The login.
    pub login: String,
    /// The password.
    pub password: String,
    /// An access token with every scope.
    pub token: String,
}

/// A running Gitea.
#[derive(Debug)]
pub struct Gitea {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// The owner of the test repositories, a site admin.
    pub admin: User,
    /// A second user (a reviewer; not a collaborator until made one).
    pub reviewer: User,
    binary: PathBuf,
    dir: tempfile::TempDir,
    http: reqwest::Client,
    process: Process,
}

fn run(what: &str, command: &mut Command) -> Result<String, GiteaError> {
    let out = command.output()?;
    if !out.status.success() {
        return Err(GiteaError::Command {
            what: what.to_string(),
            status: out.status.to_string(),
            output: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Gitea {
    /// Starts Gitea from `TFOPS_GITEA` (else `.tools/gitea/v<version>/gitea` of this checkout)
    /// and waits until its API answers.
    ///
    /// # Errors
    /// [`GiteaError::Missing`] without a binary; the others when it does not start.
    pub async fn start() -> Result<Self, GiteaError> {
        let binary = std::env::var_os("TFOPS_GITEA").map_or_else(
            || {
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../.tools/gitea")
                    .join(format!("v{GITEA_VERSION}/gitea"))
            },
            PathBuf::from,
        );
        if !binary.is_file() {
            return Err(GiteaError::Missing(binary));
        }
        let dir = tempfile::tempdir()?;
        let port = crate::control_plane::free_port()?;
        let url = format!("http://127.0.0.1:{port}");
        write_config(dir.path(), &binary, port)?;
        let gitea = |args: &[&str]| {
            let mut c = Command::new(&binary);
            c.arg("--config")
                .arg(dir.path().join("app.ini"))
                .arg("--work-path")
                .arg(dir.path())
                .args(args);
            c
        };
        run("gitea migrate", &mut gitea(&["migrate"]))?;
        let user = |login: &str, admin: bool| -> Result<User, GiteaError> {
            let password = format!("{login}-Passw0rd!");
            let email = format!("{login}@example.com");
            let mut args = vec![
                "admin",
                "user",
                "create",
                "--username",
                login,
                "--password",
                &password,
                "--email",
                &email,
                "--must-change-password=false",
            ];
            if admin {
                args.push("--admin");
            }
            run("gitea admin user create", &mut gitea(&args))?;
            let token = run(
                "gitea admin user generate-access-token",
                &mut gitea(&[
                    "admin",
                    "user",
                    "generate-access-token",
                    "--username",
                    login,
                    "--token-name",
                    "tests",
                    "--scopes",
                    "all",
                    "--raw",
                ]),
            )?;
            Ok(User {
                login: login.to_string(),
                password,
                token: token.trim().to_string(),
            })
        };
        let admin = user("tfops-admin", true)?;
        let reviewer = user("reviewer", false)?;
        let log = dir.path().join("gitea.log");
        let args: Vec<String> = [
            "--config",
            &dir.path().join("app.ini").display().to_string(),
            "--work-path",
            &dir.path().display().to_string(),
            "web",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let process = Process::start("gitea", &binary, &args, &log)?;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| GiteaError::Api {
                what: "building an HTTP client".into(),
                message: e.to_string(),
            })?;
        let mut gitea = Self {
            url,
            admin,
            reviewer,
            binary,
            dir,
            http,
            process,
        };
        gitea.wait_ready(Duration::from_secs(60)).await?;
        Ok(gitea)
    }

    async fn wait_ready(&mut self, limit: Duration) -> Result<(), GiteaError> {
        let start = Instant::now();
        let version = format!("{}/api/v1/version", self.url);
        loop {
            if let Ok(r) = self.http.get(&version).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if start.elapsed() > limit || self.process.exited().is_some() {
                return Err(GiteaError::NotReady {
                    secs: limit.as_secs(),
                    log: self.process.log_tail(30),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The API base (`http://127.0.0.1:<port>/api/v1`).
    pub fn api(&self) -> String {
        format!("{}/api/v1", self.url)
    }

    /// The process id of `gitea web` (or of `setpriv`, which became it).
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    /// The binary that runs.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The end of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// Sends `body` (if any) to `path` of the API as `user`; the answer's text.
    async fn send(
        &self,
        user: &User,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<String, GiteaError> {
        let what = format!("{method} {path} as {}", user.login);
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.api()))
            .header("Authorization", format!("token {}", user.token));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let fail = |message: String| GiteaError::Api {
            what: what.clone(),
            message,
        };
        let response = request.send().await.map_err(|e| fail(e.to_string()))?;
        let status = response.status();
        let text = response.text().await.map_err(|e| fail(e.to_string()))?;
        if !status.is_success() {
            return Err(fail(format!("{status}: {text}")));
        }
        Ok(text)
    }

    /// Sends `body` (if any) to `path` of the API as `user`; the JSON answer.
    ///
    /// # Errors
    /// [`GiteaError::Api`] for a transport error or a status other than 2xx.
    pub async fn call(
        &self,
        user: &User,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, GiteaError> {
        let text = self.send(user, method, path, body).await?;
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// `text` as Gitea renders a comment (its `/markdown` API, GitHub-flavoured): HTML.
    ///
    /// # Errors
    /// The API's.
    pub async fn render_markdown(&self, text: &str) -> Result<String, GiteaError> {
        let body = json!({"Text": text, "Mode": "gfm"});
        self.send(&self.admin, reqwest::Method::POST, "/markdown", Some(body))
            .await
    }

    /// Makes the admin's empty repository `name` (default branch `main`).
    ///
    /// # Errors
    /// The API's.
    pub async fn create_repo(&self, name: &str) -> Result<(), GiteaError> {
        let body = json!({"name": name, "default_branch": "main", "private": false});
        self.call(
            &self.admin,
            reqwest::Method::POST,
            "/user/repos",
            Some(body),
        )
        .await
        .map(drop)
    }

    /// Gives `user` `permission` (`read`, `write`, `admin`) on the admin's repository `repo`.
    ///
    /// # Errors
    /// The API's.
    pub async fn add_collaborator(
        &self,
        repo: &str,
        user: &User,
        permission: &str,
    ) -> Result<(), GiteaError> {
        let path = format!(
            "/repos/{}/{repo}/collaborators/{}",
            self.admin.login, user.login
        );
        let body = json!({"permission": permission});
        self.call(&self.admin, reqwest::Method::PUT, &path, Some(body))
            .await
            .map(drop)
    }

    /// The clone URL of the admin's repository `repo` (`http://127.0.0.1:<port>/<owner>/<repo>.git`).
    pub fn clone_url(&self, repo: &str) -> String {
        format!("{}/{}/{repo}.git", self.url, self.admin.login)
    }

    /// Commits `files` (path, content) as `user` on `branch` of the admin's repository `repo`
    /// (the branch starts from `main`, or is made when the repository is empty), pushes it
    /// with `git`, and waits until Gitea has taken the push in; gives the new commit's sha.
    ///
    /// Gitea handles a push after `git push` returns (its post-receive hook queues the
    /// update): until then its API still sees the repository as before, and for a repository
    /// that was empty, v1.27.3 answers a branch request with a nil-pointer panic (500).
    ///
    /// # Errors
    /// When a git command fails, or Gitea does not show the push within 30 s.
    pub async fn push(
        &self,
        user: &User,
        repo: &str,
        branch: &str,
        files: &[(&str, &str)],
        message: &str,
    ) -> Result<String, GiteaError> {
        let owner = self.admin.login.clone();
        self.push_to(user, &owner, repo, branch, files, message)
            .await
    }

    /// [`Gitea::push`] to `owner`'s repository `repo` (a fork: `user`'s own).
    ///
    /// # Errors
    /// As [`Gitea::push`].
    pub async fn push_to(
        &self,
        user: &User,
        owner: &str,
        repo: &str,
        branch: &str,
        files: &[(&str, &str)],
        message: &str,
    ) -> Result<String, GiteaError> {
        let sha = self.commit_and_push(user, owner, repo, branch, files, message)?;
        let start = Instant::now();
        let path = format!("/repos/{owner}/{repo}");
        loop {
            let taken = match self
                .call(&self.admin, reqwest::Method::GET, &path, None)
                .await
            {
                Ok(r) if r["empty"] == false => self
                    .call(
                        &self.admin,
                        reqwest::Method::GET,
                        &format!("{path}/branches/{branch}"),
                        None,
                    )
                    .await
                    .is_ok_and(|b| b["commit"]["id"] == sha.as_str()),
                _ => false,
            };
            if taken {
                return Ok(sha);
            }
            if start.elapsed() > Duration::from_secs(30) {
                return Err(GiteaError::Api {
                    what: format!("waiting for the push of {sha} to {repo}/{branch}"),
                    message: format!(
                        "not shown after 30 s; the end of its log:\n{}",
                        self.log_tail(20)
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn commit_and_push(
        &self,
        user: &User,
        owner: &str,
        repo: &str,
        branch: &str,
        files: &[(&str, &str)],
        message: &str,
    ) -> Result<String, GiteaError> {
        let work = self
            .dir
            .path()
            .join("work")
            .join(&user.login)
            .join(owner)
            .join(repo);
        let remote = format!(
            "http://{}:{}@{}/{owner}/{repo}.git",
            user.login,
            user.token,
            self.url.trim_start_matches("http://"),
        );
        let git = |args: &[&str]| {
            let mut c = Command::new("git");
            c.arg("-C")
                .arg(&work)
                .args(["-c", &format!("user.name={}", user.login)])
                .args(["-c", &format!("user.email={}@example.com", user.login)])
                .args(args)
                .env("GIT_TERMINAL_PROMPT", "0");
            c
        };
        if !work.join(".git").exists() {
            std::fs::create_dir_all(&work)?;
            run("git init", &mut git(&["init", "-q", "-b", "main"]))?;
            run(
                "git remote add",
                &mut git(&["remote", "add", "origin", &remote]),
            )?;
        }
        let fetched = run("git fetch", &mut git(&["fetch", "-q", "origin"])).is_ok();
        let start = if fetched
            && run(
                "git rev-parse",
                &mut git(&["rev-parse", "-q", "--verify", &format!("origin/{branch}")]),
            )
            .is_ok()
        {
            format!("origin/{branch}")
        } else if fetched
            && run(
                "git rev-parse",
                &mut git(&["rev-parse", "-q", "--verify", "origin/main"]),
            )
            .is_ok()
        {
            "origin/main".to_string()
        } else {
            String::new()
        };
        if start.is_empty() {
            run("git checkout", &mut git(&["checkout", "-q", "-B", branch]))?;
        } else {
            run(
                "git checkout",
                &mut git(&["checkout", "-q", "-f", "-B", branch, &start]),
            )?;
        }
        for (path, content) in files {
            let file = work.join(path);
            if let Some(parent) = file.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(file, content)?;
        }
        run("git add", &mut git(&["add", "-A"]))?;
        run(
            "git commit",
            &mut git(&["commit", "-q", "--allow-empty", "-m", message]),
        )?;
        run(
            "git push",
            &mut git(&["push", "-q", "origin", &format!("HEAD:refs/heads/{branch}")]),
        )?;
        Ok(run("git rev-parse", &mut git(&["rev-parse", "HEAD"]))?
            .trim()
            .to_string())
    }
}

/// Writes `app.ini`: SQLite in `dir`, HTTP on 127.0.0.1:`port` only, no SSH, no mail, no
/// registration, webhooks allowed to loopback (the manager under test listens there), and the
/// templates, options and locales read from beside the binary (`scripts/install-gitea`).
fn write_config(dir: &Path, binary: &Path, port: u16) -> Result<(), GiteaError> {
    let static_root = binary.parent().unwrap_or(Path::new("."));
    // A fresh key per forge (the standard library's hasher keys are random per process).
    let secret: String = (0..4)
        .map(|_| {
            use std::hash::{BuildHasher, Hasher};
            format!(
                "{:016x}",
                std::collections::hash_map::RandomState::new()
                    .build_hasher()
                    .finish()
            )
        })
        .collect();
    let ini = format!(
        "WORK_PATH = {work}
RUN_MODE = prod
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true

[server]
HTTP_ADDR = 127.0.0.1
HTTP_PORT = {port}
ROOT_URL = http://127.0.0.1:{port}/
DISABLE_SSH = true
START_SSH_SERVER = false
LFS_START_SERVER = false
STATIC_ROOT_PATH = {static_root}

[database]
DB_TYPE = sqlite3
PATH = {work}/gitea.db

[security]
INSTALL_LOCK = true
SECRET_KEY = {secret}
ALLOWED_HOST_LIST = loopback

[service]
DISABLE_REGISTRATION = true

[mailer]
ENABLED = false

[cron.update_checker]
ENABLED = false

[queue.webhook_sender]
TYPE = immediate

[log]
LEVEL = Warn
",
        work = dir.display(),
        static_root = static_root.display(),
    );
    std::fs::write(dir.join("app.ini"), ini)?;
    Ok(())
}
