//! Starting and stopping etcd, kube-apiserver and kube-controller-manager.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};

use crate::kubeconfig::{self, Credentials};
use crate::node::{NodeAgent, NodeConfig};
use crate::pki::{self, Ca, CertKey};
use crate::process::Process;
use crate::{ETCD_VERSION, KUBERNETES_VERSION, audit};

/// The Service IP range; its first address is `kubernetes.default`'s.
const SERVICE_CIDR: &str = "10.0.0.0/24";
const SERVICE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
/// How long a component may take to become ready (2 cores, everything else running too).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// Why the cluster could not start (or a request of the harness failed).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A binary is missing: `scripts/install-kubernetes` builds them.
    #[error(
        "{0} not found: run scripts/install-kubernetes (it builds the control plane) or set TFOPS_CONTROL_PLANE to the directory holding etcd, kube-apiserver and kube-controller-manager"
    )]
    Missing(PathBuf),
    /// A file or directory of the cluster could not be written.
    #[error("preparing the cluster's directory: {0}")]
    Io(#[from] std::io::Error),
    /// Certificates could not be made.
    #[error(transparent)]
    Pki(#[from] pki::PkiError),
    /// A component exited while starting.
    #[error("{name} exited while starting ({status}); the end of its log:\n{log}")]
    Exited {
        /// The component.
        name: String,
        /// How it exited.
        status: String,
        /// The end of its log.
        log: String,
    },
    /// A component did not become ready in time.
    #[error("{name} was not ready after {secs} s; the end of its log:\n{log}")]
    NotReady {
        /// The component.
        name: String,
        /// How long it was given.
        secs: u64,
        /// The end of its log.
        log: String,
    },
    /// A kubeconfig or client could not be made, or a request failed.
    #[error("talking to the API server: {0}")]
    Kube(#[from] kube::Error),
    /// A kubeconfig could not be read back.
    #[error("reading the kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// The TokenRequest API answered without a token.
    #[error("the TokenRequest for {0} returned no token")]
    NoToken(String),
    /// The node agent could not start.
    #[error("starting the node agent: {0}")]
    Node(#[from] crate::node::NodeError),
}

/// Where the control plane's binaries are.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// The directory holding `etcd`, `kube-apiserver`, `kube-controller-manager` (and
    /// `kubectl`).
    pub dir: PathBuf,
}

impl Binaries {
    /// `$TFOPS_CONTROL_PLANE`, else where `scripts/install-kubernetes` builds them in this
    /// checkout (`.tools/control-plane/k8s-<version>-etcd-<version>`).
    pub fn locate() -> Self {
        let dir = std::env::var_os("TFOPS_CONTROL_PLANE")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                let tools = std::env::var_os("TFOPS_TOOLS")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools"));
                tools.join(format!(
                    "control-plane/k8s-{KUBERNETES_VERSION}-etcd-{ETCD_VERSION}"
                ))
            });
        Self { dir }
    }

    /// The path of the binary `name`, when it is there.
    ///
    /// # Errors
    /// [`Error::Missing`].
    pub fn get(&self, name: &str) -> Result<PathBuf, Error> {
        let path = self.dir.join(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(Error::Missing(path))
        }
    }
}

/// What to start besides the control plane.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// A node agent that runs Pods as local processes.
    pub node: Option<NodeConfig>,
    /// Where the binaries are (default: [`Binaries::locate`]).
    pub binaries: Option<Binaries>,
}

/// A running control plane; everything stops and its directory goes when it is dropped.
pub struct TestCluster {
    /// The API server's URL (`https://127.0.0.1:PORT`).
    pub server: String,
    /// The port the API server listens on (127.0.0.1).
    pub port: u16,
    /// The CA every certificate of the cluster chains to, PEM.
    pub ca_pem: String,
    /// Where real containers reach the API server (the container network's gateway), when
    /// the node agent runs them.
    pub pod_gateway: Option<Ipv4Addr>,
    ca: Ca,
    admin: CertKey,
    etcd_url: String,
    node: Option<NodeAgent>,
    // Dropped in this order: the node agent's Pods first, then the controller manager, the
    // API server, etcd, and last the directory.
    processes: Vec<Process>,
    dir: tempfile::TempDir,
}

impl std::fmt::Debug for TestCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCluster")
            .field("server", &self.server)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        if let Some(node) = self.node.take() {
            node.stop();
        }
        while let Some(mut p) = self.processes.pop() {
            p.kill();
        }
    }
}

/// A port on 127.0.0.1 that was free a moment ago (the kernel hands out ephemeral ports in
/// turn, so another bind in between is unlikely; a clash ends the start with the server's log).
pub(crate) fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?
        .local_addr()?
        .port())
}

/// How many times a server starts again on other ports after a clash.
const PORT_ATTEMPTS: u32 = 4;

