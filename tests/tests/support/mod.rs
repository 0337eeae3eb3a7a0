//! What the cluster tests share: kube-rs clients and a kubeconfig file for a running test
//! cluster (the real control plane, `tfops-testcluster`), a namespace, the Widget CRD, the state backend's RBAC, kubectl as a
//! process, and small conversions.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod argocd;
pub mod git;
pub mod manager;
pub mod operator;
pub mod pulls;
pub mod state;

use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use serde_json::json;
use tfops_testcluster::TestCluster;

/// A kube-rs client authenticated as the admin (a `system:masters` client certificate).
pub async fn client(cluster: &TestCluster) -> kube::Client {
    cluster.client().await.unwrap()
}

/// A kube-rs client authenticated with `token`.
pub async fn client_for(cluster: &TestCluster, token: &str) -> kube::Client {
    cluster.client_for(token).await.unwrap()
}

/// The `Status` of an API error (panics on any other error).
pub fn status(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("not an API error: {other:?}"),
    }
}

/// A typed object from JSON.
pub fn from_json<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> K {
    serde_json::from_value(v).unwrap()
}

/// Creates the Widget CRD and waits until it is established.
pub async fn widgets_served(client: &kube::Client) {
    crd_served(client, &widget_crd()).await;
}

/// Creates `crd` and waits (at most 30 s) until the API server serves its resource: until
/// then, objects of it are refused with 404.
pub async fn crd_served(client: &kube::Client, crd: &CustomResourceDefinition) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), crd).await.unwrap();
    let name = crd.metadata.name.clone().unwrap();
    let established = kube::runtime::wait::await_condition(
        crds,
        &name,
        kube::runtime::wait::conditions::is_crd_established(),
    );
    tokio::time::timeout(std::time::Duration::from_secs(30), established)
        .await
        .unwrap_or_else(|_| panic!("the CRD {name} was not Established within 30 s"))
        .unwrap();
}

/// Gives the ServiceAccount `account` of `namespace` exactly the RBAC the notes list for
/// Terraform's kubernetes backend: Secrets get/list/create/update/delete, Leases
/// get/create/update/delete.
pub async fn grant_state_backend(client: &kube::Client, namespace: &str, account: &str) {
    use k8s_openapi::api::rbac::v1::Role;
    let pp = PostParams::default();
    Api::<Role>::namespaced(client.clone(), namespace)
        .create(
            &pp,
            &from_json(json!({
                "metadata": {"name": "tf-state"},
                "rules": [
                    {"apiGroups": [""], "resources": ["secrets"],
                     "verbs": ["get", "list", "create", "update", "delete"]},
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                     "verbs": ["get", "create", "update", "delete"]},
                ],
            })),
        )
        .await
        .unwrap();
    bind(client, namespace, "tf-state", "Role", "tf-state", account).await;
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
pub fn kubeconfig_file(cluster: &TestCluster) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, cluster.kubeconfig()).unwrap();
    (dir, path)
}

/// The kubectl built with the control plane (`scripts/install-kubernetes`), else the one on
/// `PATH`.
pub fn kubectl_binary() -> PathBuf {
    let built = tfops_testcluster::Binaries::locate().dir.join("kubectl");
    if built.is_file() {
        built
    } else {
        PathBuf::from("kubectl")
    }
}

/// Runs kubectl with `kubeconfig`: success, stdout, stderr.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(kubectl_binary())
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl (scripts/install-kubernetes builds it)");
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

/// Creates tfops' `Terraform` CRD (generated from the types) and waits until it is
/// established.
pub async fn terraform_crd_served(client: &kube::Client) {
    crd_served(client, &tfops_kube::crd().unwrap()).await;
}

/// Creates the `Terraform` object `namespace/name` with a Git source and `spec` merged over
/// it; returns it as stored.
pub async fn terraform(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    spec: serde_json::Value,
) -> tfops_kube::Terraform {
    let mut body = json!({
        "apiVersion": "infra.argocd.io/v1alpha1",
        "kind": "Terraform",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"sourceRef": {"kind": "GitRepository", "url": "https://git.example.com/infra.git"}},
    });
    json_patch::merge(&mut body["spec"], &spec);
    Api::<tfops_kube::Terraform>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &from_json(body))
        .await
        .unwrap()
}

