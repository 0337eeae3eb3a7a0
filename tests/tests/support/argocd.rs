//! A real Argo CD on the test cluster: `argocd-application-controller`, `argocd-repo-server`
//! and `argocd-server`, built from Argo CD's published module (`scripts/install-argocd`), with
//! Debian's `redis-server`, each a process on loopback as Argo CD's own local development runs
//! them (`ARGOCD_FAKE_IN_CLUSTER`: the in-cluster destination is the kubeconfig's cluster).
//! Configured as a user configures it: Argo CD's CRDs from the module, `argocd-cm` with
//! `config/argocd` (the Kustomize component) rendered over it, local accounts `admin` and
//! `viewer` (read-only by `argocd-rbac-cm`), and the Terraform tab served from
//! `/tmp/extensions` of argocd-server's own mount namespace.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::operator::Operator;

/// The password of both local accounts (test-only).
pub const PASSWORD: &str = "tfops-argocd-test";

/// The argocd binary: `$TFOPS_ARGOCD`, else the pinned build under `.tools/`.
pub fn argocd_binary() -> PathBuf {
    std::env::var_os("TFOPS_ARGOCD")
        .map(PathBuf::from)
        .unwrap_or_else(|| tests::argocd_lua::binary().parent().unwrap().join("argocd"))
}

/// Argo CD's module in Go's module cache (the CRDs and the UI come from there).
pub fn argocd_module() -> PathBuf {
    let suite = std::env::var_os("TFOPS_ARGOCD_CUSTOMIZATIONS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let out = Command::new("go")
                .args(["env", "GOMODCACHE"])
                .output()
                .unwrap();
            PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
                .join(format!(
                    "github.com/argoproj/argo-cd/v3@v{}",
                    tests::argocd_lua::ARGOCD_VERSION
                ))
                .join("resource_customizations")
        });
    suite.parent().unwrap().to_path_buf()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

/// The running Argo CD; everything it started ends when it is dropped.
pub struct ArgoCd {
    /// `127.0.0.1:<port>` of argocd-server (plain HTTP and gRPC).
    pub server: String,
    /// Where the tab's extension files are (argocd-server's `/tmp/extensions`).
    pub extensions: PathBuf,
    processes: Vec<Process>,
    dir: tempfile::TempDir,
}

