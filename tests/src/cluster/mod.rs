//! A Kubernetes API server on loopback, for tests (issue 12; **in progress**).
//!
//! A test double whose value is fidelity: it is judged by real clients we did not write
//! (kube-rs now; Terraform's kubernetes backend and kubectl next). Its layout follows the real
//! server's: [`handlers`] decode requests and encode `Status` errors, [`registry`] holds what
//! create/get/list/update/delete do to metadata, [`store`] keeps every object under one
//! `resourceVersion` sequence with a change log (for watches), `serve` does HTTPS and
//! bearer-token authentication.
//!
//! Served so far: `/version`; Namespaces, Secrets and ConfigMaps (get, list in a namespace and
//! across namespaces, create, update with `resourceVersion` preconditions, delete) with
//! `uid`, `creationTimestamp` (no `generation`: the real strategies of these kinds keep none) and the real `Status` errors (`NotFound`,
//! `AlreadyExists`, `Conflict`, `BadRequest`, `Unauthorized`, `MethodNotAllowed`); JSON merge
//! and JSON patches (with the same preconditions as an update); watches
//! from a `resourceVersion` (or from the current objects) with `timeoutSeconds`, fed by the
//! store's change log; label selectors on lists and watches; NamespaceLifecycle (nothing is
//! created in a namespace that does not exist); legacy discovery. JSON bodies only (a protobuf
//! body is refused with 415). Not yet: protobuf, field selectors, `limit`/`continue`, bookmarks, `410
//! Gone`, strategic merge patch and server-side apply, status subresources, finalizers and garbage
//! collection, CRDs, discovery beyond `/version`, protobuf, RBAC, quota, the kubelet.

pub mod errors;
pub mod handlers;
pub mod registry;
pub mod selectors;
mod serve;
pub mod store;

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

/// A running loopback API server; stopped when dropped.
pub struct LoopbackCluster {
    /// Where it listens (`https://<addr>`).
    pub addr: SocketAddr,
    /// The CA its serving certificate chains to, PEM.
    pub ca_pem: String,
    /// The admin's bearer token.
    pub admin_token: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for LoopbackCluster {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LoopbackCluster {
    /// Starts a server on 127.0.0.1, port 0, with a fresh CA, inside the current Tokio runtime.
    ///
    /// # Errors
    /// [`ClusterError`].
    pub async fn start() -> Result<Self, ClusterError> {
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
        let shared = Arc::new(serve::Shared {
            store: Mutex::new(store::Store::default()),
            admin_token: admin_token.clone(),
            uids: std::sync::atomic::AtomicU64::new(1),
        });
        let task = tokio::spawn(serve::accept(listener, Arc::new(tls), shared));
        Ok(Self {
            addr,
            ca_pem: ca_cert.pem(),
            admin_token,
            task,
        })
    }

    /// A kubeconfig for the admin (what kubectl and client libraries read).
    pub fn kubeconfig(&self) -> String {
        use base64::Engine;
        let ca = base64::engine::general_purpose::STANDARD.encode(self.ca_pem.as_bytes());
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: loopback\n  cluster:\n    server: https://{addr}\n    certificate-authority-data: {ca}\nusers:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: loopback\n  context:\n    cluster: loopback\n    user: admin\ncurrent-context: loopback\n",
            addr = self.addr,
            token = self.admin_token,
        )
    }
}
