//! The `Terraform` CRD: generated from the core's types, checked in at
//! `config/crd/infra.argocd.io_terraforms.yaml` and in the chart's `crds/` (this test fails
//! when either is stale; `TFOPS_UPDATE_CRD=1` rewrites them), accepted by the real API server
//! (`tfops-testcluster`) as a structural schema, and every example manifest validates against it there (server-side dry run).
//! `docs/reference.md`, the field reference, is rendered from it and checked the same way.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use tfops_kube::Terraform;
use tfops_testcluster::TestCluster;

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
fn the_field_reference_in_docs_is_generated_from_the_crd() {
    let page = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/reference.md");
    assert_checked_in(&page, &tfops_kube::reference::markdown().unwrap());
}

#[test]
fn the_checked_in_crd_is_the_generated_one() {
    let generated = tfops_kube::crd_yaml().unwrap();
    assert_checked_in(&checked_in(), &generated);
    assert_checked_in(&in_chart(&checked_in()), &generated);
}

async fn client(cluster: &TestCluster) -> kube::Client {
    cluster.client().await.unwrap()
}

/// Creates `crd` and waits until the server serves it (Established).
async fn serve(client: &kube::Client, crd: &CustomResourceDefinition) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), crd)
        .await
        .expect("the server accepts the CRD (structural schema)");
    let name = crd.metadata.name.clone().unwrap();
    let established = kube::runtime::wait::await_condition(
        crds,
        &name,
        kube::runtime::wait::conditions::is_crd_established(),
    );
    tokio::time::timeout(std::time::Duration::from_secs(30), established)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn the_crd_is_structural_and_the_examples_validate_against_it() {
    let cluster = TestCluster::start().await.unwrap();
    let client = client(&cluster).await;
    let crd: CustomResourceDefinition =
        serde_yaml_ng::from_str(&std::fs::read_to_string(checked_in()).unwrap()).unwrap();
    serve(&client, &crd).await;
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
    // Specs the server refuses at once (422), each message naming the field and what is
    // allowed: what `kubectl apply` and Argo CD's sync show.
    let dynamic: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client,
        "demo",
        &kube::api::ApiResource::erase::<Terraform>(&()),
    );
    let git = serde_json::json!({"kind": "GitRepository", "url": "https://example.com/x.git"});
    let cases = [
        (
            serde_json::json!({"sourceRef": git, "interval": 7}),
            vec!["spec.interval"],
        ),
        (
            serde_json::json!({"sourceRef": git, "interval": "abc"}),
            vec![
                "spec.interval",
                "must be a Go duration such as 30s, 10m or 1h30m",
            ],
        ),
        (
            serde_json::json!({"sourceRef": git, "retryInterval": "5 minutes"}),
            vec!["spec.retryInterval", "Go duration"],
        ),
        (
            serde_json::json!({"sourceRef": git, "healthChecks": [{"name": "h", "type": "tcp", "address": "a:1", "timeout": "soon"}]}),
            vec!["spec.healthChecks[0].timeout", "Go duration"],
        ),
        (
            serde_json::json!({"sourceRef": git, "approvePlan": "yes please"}),
            vec!["spec.approvePlan", "plan id like plan-main-0123456789"],
        ),
        (
            serde_json::json!({"sourceRef": {"kind": "Bucket", "url": "s3://x"}}),
            vec!["spec.sourceRef.kind", "GitRepository", "OCIRepository"],
        ),
        (
            serde_json::json!({"sourceRef": {"kind": "GitRepository"}}),
            vec!["spec.sourceRef.url", "Required value"],
        ),
        (
            serde_json::json!({"sourceRef": {"kind": "GitRepository", "url": " "}}),
            vec!["spec.sourceRef.url", "must name the source"],
        ),
        (
            serde_json::json!({"sourceRef": {"kind": "GitRepository", "url": "https://g/x.git", "ref": {"branch": "main", "tag": "v1"}}}),
            vec![
                "spec.sourceRef.ref",
                "set only one of branch, tag, semver, commit, digest",
            ],
        ),
        (
            serde_json::json!({"sourceRef": {"kind": "GitRepository", "url": "https://g/x.git", "ref": {"digest": format!("sha256:{}", "a".repeat(64))}}}),
            vec!["spec.sourceRef.ref.digest", "OCIRepository sources only"],
        ),
        (
            serde_json::json!({"sourceRef": {"kind": "GitRepository", "url": "https://g/x.git", "ref": {"commit": "xyz"}}}),
            vec!["spec.sourceRef.ref.commit", "7 to 40 hex digits"],
        ),
        (
            serde_json::json!({"sourceRef": git, "planOnly": true, "force": true}),
            vec!["spec.force", "conflicts with spec.planOnly"],
        ),
        (
            serde_json::json!({"sourceRef": git, "planOnly": true, "approvePlan": "auto"}),
            vec!["spec.approvePlan", "conflicts with spec.planOnly"],
        ),
        (
            serde_json::json!({"sourceRef": git, "tfstate": {"forceUnlock": "yes"}}),
            vec!["spec.tfstate.lockIdentifier", "needs the lock id"],
        ),
    ];
    for (i, (spec, said)) in cases.into_iter().enumerate() {
        let bad = serde_json::json!({
            "apiVersion": "infra.argocd.io/v1alpha1", "kind": "Terraform",
            "metadata": {"name": format!("bad-{i}"), "namespace": "demo"},
            "spec": spec,
        });
        let e = dynamic
            .create(
                &PostParams::default(),
                &serde_json::from_value(bad).unwrap(),
            )
            .await
            .expect_err(&format!("case {i} was accepted: {said:?}"));
        let kube::Error::Api(status) = &e else {
            panic!("case {i}: {e}")
        };
        assert_eq!(status.code, 422, "case {i}: {status:?}");
        for part in said {
            assert!(
                status.message.contains(part),
                "case {i}: {}",
                status.message
            );
        }
    }
    // What the rules allow still goes in.
    let good = serde_json::json!({
        "apiVersion": "infra.argocd.io/v1alpha1", "kind": "Terraform",
        "metadata": {"name": "good", "namespace": "demo"},
        "spec": {
            "sourceRef": {"kind": "OCIRepository", "url": "oci://r/x", "ref": {"digest": format!("sha256:{}", "a".repeat(64))}},
            "interval": "1h30m", "retryInterval": "0", "approvePlan": "plan-main-0123456789",
            "tfstate": {"forceUnlock": "yes", "lockIdentifier": "f00-ba4"},
        },
    });
    dynamic
        .create(&dry_run, &serde_json::from_value(good).unwrap())
        .await
        .unwrap();
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
    let cluster = TestCluster::start().await.unwrap();
    let client = client(&cluster).await;
    let crd: CustomResourceDefinition =
        serde_yaml_ng::from_str(&std::fs::read_to_string(checked_in_policy_crd()).unwrap())
            .unwrap();
    serve(&client, &crd).await;
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