/// `target` as a path relative to the directory `from`, as a kustomization must name its
/// bases and components (Kustomize refuses absolute ones): up to `/`, then down.
pub fn kustomize_path(from: &Path, target: &Path) -> String {
    let from = from.canonicalize().unwrap();
    let target = target.canonicalize().unwrap();
    format!(
        "{}{}",
        "../".repeat(from.components().count() - 1),
        target.strip_prefix("/").unwrap().display()
    )
}

/// Waits (at most 30 s) until both CRDs of tfops installed with kubectl or helm
/// (`Terraform`, `TerraformPolicy`) are Established.
pub fn tfops_crds_established(kubeconfig: &Path) {
    crds_established(
        kubeconfig,
        &[
            "terraforms.infra.argocd.io",
            "terraformpolicies.infra.argocd.io",
        ],
        30,
    );
}

/// Waits (at most `seconds` each) until the CRDs `names` are Established, read with kubectl.
/// Polled, not `kubectl wait`: right after it is made, a CRD's `status.conditions` may read
/// as null, which `kubectl wait` takes for an error (seen with Argo CD's ApplicationSet CRD).
pub fn crds_established(kubeconfig: &Path, names: &[&str], seconds: u64) {
    let established = "jsonpath={.status.conditions[?(@.type==\"Established\")].status}";
    for crd in names {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
        loop {
            let (_, out, err) = kubectl(
                kubeconfig,
                &["get", &format!("crd/{crd}"), "-o", established],
            );
            if out.trim() == "True" {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{crd} never became Established: {out}{err}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}

/// The runner binary the node agent runs for the runner image: this crate's
/// `runner-pod`, the `tfops-runner` process built with the tests themselves.
pub fn runner_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_runner-pod"))
}

/// A ClusterRole of `config/rbac/` (what tfops ships), by file name.
pub fn shipped_cluster_role(file: &str) -> k8s_openapi::api::rbac::v1::ClusterRole {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../config/rbac")
        .join(file);
    serde_yaml_ng::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Binds `role` (`kind` Role or ClusterRole) to the ServiceAccount `account` of `namespace`,
/// with the RoleBinding `name` there.
pub async fn bind(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    kind: &str,
    role: &str,
    account: &str,
) {
    Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), namespace)
        .create(
            &PostParams::default(),
            &from_json(json!({
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            })),
        )
        .await
        .unwrap();
}

/// Gives the ServiceAccount `account` of `namespace` the runner's role as tfops ships it
/// (`config/rbac/runner.yaml`, created once), with the RoleBinding `tf-runner`.
pub async fn grant_runner(client: &kube::Client, namespace: &str, account: &str) {
    grant_runner_as(client, namespace, "tf-runner", account).await;
}

/// [`grant_runner`] with the RoleBinding `binding`.
async fn grant_runner_as(client: &kube::Client, namespace: &str, binding: &str, account: &str) {
    let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
    if roles.get_opt("tfops-runner").await.unwrap().is_none() {
        roles
            .create(&PostParams::default(), &shipped_cluster_role("runner.yaml"))
            .await
            .unwrap();
    }
    bind(
        client,
        namespace,
        binding,
        "ClusterRole",
        "tfops-runner",
        account,
    )
    .await;
}

/// Creates the ServiceAccount `account` in `namespace` with the runner's role there (the
/// RoleBinding `<account>-runner`): a plan or apply identity of `spec.runner`.
pub async fn runner_account(client: &kube::Client, namespace: &str, account: &str) {
    Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), namespace)
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": account}})),
        )
        .await
        .unwrap();
    grant_runner_as(client, namespace, &format!("{account}-runner"), account).await;
}

/// A test cluster whose node agent runs the runner image as this workspace's `tfops-runner`,
/// with Terraform and OpenTofu (`TFOPS_TERRAFORM`, `TFOPS_TOFU`) on hand, as in the shipped
/// image (so `binary: auto` runs tofu); its Pod directories live in the returned
/// directory.
pub async fn cluster_with_node() -> (TestCluster, tempfile::TempDir) {
    cluster_with_node_on(false).await
}

