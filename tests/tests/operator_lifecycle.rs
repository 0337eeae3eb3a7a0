//! The operator end to end on the test cluster (the real control plane), with real runner
//! Pods, once with Terraform and once with `binary: auto`, which runs OpenTofu in an image
//! that has both: a `Terraform` object from `kubectl apply` to `Ready`, with its state written
//! by the binary's kubernetes backend as the runner's ServiceAccount, its plan and outputs
//! objects owned by it, status and history naming the binary, and no runner Pod left.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams};
use serde_json::json;
use support::operator::{Operator, ready_with};
use test_case::test_case;

#[test_case("terraform", "terraform" ; "terraform")]
#[test_case("auto", "tofu" ; "auto runs tofu")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kubectl_apply_to_ready_with_state_outputs_and_no_runner_left(asked: &str, ran: &str) {
    let op = Operator::start().await;
    op.apply(&op.manifest(
        "web",
        json!({"approvePlan": "auto", "writeOutputsToSecret": {"name": "web-outputs"},
               "vars": [{"name": "greeting", "value": "hi"}],
               "runner": {"binary": asked}}),
    ));
    let t = op
        .wait_for("web", "became Ready", 120, |t| {
            ready_with(t, "TerraformOutputsWritten") || ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    let status = t.status.clone().unwrap();
    assert!(
        status
            .last_applied_revision
            .unwrap()
            .starts_with("main@sha1:")
    );
    let binary = status.binary.clone().unwrap_or_default();
    assert!(binary.starts_with(&format!("{ran} 1.")), "{binary}");
    op.wait_for_runs("web", 1).await;
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(op.admin.clone(), "team-a");
    let history = maps
        .get(&tfops_kube::history::history_name("web"))
        .await
        .unwrap();
    let runs: Vec<tfops_core::history::RunEntry> =
        serde_json::from_str(&history.data.unwrap()["runs.json"]).unwrap();
    assert!(runs.iter().all(|r| r.binary == binary), "{runs:?}");
    let uid = t.metadata.uid.clone().unwrap();

    let secrets: Api<Secret> = Api::namespaced(op.admin.clone(), "team-a");
    let state = secrets.get("tfstate-default-web").await.unwrap();
    // OpenTofu's backend labels its Secret as Terraform's does.
    assert_eq!(
        state.metadata.labels.unwrap()["app.kubernetes.io/managed-by"],
        "terraform"
    );
    let outputs = secrets.get("web-outputs").await.unwrap();
    assert_eq!(outputs.data.unwrap()["greeting"].0, b"hi");
    assert_eq!(outputs.metadata.owner_references.unwrap()[0].uid, uid);

    // Who wrote what: state, lock, outputs by the runner; never by the controller.
    let runner = "system:serviceaccount:team-a:tf-runner";
    let controller = "system:serviceaccount:tfops-system:tfops-controller";
    let audit = op.cluster.audit();
    let writes = |user: &str, path: &str| {
        audit
            .iter()
            .filter(|a| a.user == user && a.path.contains(path) && a.method != "GET")
            .count()
    };
    assert!(writes(runner, "/secrets/tfstate-default-web") > 0);
    assert!(writes(runner, "/leases/lock-tfstate-default-web") > 0);
    assert!(writes(runner, "/secrets/web-outputs") > 0);
    assert_eq!(writes(controller, "/secrets/tfstate-"), 0);
    assert_eq!(writes(controller, "/secrets/web-outputs"), 0);
    let refused: Vec<_> = audit.iter().filter(|a| a.code == 403).collect();
    assert!(refused.is_empty(), "{refused:?}");

    // The runner Pod is gone.
    let pods: Api<Pod> = Api::namespaced(op.admin.clone(), "team-a");
    let left = async {
        while !pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
        {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), left)
        .await
        .expect("no runner Pod left after the run");
}
