//! A real Kubernetes control plane on loopback, for tests and demos.
//!
//! [`TestCluster::start`] runs etcd, kube-apiserver and kube-controller-manager, built from
//! upstream's published Go modules by `scripts/install-kubernetes` (versions in
//! [`KUBERNETES_VERSION`] and [`ETCD_VERSION`]), on 127.0.0.1 with free ports and a temporary
//! directory: a CA and serving certificate, a ServiceAccount signing key, RBAC authorization and
//! an audit log of every request ([`TestCluster::audit`]). Users are client certificates
//! ([`TestCluster::kubeconfig_for_user`]; the admin is in `system:masters`); ServiceAccounts
//! authenticate with tokens from the TokenRequest API ([`TestCluster::service_account_token`]).
//! With [`Options::node`] a node agent ([`node`]) registers a Node and runs the Pods bound to it
//! as local processes. Everything stops, and the directory goes, when the cluster is dropped.
//!
//! Beside it, [`gitea::Gitea`]: a real forge for the pull-request tests.

pub mod audit;
mod control_plane;
pub mod gitea;
pub mod kubeconfig;
pub mod node;
pub mod pki;
mod process;
pub mod tools;

pub use control_plane::{Binaries, Error, Options, TestCluster};

/// The Kubernetes release the control plane is built from (`scripts/install-kubernetes`).
pub const KUBERNETES_VERSION: &str = "1.37.2";
/// The etcd release Kubernetes 1.37 pairs with (`scripts/install-kubernetes`).
pub const ETCD_VERSION: &str = "3.7.3";