/// Whether the e2e tests run runner Pods as real containers: `TFOPS_E2E_RUNNERS=containers`,
/// as `scripts/test` sets (else, for a machine without podman or images, as local processes).
pub fn containers_wanted() -> bool {
    std::env::var("TFOPS_E2E_RUNNERS").as_deref() == Ok("containers")
}

/// The runner image the tests' managers name: the built one with containers, else the name
/// the node agent runs as this workspace's `tfops-runner`.
pub fn runner_pod_image() -> String {
    if containers_wanted() {
        runner_image()
    } else {
        format!("{RUNNER_IMAGE}:dev")
    }
}

/// The runner image `scripts/build-images` built (`TFOPS_RUNNER_IMAGE`).
pub fn runner_image() -> String {
    std::env::var("TFOPS_RUNNER_IMAGE").unwrap_or_else(|_| {
        panic!("TFOPS_RUNNER_IMAGE is unset: run scripts/build-images and set it to the runner image it prints")
    })
}

/// [`cluster_with_node`]; with `containers`, every image but the shell image is run as a real
/// container by podman (the runner image as `scripts/build-images` built it).
pub async fn cluster_with_node_on(containers: bool) -> (TestCluster, tempfile::TempDir) {
    use tfops_testcluster::Options;
    use tfops_testcluster::node::NodeConfig;
    let root = tempfile::tempdir().unwrap();
    let found = |binary: &str| {
        tfops_testcluster::tools::binary(binary)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let base_env = [
        (
            "PATH".to_string(),
            std::env::var("PATH").unwrap_or_default(),
        ),
        ("TFOPS_TERRAFORM".to_string(), found("terraform")),
        ("TFOPS_TOFU".to_string(), found("tofu")),
    ]
    .into();
    let cluster = TestCluster::start_with(Options {
        node: Some(NodeConfig {
            name: None,
            images: if containers {
                [(SHELL_IMAGE.to_string(), PathBuf::from("/bin/sh"))].into()
            } else {
                // The built image's name stands for the same binary (a test that needs local
                // processes runs beside ones that use containers).
                let mut images: std::collections::BTreeMap<String, PathBuf> = [
                    (RUNNER_IMAGE.to_string(), runner_binary()),
                    (SHELL_IMAGE.to_string(), PathBuf::from("/bin/sh")),
                ]
                .into();
                if containers_wanted() {
                    let image = runner_image();
                    images.insert(
                        tfops_testcluster::node::image_name(&image).to_string(),
                        runner_binary(),
                    );
                }
                images
            },
            root: root.path().to_path_buf(),
            base_env,
            containers,
        }),
        binaries: None,
    })
    .await
    .unwrap();
    (cluster, root)
}

/// Creates the ResourceQuota `name` in `namespace` with `hard`, and waits until the quota
/// controller has recorded it in status: only then does quota admission enforce it (a Pod
/// created before slips through, as on any cluster).
pub async fn quota(client: &kube::Client, namespace: &str, name: &str, hard: serde_json::Value) {
    use k8s_openapi::api::core::v1::ResourceQuota;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), namespace);
    quotas
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": name}, "spec": {"hard": hard}})),
        )
        .await
        .unwrap();
    let counted =
        kube::runtime::wait::await_condition(quotas, name, |q: Option<&ResourceQuota>| {
            q.and_then(|q| q.status.as_ref()?.hard.as_ref())
                .is_some_and(|h| !h.is_empty())
        });
    tokio::time::timeout(std::time::Duration::from_secs(60), counted)
        .await
        .expect("the quota controller counted the quota")
        .unwrap();
}

/// Cordons (`true`) or uncordons the test cluster's Node, as `kubectl cordon` does: a Pod
/// created while it is cordoned is not scheduled (so never Ready) until it is uncordoned.
pub async fn cordon(client: &kube::Client, on: bool) {
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .patch(
            "node-1",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"unschedulable": on}})),
        )
        .await
        .unwrap();
}

/// An image the node agent runs as this machine's `/bin/sh` (for init containers and helpers
/// of tests; its `command` is `["sh", "-c", SCRIPT]`).
pub const SHELL_IMAGE: &str = "docker.io/library/busybox";

/// The runner image the node agent knows.
pub const RUNNER_IMAGE: &str = "ghcr.io/tfops/tfops-runner";
