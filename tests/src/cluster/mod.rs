//! A Kubernetes API server on loopback, for tests (issue 12; **in progress**).
//!
//! A test double whose value is fidelity: it is judged by real clients we did not write
//! (kube-rs, Terraform's kubernetes backend, kubectl). Its layout follows the real server's:
//! `serve` does HTTPS, bearer-token authentication, watches and the audit log; [`handlers`]
//! decode paths and bodies (JSON, [`protobuf`]) and encode `Status` errors ([`errors`]);
//! [`resources`] says what is served (built-in kinds and the CRDs in the store); [`registry`]
//! holds what create/get/list/update/patch/delete do to an object (metadata, status
//! subresource, finalizers, deletion); [`managed`] keeps `managedFields` and does server-side
//! apply; [`strategic`] strategic merge patches; [`schema`] CRD pruning, defaults and
//! validation; [`garbage`] the garbage collector, namespace, ServiceAccount and quota
//! controllers; [`auth`] tokens and RBAC; [`quota`] quota admission; [`kubelet`] the kubelet
//! stand-in; [`store`] keeps every object under one `resourceVersion` sequence with a change
//! log. The README's "The loopback cluster" lists what is served and what is not.

pub mod auth;
mod container;
pub mod deletion;
pub mod errors;
pub mod garbage;
pub mod handlers;
pub mod kubelet;
pub mod lists;
pub mod managed;
pub mod protobuf;
pub mod quota;
pub mod registry;
pub mod resources;
pub mod schema;
pub mod selectors;
mod serve;
pub use serve::Audit;
pub mod store;
pub mod strategic;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// Why the cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The CA or the server certificate could not be made.
    #[error("making the server's certificates")]
    Certificates(#[from] rcgen::Error),
    /// TLS could not be configured.
    #[error("configuring TLS")]
    Tls(#[from] rustls::Error),
    /// The listener could not be bound.
    #[error("binding 127.0.0.1")]
    Bind(#[from] std::io::Error),
}

/// What to start besides the API server.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The kubelet stand-in, which runs Pods as local processes.
    pub kubelet: Option<kubelet::KubeletConfig>,
}

/// A running loopback API server; stopped when dropped.
pub struct LoopbackCluster {
    /// Where it listens (`https://<addr>`).
    pub addr: SocketAddr,
    /// The CA its serving certificate chains to, PEM.
    pub ca_pem: String,
    /// The admin's bearer token.
    pub admin_token: String,
    shared: Arc<serve::Shared>,
    kubelet: Option<kubelet::Kubelet>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LoopbackCluster {
    fn drop(&mut self) {
        if let Some(k) = &self.kubelet {
            k.kill_all();
        }
        self.task.abort();
    }
}

/// A store with what every cluster starts with: the `default`, `kube-system`, `kube-public`
/// and `kube-node-lease` namespaces and the `cluster-admin` ClusterRole.
fn bootstrap() -> store::Store {
    let mut store = store::Store::default();
    let mut n = 0;
    let mut ctx = || {
        n += 1;
        registry::Ctx {
            now: jiff::Timestamp::now(),
            uid: format!("00000000-0000-4000-9000-{n:012x}"),
        }
    };
    let all = resources::all(&store);
    let find = |plural: &str| all.iter().find(|r| r.plural == plural);
    if let Some(r) = find("namespaces") {
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let ns = serde_json::json!({"metadata": {"name": name}});
            // (A fresh store has none of these: creation cannot fail.)
            let _ = registry::create(&mut store, r, "", ns, &ctx());
        }
    }
    if let Some(r) = find("clusterroles") {
        for role in auth::bootstrap_roles() {
            let _ = registry::create(&mut store, r, "", role, &ctx());
        }
    }
    store
}

impl LoopbackCluster {
    /// Starts a server on 127.0.0.1, port 0, with a fresh CA, inside the current Tokio runtime.
    ///
    /// # Errors
    /// [`ClusterError`].
    pub async fn start() -> Result<Self, ClusterError> {
        Self::start_with(Options::default()).await
    }

    /// Starts a server as [`start`](Self::start) does, with `options` (a kubelet).
    ///
    /// # Errors
    /// [`ClusterError`].
    pub async fn start_with(options: Options) -> Result<Self, ClusterError> {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "tfops loopback cluster CA");
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec!["localhost".to_string()])?;
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::IpAddr::from([127, 0, 0, 1])));
        let cert = params.signed_by(&key, &issuer)?;
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )?;
        let mut tls = tls;
        tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let admin_token = format!("admin-{}", jiff::Timestamp::now().as_nanosecond());
        let kubelet_state = options
            .kubelet
            .as_ref()
            .map(|_| Arc::new(kubelet::State::default()));
        let shared = Arc::new(serve::Shared {
            addr,
            ca_pem: ca_cert.pem(),
            kubelet: kubelet_state.clone(),
            store: Mutex::new(bootstrap()),
            audit: Mutex::new(Vec::new()),
            tokens: Mutex::new({
                let mut t = auth::Tokens::default();
                t.add_admin(&admin_token);
                t
            }),
            uids: std::sync::atomic::AtomicU64::new(1),
        });
        let gc = tokio::spawn(serve::collect_garbage(shared.clone()));
        let kubelet = match (options.kubelet, kubelet_state) {
            (Some(config), Some(state)) => {
                let task = tokio::spawn(kubelet::run(
                    shared.clone(),
                    state.clone(),
                    Arc::new(config),
                    addr.to_string(),
                ));
                Some((
                    task,
                    kubelet::Kubelet {
                        state,
                        shared: shared.clone(),
                    },
                ))
            }
            _ => None,
        };
        let (kubelet_task, kubelet) = match kubelet {
            Some((t, k)) => (Some(t), Some(k)),
            None => (None, None),
        };
        let serving = tokio::spawn(serve::accept(listener, Arc::new(tls), shared.clone()));
        let task = tokio::spawn(async move {
            let _ = serving.await;
            gc.abort();
            if let Some(k) = kubelet_task {
                k.abort();
            }
        });
        Ok(Self {
            addr,
            ca_pem: ca_cert.pem(),
            admin_token,
            shared,
            kubelet,
            task,
        })
    }

    /// The requests served so far (verb, path, body type, status), oldest first.
    pub fn audit(&self) -> Vec<Audit> {
        self.shared
            .audit
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Forgets the change history but the latest `keep` changes, as etcd's compaction does:
    /// a watch or `continue` token from before then is answered 410 `Gone`.
    pub fn compact(&self, keep: usize) {
        self.shared
            .store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .compact(keep);
    }

    /// A bearer token for a user with `groups` (RBAC decides what it may do).
    pub fn user_token(&self, user: &str, groups: &[&str]) -> String {
        let mut groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        groups.push("system:authenticated".into());
        self.shared
            .tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .mint_user(auth::Identity {
                user: user.into(),
                groups,
            })
    }

    /// A bearer token for the ServiceAccount `name` in `namespace`, as a `TokenRequest` gives
    /// one (`None` when it does not exist); it stops working when the ServiceAccount goes.
    pub fn service_account_token(&self, namespace: &str, name: &str) -> Option<String> {
        let store = self.shared.store.lock().unwrap_or_else(|e| e.into_inner());
        self.shared
            .tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .mint_service_account(&store, namespace, name)
    }

    /// A kubeconfig for the admin (what kubectl and client libraries read).
    pub fn kubeconfig(&self) -> String {
        self.kubeconfig_for(&self.admin_token)
    }

    /// A kubeconfig authenticating with `token`.
    pub fn kubeconfig_for(&self, token: &str) -> String {
        kubeconfig_text(self.addr, &self.ca_pem, token)
    }

    /// The kubelet stand-in, when the cluster was started with one.
    pub fn kubelet(&self) -> Option<&kubelet::Kubelet> {
        self.kubelet.as_ref()
    }
}

/// A kubeconfig for the server at `addr` whose CA is `ca_pem`, authenticating with `token`.
fn kubeconfig_text(addr: SocketAddr, ca_pem: &str, token: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem.as_bytes());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: loopback\n  cluster:\n    server: https://{addr}\n    certificate-authority-data: {ca}\nusers:\n- name: loopback-user\n  user:\n    token: {token}\ncontexts:\n- name: loopback\n  context:\n    cluster: loopback\n    user: loopback-user\ncurrent-context: loopback\n"
    )
}