/// Whether `e` is a server that could not bind its port: another socket took it after
/// [`free_port`] found it free.
fn port_clash(e: &Error) -> bool {
    matches!(e, Error::Exited { log, .. } if log.contains("address already in use"))
}

/// Starts etcd on free ports (again on others after a clash) and waits until it is healthy;
/// gives its client URL.
async fn start_etcd(
    etcd: &Path,
    path: &Path,
    processes: &mut Vec<Process>,
) -> Result<String, Error> {
    let mut attempt = 0;
    loop {
        let (client_port, peer_port) = (free_port()?, free_port()?);
        let etcd_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let data = path.join(format!("etcd-{attempt}"));
        std::fs::create_dir_all(&data)?;
        processes.push(Process::start(
            "etcd",
            etcd,
            &[
                arg("name", "default"),
                arg("data-dir", data.display()),
                arg("listen-client-urls", &etcd_url),
                arg("advertise-client-urls", &etcd_url),
                arg("listen-peer-urls", &peer_url),
                arg("initial-advertise-peer-urls", &peer_url),
                arg("initial-cluster", format!("default={peer_url}")),
                arg("listen-metrics-urls", "http://127.0.0.1:0"),
                // Tests never need their data after a crash; fsync is most of a write's cost.
                "--unsafe-no-fsync".to_string(),
                arg("log-level", "warn"),
            ],
            &path.join("etcd.log"),
        )?);
        let healthy = wait_until(processes, || async {
            http_get(client_port, "/health")
                .await
                .is_some_and(|b| b.contains("\"health\":\"true\""))
        })
        .await;
        match healthy {
            Ok(()) => return Ok(etcd_url),
            Err(e) if port_clash(&e) && attempt < PORT_ATTEMPTS => {
                attempt += 1;
                processes.pop();
            }
            Err(e) => return Err(e),
        }
    }
}

fn write(dir: &Path, name: &str, text: &str) -> std::io::Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    Ok(path)
}

fn arg(name: &str, value: impl std::fmt::Display) -> String {
    format!("--{name}={value}")
}

impl TestCluster {
    /// Starts the control plane (no node agent).
    ///
    /// # Errors
    /// [`Error`].
    pub async fn start() -> Result<Self, Error> {
        Self::start_with(Options::default()).await
    }