impl Drop for ArgoCd {
    fn drop(&mut self) {
        for p in self.processes.iter_mut().rev() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

/// `argocd <args>` with `env`; panics when it cannot run.
fn argocd(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(argocd_binary())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", argocd_binary().display()));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn bcrypt(password: &str) -> String {
    let (ok, out, err) = argocd(&["account", "bcrypt", "--password", password], &[]);
    assert!(ok, "argocd account bcrypt: {err}");
    out.trim().to_string()
}

impl ArgoCd {
    /// Installs Argo CD's configuration into `op`'s cluster and starts its programs.
    pub async fn start(op: &Operator) -> Self {
        let dir = tempfile::tempdir().unwrap();
        install_configuration(op, dir.path());
        let extensions = dir.path().join("extensions");
        std::fs::create_dir_all(&extensions).unwrap();
        let mut argo = Self {
            server: String::new(),
            extensions,
            processes: Vec::new(),
            dir,
        };
        let redis = format!("127.0.0.1:{}", free_port());
        let redis_port = redis.rsplit(':').next().unwrap().to_string();
        argo.spawn(
            "redis",
            Command::new("redis-server").args([
                "--port",
                &redis_port,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ]),
        );
        let repo = format!("127.0.0.1:{}", free_port());
        let state = argo.dir.path().to_path_buf();
        let common = |binary: &str| {
            let mut c = Command::new(argocd_binary());
            c.env("ARGOCD_BINARY_NAME", binary)
                .env("ARGOCD_FAKE_IN_CLUSTER", "true")
                .env("KUBECONFIG", &op.kubeconfig)
                .env("HOSTNAME", format!("{binary}-0"))
                .env("ARGOCD_GPG_ENABLED", "false")
                .env("ARGOCD_TLS_DATA_PATH", state.join("tls"))
                .env("ARGOCD_SSH_DATA_PATH", state.join("ssh"))
                .env("ARGOCD_GNUPGHOME", state.join("gpg"))
                .env("HOME", &state)
                // The repo-server clones under $TMPDIR/_argocd-repo: the test's directory,
                // so nothing is left in /tmp.
                .env("TMPDIR", &state);
            c
        };
        let mut repo_server = common("argocd-repo-server");
        // The repo-server runs git-verify-wrapper.sh, which install-argocd puts beside argocd.
        let path = std::env::join_paths(
            std::iter::once(argocd_binary().parent().unwrap().to_path_buf()).chain(
                std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
            ),
        )
        .unwrap();
        repo_server.env("PATH", path).args([
            "--address",
            "127.0.0.1",
            "--port",
            repo.rsplit(':').next().unwrap(),
            "--metrics-address",
            "127.0.0.1",
            "--metrics-port",
            &free_port().to_string(),
            "--disable-tls",
            "--client-ca-path=",
            "--redis",
            &redis,
        ]);
        argo.spawn("argocd-repo-server", &mut repo_server);
        let mut controller = common("argocd-application-controller");
        controller.args([
            "--kubeconfig",
            op.kubeconfig.to_str().unwrap(),
            "--namespace",
            "argocd",
            "--redis",
            &redis,
            "--repo-server",
            &repo,
            "--repo-server-plaintext",
            "--metrics-port",
            &free_port().to_string(),
            "--status-processors",
            "2",
            "--operation-processors",
            "2",
        ]);
        argo.spawn("argocd-application-controller", &mut controller);
        let port = free_port();
        argo.server = format!("127.0.0.1:{port}");
        // /tmp/extensions is where argocd-server reads extensions from (a fixed path): a
        // mount namespace of its own gives it this test's directory there.
        let mut server = Command::new("unshare");
        server
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg("mkdir -p /tmp/extensions && mount --bind \"$0\" /tmp/extensions && exec \"$@\"")
            .arg(&argo.extensions)
            .arg(argocd_binary())
            .args([
                "--kubeconfig",
                op.kubeconfig.to_str().unwrap(),
                "--namespace",
                "argocd",
                "--insecure",
                "--address",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--metrics-address",
                "127.0.0.1",
                "--metrics-port",
                &free_port().to_string(),
                "--redis",
                &redis,
                "--repo-server",
                &repo,
                "--repo-server-plaintext",
                "--staticassets",
            ])
            .arg(state.join("static"));
        let common_env = common("argocd-server");
        for (k, v) in common_env.get_envs() {
            if let Some(v) = v {
                server.env(k, v);
            }
        }
        std::fs::create_dir_all(state.join("static")).unwrap();
        argo.spawn("argocd-server", &mut server);
        argo.wait_for("argocd-server to answer", 120, |a| {
            a.curl(&["-fsS", &format!("http://{}/healthz", a.server)])
                .is_some()
        });
        argo
    }

    fn spawn(&mut self, name: &'static str, command: &mut Command) {
        let log = self.dir.path().join(format!("{name}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        self.processes.push(Process { name, child, log });
    }

    /// The last lines of every program's log, for a failure's message.
    pub fn logs(&self) -> String {
        let mut all = String::new();
        for p in &self.processes {
            let text = std::fs::read_to_string(&p.log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = &lines[lines.len().saturating_sub(25)..];
            all.push_str(&format!("--- {} ---\n{}\n", p.name, tail.join("\n")));
        }
        all
    }

    /// Polls `test` every 200 ms for at most `seconds`; panics with the logs when it never
    /// holds, or when one of the programs ended.
    pub fn wait_for(&mut self, what: &str, seconds: u64, mut test: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        loop {
            if test(self) {
                return;
            }
            for p in &mut self.processes {
                if let Ok(Some(status)) = p.child.try_wait() {
                    panic!(
                        "{} ended ({status}) while waiting for {what}:\n{}",
                        p.name,
                        { std::fs::read_to_string(&p.log).unwrap_or_default() }
                    );
                }
            }
            assert!(
                Instant::now() < deadline,
                "waited {seconds} s for {what}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// argocd-server's `--staticassets` directory (where Argo CD's UI would be).
    pub fn static_assets(&self) -> PathBuf {
        self.dir.path().join("static")
    }

    /// `curl <args>`: its output when it succeeded.
    pub fn curl(&self, args: &[&str]) -> Option<String> {
        let out = Command::new("curl").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A session token of `user` from argocd-server's API (`POST /api/v1/session`).
    pub fn token(&self, user: &str) -> String {
        let body = json!({"username": user, "password": PASSWORD}).to_string();
        let out = self
            .curl(&[
                "-fsS",
                "-H",
                "Content-Type: application/json",
                "-d",
                &body,
                &format!("http://{}/api/v1/session", self.server),
            ])
            .unwrap_or_else(|| panic!("no session for {user}:\n{}", self.logs()));
        serde_json::from_str::<Value>(&out).unwrap()["token"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// `GET <path>` of argocd-server's API with `token`; `None` on an HTTP error.
    pub fn get(&self, token: &str, path: &str) -> Option<Value> {
        let out = self.curl(&[
            "-fsS",
            "-H",
            &format!("Authorization: Bearer {token}"),
            &format!("http://{}{path}", self.server),
        ])?;
        serde_json::from_str(&out).ok()
    }

    /// `argocd login` of `user` into a CLI configuration of its own; its path.
    pub fn login(&self, user: &str) -> PathBuf {
        let config = self.dir.path().join(format!("{user}.config"));
        let (ok, out, err) = argocd(
            &[
                "login",
                &self.server,
                "--plaintext",
                "--username",
                user,
                "--password",
                PASSWORD,
                "--config",
                config.to_str().unwrap(),
            ],
            &[],
        );
        assert!(ok, "argocd login {user}: {out}{err}");
        config
    }

    /// `argocd <args>` with the CLI configuration `config` (from [`ArgoCd::login`]).
    pub fn cli(&self, config: &Path, args: &[&str]) -> (bool, String, String) {
        let mut all = vec!["--config", config.to_str().unwrap()];
        all.extend_from_slice(args);
        argocd(&all, &[])
    }
}

/// Argo CD's CRDs, its namespace, `argocd-cm` (Argo CD's defaults, the accounts, and
/// `config/argocd` rendered over it), `argocd-rbac-cm` and `argocd-secret`.
fn install_configuration(op: &Operator, dir: &Path) {
    let crds = argocd_module().join("manifests/crds");
    for crd in [
        "application-crd.yaml",
        "appproject-crd.yaml",
        "applicationset-crd.yaml",
    ] {
        let (ok, out, err) = super::kubectl(
            &op.kubeconfig,
            &[
                "apply",
                "--server-side",
                "-f",
                crds.join(crd).to_str().unwrap(),
            ],
        );
        assert!(ok, "{crd}: {out}{err}");
    }
    // Every one applied is waited for: Argo CD's controllers watch all three.
    super::crds_established(
        &op.kubeconfig,
        &[
            "applications.argoproj.io",
            "appprojects.argoproj.io",
            "applicationsets.argoproj.io",
        ],
        60,
    );
    op.apply("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: argocd\n");
    // The overlay a user writes: Argo CD's argocd-cm (here only the accounts) and argocd-server
    // Deployment, and tfops' component; what it renders for argocd-cm is applied.
    let overlay = dir.join("overlay");
    std::fs::create_dir_all(&overlay).unwrap();
    let config = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/argocd");
    std::fs::write(
        overlay.join("argocd-cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  namespace: argocd\n  \
         labels:\n    app.kubernetes.io/part-of: argocd\ndata:\n  accounts.viewer: login\n  \
         admin.enabled: \"true\"\n",
    )
    .unwrap();
    std::fs::write(
        overlay.join("argocd-server.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: argocd-server\n  namespace: argocd\n\
         spec:\n  template:\n    spec:\n      containers:\n        - name: argocd-server\n          \
         image: quay.io/argoproj/argocd:v3.6.2\n",
    )
    .unwrap();
    let overlay_abs = overlay.canonicalize().unwrap();
    std::fs::write(
        overlay.join("kustomization.yaml"),
        format!(
            "resources:\n  - argocd-cm.yaml\n  - argocd-server.yaml\ncomponents:\n  - {}\n",
            super::kustomize_path(&overlay_abs, &config)
        ),
    )
    .unwrap();
    let out = Command::new(super::kubectl_binary())
        .args(["kustomize", overlay.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered: Vec<Value> = serde_yaml_ng::Deserializer::from_slice(&out.stdout)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    let cm = rendered.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    op.apply(&serde_yaml_ng::to_string(cm).unwrap());
    let hash = bcrypt(PASSWORD);
    let now = "2026-01-01T00:00:00Z";
    op.apply(
        &serde_yaml_ng::to_string(&json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "argocd-secret", "namespace": "argocd",
                         "labels": {"app.kubernetes.io/part-of": "argocd"}},
            "stringData": {
                "server.secretkey": "tfops-test-server-secret-key-0123456789",
                "admin.password": hash, "admin.passwordMtime": now,
                "accounts.viewer.password": hash, "accounts.viewer.passwordMtime": now,
            },
        }))
        .unwrap(),
    );
    op.apply(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-rbac-cm\n  namespace: argocd\n  \
         labels:\n    app.kubernetes.io/part-of: argocd\ndata:\n  policy.csv: |\n    \
         g, viewer, role:readonly\n",
    );
}
