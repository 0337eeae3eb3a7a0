//! What the conformance tests share: a kube-rs client and a kubeconfig file for a running
//! loopback cluster, a namespace, kubectl as a process.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::json;
use tests::cluster::LoopbackCluster;

/// A kube-rs client authenticated as the admin, from the cluster's kubeconfig.
pub async fn client(cluster: &LoopbackCluster) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&cluster.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// Creates the namespace `name`.
pub async fn namespace(client: &kube::Client, name: &str) {
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.into());
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// The admin kubeconfig written to a file in a fresh directory (kept while the `TempDir`
/// lives).
pub fn kubeconfig_file(cluster: &LoopbackCluster) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, cluster.kubeconfig()).unwrap();
    (dir, path)
}

/// Runs kubectl (part of this machine image) with `kubeconfig`: success, stdout, stderr.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl (part of this machine image)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A CRD for tests: `Widget` (`widgets.test.tfops.io/v1`, namespaced, short name `wd`) with a
/// status subresource, a schema with a required field, a default, an enum, a minimum, and
/// conditions keyed by `type`.
pub fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.test.tfops.io"},
        "spec": {
            "group": "test.tfops.io",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["path"],
                            "properties": {
                                "path": {"type": "string", "minLength": 1},
                                "replicas": {"type": "integer", "minimum": 1, "default": 1},
                                "mode": {"type": "string", "enum": ["auto", "manual"]},
                            },
                        },
                        "status": {
                            "type": "object",
                            "properties": {
                                "observedGeneration": {"type": "integer"},
                                "conditions": {
                                    "type": "array",
                                    "x-kubernetes-list-type": "map",
                                    "x-kubernetes-list-map-keys": ["type"],
                                    "items": {
                                        "type": "object",
                                        "required": ["type", "status"],
                                        "properties": {
                                            "type": {"type": "string"},
                                            "status": {"type": "string"},
                                            "reason": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                }},
            }],
        },
    }))
    .unwrap()
}