    /// Starts the control plane, and the node agent when `options` asks for one.
    ///
    /// # Errors
    /// [`Error`]; a component that exits or is not ready in time is reported with the end of
    /// its log.
    pub async fn start_with(options: Options) -> Result<Self, Error> {
        let binaries = options.binaries.clone().unwrap_or_else(Binaries::locate);
        let (etcd, apiserver, kcm) = (
            binaries.get("etcd")?,
            binaries.get("kube-apiserver")?,
            binaries.get("kube-controller-manager")?,
        );
        let dir = tempfile::Builder::new()
            .prefix("tfops-cluster-")
            .tempdir()?;
        let path = dir.path();
        let ca = Ca::new()?;
        // With real containers the API server also listens where they reach the host: the
        // container network's gateway (a container's 127.0.0.1 is its own).
        let pod_gateway = options
            .node
            .as_ref()
            .filter(|n| n.containers)
            .and_then(|_| crate::node::container_gateway());
        let serving = ca.serving(
            &[SERVICE_IP]
                .into_iter()
                .chain(pod_gateway)
                .collect::<Vec<_>>(),
        )?;
        let admin = ca.client("tfops-admin", Some("system:masters"))?;
        let kcm_cert = ca.client("system:kube-controller-manager", Some("system:masters"))?;
        let ca_file = write(path, "ca.crt", &ca.cert_pem)?;
        let cert_file = write(path, "apiserver.crt", &serving.cert_pem)?;
        let key_file = write(path, "apiserver.key", &serving.key_pem)?;
        let (signing_key, verifying_key) = pki::signing_key()?;
        let sa_key = write(path, "sa.key", &signing_key)?;
        let sa_pub = write(path, "sa.pub", &verifying_key)?;
        let policy = write(path, "audit-policy.yaml", audit::POLICY)?;

        let mut processes = Vec::new();
        let etcd_url = start_etcd(&etcd, path, &mut processes).await?;

        // Another socket may take a port between `free_port` and the server's bind (an
        // outgoing connection's ephemeral port): then the server starts again on others.
        let mut attempt = 0;
        let (port, server) = loop {
            let port = free_port()?;
            let server = format!("https://127.0.0.1:{port}");
            processes.push(Process::start(
                "kube-apiserver",
                &apiserver,
                &[
                    arg("etcd-servers", &etcd_url),
                    arg(
                        "bind-address",
                        if pod_gateway.is_some() {
                            "0.0.0.0"
                        } else {
                            "127.0.0.1"
                        },
                    ),
                    arg("advertise-address", "127.0.0.1"),
                    arg("secure-port", port),
                    arg("cert-dir", path.display()),
                    arg("tls-cert-file", cert_file.display()),
                    arg("tls-private-key-file", key_file.display()),
                    arg("client-ca-file", ca_file.display()),
                    arg(
                        "service-account-issuer",
                        "https://kubernetes.default.svc.cluster.local",
                    ),
                    arg("service-account-key-file", sa_pub.display()),
                    arg("service-account-signing-key-file", sa_key.display()),
                    arg("service-cluster-ip-range", SERVICE_CIDR),
                    arg("authorization-mode", "RBAC"),
                    arg("allow-privileged", "true"),
                    arg("endpoint-reconciler-type", "none"),
                    arg("kubelet-preferred-address-types", "InternalIP"),
                    arg("audit-policy-file", policy.display()),
                    arg("audit-log-path", path.join("audit.log").display()),
                    arg("audit-log-mode", "blocking"),
                    arg("profiling", "false"),
                    arg("v", 1),
                ],
                &path.join("kube-apiserver.log"),
            )?);
            let admin_client = client_from(&kubeconfig::text(
                &server,
                &ca.cert_pem,
                &Credentials::Certificate(&admin),
            ))
            .await?;
            let ready = wait_until(&mut processes, || {
                let client = admin_client.clone();
                async move {
                    let req = http::Request::get("/readyz").body(Vec::new());
                    match req {
                        Ok(req) => client.request_text(req).await.is_ok_and(|t| t == "ok"),
                        Err(_) => false,
                    }
                }
            })
            .await;
            match ready {
                Ok(()) => break (port, server),
                Err(e) if port_clash(&e) && attempt < PORT_ATTEMPTS => {
                    attempt += 1;
                    processes.pop();
                }
                Err(e) => return Err(e),
            }
        };

        let kcm_kubeconfig = write(
            path,
            "kube-controller-manager.kubeconfig",
            &kubeconfig::text(&server, &ca.cert_pem, &Credentials::Certificate(&kcm_cert)),
        )?;
        processes.push(Process::start(
            "kube-controller-manager",
            &kcm,
            &[
                arg("kubeconfig", kcm_kubeconfig.display()),
                arg("leader-elect", "false"),
                arg("bind-address", "127.0.0.1"),
                arg("secure-port", 0),
                arg("service-account-private-key-file", sa_key.display()),
                arg("root-ca-file", ca_file.display()),
                arg("cluster-cidr", "10.244.0.0/16"),
                arg("service-cluster-ip-range", SERVICE_CIDR),
                arg("v", 1),
            ],
            &path.join("kube-controller-manager.log"),
        )?);

        let mut cluster = Self {
            server,
            port,
            ca_pem: ca.cert_pem.clone(),
            pod_gateway,
            ca,
            admin,
            etcd_url,
            node: None,
            processes,
            dir,
        };
        if let Some(config) = options.node {
            let client = cluster.client().await?;
            cluster.node = Some(NodeAgent::start(client, &cluster, config).await?);
        }
        Ok(cluster)
    }

    /// The cluster's directory (certificates, logs, etcd's data, the audit log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// etcd's client URL.
    pub fn etcd_url(&self) -> &str {
        &self.etcd_url
    }

    /// A kubeconfig for the admin (`system:masters`).
    pub fn kubeconfig(&self) -> String {
        kubeconfig::text(
            &self.server,
            &self.ca_pem,
            &Credentials::Certificate(&self.admin),
        )
    }

    /// A kubeconfig authenticating with the bearer `token`.
    pub fn kubeconfig_for(&self, token: &str) -> String {
        kubeconfig::text(&self.server, &self.ca_pem, &Credentials::Token(token))
    }

    /// A kubeconfig for the user `user`, in `group` when given (a client certificate; RBAC
    /// decides what it may do).
    ///
    /// # Errors
    /// [`Error::Pki`].
    pub fn kubeconfig_for_user(&self, user: &str, group: Option<&str>) -> Result<String, Error> {
        let cert = self.ca.client(user, group)?;
        Ok(kubeconfig::text(
            &self.server,
            &self.ca_pem,
            &Credentials::Certificate(&cert),
        ))
    }

    /// An admin client.
    ///
    /// # Errors
    /// [`Error::Kube`].
    pub async fn client(&self) -> Result<kube::Client, Error> {
        client_from(&self.kubeconfig()).await
    }

    /// A client with the bearer `token`.
    ///
    /// # Errors
    /// [`Error::Kube`].
    pub async fn client_for(&self, token: &str) -> Result<kube::Client, Error> {
        client_from(&self.kubeconfig_for(token)).await
    }

