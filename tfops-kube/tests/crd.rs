//! The `Terraform` CRD: generated from the core's types, checked in at
//! `config/crd/infra.argocd.io_terraforms.yaml` and in the chart's `crds/` (this test fails
//! when either is stale; `TFOPS_UPDATE_CRD=1` rewrites them), accepted by the loopback API server as a structural
//! schema, and every example manifest validates against it there (server-side dry run).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use tests::cluster::LoopbackCluster;
use tfops_kube::Terraform;

fn checked_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/crd/infra.argocd.io_terraforms.yaml")
}

/// Fails when `path` is not `generated` (`TFOPS_UPDATE_CRD=1` rewrites it first).
fn assert_checked_in(path: &std::path::Path, generated: &str) {
    if std::env::var_os("TFOPS_UPDATE_CRD").is_some() {
        std::fs::write(path, generated).unwrap();
    }
    let file = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        file == generated,
        "{} is stale: run TFOPS_UPDATE_CRD=1 cargo test -p tfops-kube --test crd",
        path.display()
    );
}

/// The chart's copy of a CRD file of `config/crd/` (Helm installs what is in its `crds/`).
fn in_chart(path: &std::path::Path) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../charts/tfops/crds")
        .join(path.file_name().unwrap())
}

#[test]
fn the_checked_in_crd_is_the_generated_one() {
    let generated = tfops_kube::crd_yaml().unwrap();
    assert_checked_in(&checked_in(), &generated);
    assert_checked_in(&in_chart(&checked_in()), &generated);
}

async fn client(cluster: &LoopbackCluster) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&cluster.kubeconfig()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

#[tokio::test]
async fn the_crd_is_structural_and_the_examples_validate_against_it() {
    let cluster = LoopbackCluster::start().await.unwrap();
    let client = client(&cluster).await;
    let crd: CustomResourceDefinition =
        serde_yaml_ng::from_str(&std::fs::read_to_string(checked_in()).unwrap()).unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("the loopback server accepts the CRD (structural schema)");
    let mut ns = Namespace::default();
    ns.metadata.name = Some("demo".into());
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut manifests = Vec::new();
    for entry in std::fs::read_dir(&examples).unwrap() {
        let file = entry.unwrap().path().join("terraform.yaml");
        if file.is_file() {
            manifests.push(file);
        }
    }
    assert!(!manifests.is_empty());
    let api: Api<Terraform> = Api::namespaced(client.clone(), "demo");
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    for file in manifests {
        let object: Terraform = serde_yaml_ng::from_str(&std::fs::read_to_string(&file).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let stored = api
            .create(&dry_run, &object)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        // Nothing the example says is pruned: the schema knows every field.
        assert_eq!(stored.spec, object.spec, "{}", file.display());
    }
    // A spec the schema refuses: 422 naming the field.
    let bad = serde_json::json!({
        "apiVersion": "infra.argocd.io/v1alpha1", "kind": "Terraform",
        "metadata": {"name": "bad", "namespace": "demo"},
        "spec": {"sourceRef": {"kind": "Git", "url": "https://example.com/x.git"}, "interval": 7},
    });
    let dynamic: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client,
        "demo",
        &kube::api::ApiResource::erase::<Terraform>(&()),
    );
    let e = dynamic
        .create(
            &PostParams::default(),
            &serde_json::from_value(bad).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("spec.interval"), "{e}");
}

fn checked_in_policy_crd() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../config/crd/infra.argocd.io_terraformpolicies.yaml")
}

#[test]
fn the_checked_in_policy_crd_is_the_generated_one() {
    let generated = tfops_kube::policy_crd_yaml().unwrap();
    assert_checked_in(&checked_in_policy_crd(), &generated);
    assert_checked_in(&in_chart(&checked_in_policy_crd()), &generated);
}

/// The starter policies are valid `TerraformPolicy` objects, and the policy source reads them
/// back as the core's policies, compiled without error.
#[tokio::test]
async fn the_starter_policies_are_accepted_and_read_back() {
    use tfops_core::ports::PolicySource;
    let cluster = LoopbackCluster::start().await.unwrap();
    let client = client(&cluster).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition =
        serde_yaml_ng::from_str(&std::fs::read_to_string(checked_in_policy_crd()).unwrap())
            .unwrap();
    crds.create(&PostParams::default(), &crd).await.unwrap();
    let mut ns = Namespace::default();
    ns.metadata.name = Some("demo".into());
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/policies");
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "demo",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("infra.argocd.io", "v1alpha1", "TerraformPolicy"),
            "terraformpolicies",
        ),
    );
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if path.extension().is_none_or(|e| e != "yaml") || !text.contains("kind: TerraformPolicy") {
            continue;
        }
        let object: kube::api::DynamicObject = serde_yaml_ng::from_str(&text).unwrap();
        names.push(object.metadata.name.clone().unwrap());
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    assert!(names.len() >= 4, "{names:?}");
    let object: tfops_core::api::TerraformObject = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "x", "namespace": "demo", "generation": 1},
        "spec": {"sourceRef": {"kind": "GitRepository", "url": "https://g/x.git"}},
    }))
    .unwrap();
    let policies = tfops_kube::KubePolicySource::new(client)
        .policies(&object)
        .await
        .unwrap();
    assert_eq!(policies.len(), names.len());
    for p in &policies {
        tfops_core::policy::compile(p).unwrap_or_else(|e| panic!("{}: {e}", p.metadata.name));
    }
}