    /// A token for the ServiceAccount `namespace/name` from the TokenRequest API (valid for a
    /// day; it stops working when the ServiceAccount is deleted).
    ///
    /// # Errors
    /// [`Error::Kube`] (404 when the ServiceAccount does not exist).
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<String, Error> {
        let client = self.client().await?;
        let request = TokenRequest {
            spec: k8s_openapi::api::authentication::v1::TokenRequestSpec {
                audiences: Vec::new(),
                bound_object_ref: None,
                expiration_seconds: Some(86_400),
            },
            ..Default::default()
        };
        token_request(&client, namespace, name, &request).await
    }

    /// Every request the API server has served so far, from its audit log, oldest first.
    pub fn audit(&self) -> Vec<audit::Request> {
        audit::read(&self.dir.path().join("audit.log"))
    }

    /// The node agent, when the cluster was started with one.
    pub fn node(&self) -> Option<&NodeAgent> {
        self.node.as_ref()
    }

    /// The log of component `name` (`etcd`, `kube-apiserver`, `kube-controller-manager`).
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    /// Kills component `name` (`etcd`, `kube-apiserver`, `kube-controller-manager`) at once,
    /// as a crash would; it stays down until [`TestCluster::start_again`]. etcd keeps its data
    /// directory.
    pub fn kill(&mut self, name: &str) {
        if let Some(p) = self.processes.iter_mut().find(|p| p.name() == name) {
            p.kill();
        }
    }

    /// Starts component `name` again with what it was started with (etcd on its data, the
    /// API server on its port), and waits until it serves: etcd's `/health`, the API server's
    /// `/readyz` (at most 60 s).
    ///
    /// # Errors
    /// [`Error`]: it cannot start, or does not serve in time (with the end of its log).
    pub async fn start_again(&mut self, name: &str) -> Result<(), Error> {
        let Some(i) = self.processes.iter().position(|p| p.name() == name) else {
            return Err(Error::Io(std::io::Error::other(format!(
                "no component {name}"
            ))));
        };
        let etcd_port: u16 = self
            .etcd_url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_default();
        let client = self.client().await?;
        self.processes[i].start_again()?;
        let process = std::slice::from_mut(&mut self.processes[i]);
        match name {
            "etcd" => {
                wait_until(process, || async move {
                    http_get(etcd_port, "/health")
                        .await
                        .is_some_and(|b| b.contains("\"health\":\"true\""))
                })
                .await
            }
            "kube-apiserver" => {
                wait_until(process, || {
                    let client = client.clone();
                    async move {
                        let req = http::Request::get("/readyz").body(Vec::new());
                        match req {
                            Ok(req) => client.request_text(req).await.is_ok_and(|t| t == "ok"),
                            Err(_) => false,
                        }
                    }
                })
                .await
            }
            _ => Ok(()),
        }
    }

    /// Pauses component `name` (`SIGSTOP` to its process group): it holds its connections and
    /// answers nothing until [`TestCluster::resume`].
    pub fn pause(&self, name: &str) {
        if let Some(p) = self.processes.iter().find(|p| p.name() == name) {
            p.signal(nix::sys::signal::Signal::SIGSTOP);
        }
    }

    /// Resumes a paused component (`SIGCONT`).
    pub fn resume(&self, name: &str) {
        if let Some(p) = self.processes.iter().find(|p| p.name() == name) {
            p.signal(nix::sys::signal::Signal::SIGCONT);
        }
    }

    /// The process ids of the control plane's components (for a test that checks they are
    /// gone after the drop).
    pub fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(Process::pid).collect()
    }
}

/// Sends `request` to the TokenRequest API of the ServiceAccount `namespace/name`; gives the
/// token.
pub(crate) async fn token_request(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    request: &TokenRequest,
) -> Result<String, Error> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let answer: TokenRequest = api
        .create_subresource("token", name, &PostParams::default(), request)
        .await?;
    answer
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| Error::NoToken(format!("{namespace}/{name}")))
}

/// A client from kubeconfig text.
pub(crate) async fn client_from(text: &str) -> Result<kube::Client, Error> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(text)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// Polls `ready` until it holds, failing when the newest process exits or the time runs out.
async fn wait_until<F, Fut>(processes: &mut [Process], ready: F) -> Result<(), Error>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    let Some(process) = processes.last_mut() else {
        return Ok(());
    };
    loop {
        if ready().await {
            return Ok(());
        }
        if let Some(status) = process.exited() {
            return Err(Error::Exited {
                name: process.name().to_string(),
                status: status.to_string(),
                log: process.log_tail(30),
            });
        }
        if start.elapsed() > READY_TIMEOUT {
            return Err(Error::NotReady {
                name: process.name().to_string(),
                secs: READY_TIMEOUT.as_secs(),
                log: process.log_tail(30),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The body of `GET path` on 127.0.0.1:`port` over plain HTTP/1.1 (etcd's health endpoint).
async fn http_get(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.ok()?;
    let text = String::from_utf8_lossy(&answer);
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}
