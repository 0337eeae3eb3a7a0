//! Shards (docs/scaling.md): two manager processes, the default shard and shard `b`, each with its
//! own ServiceAccount (so the audit log tells them apart) and its own leader Lease. Each
//! reconciles only its objects; an object relabelled mid-apply is handed over: the old shard
//! lets go, the new one attaches to the apply under way, and nothing runs twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::manager::Manager;
use support::operator::{Operator, applying, condition, kubeconfig_dir_for, ready_with, slow};

const DEFAULT_USER: &str = "system:serviceaccount:tfops-system:tfops-controller";
const B_USER: &str = "system:serviceaccount:tfops-system:tfops-controller-b";

/// A second controller identity with the controller's roles, and its kubeconfig.
async fn second_identity(op: &Operator) -> (tempfile::TempDir, std::path::PathBuf) {
    Api::<ServiceAccount>::namespaced(op.admin.clone(), "tfops-system")
        .create(
            &PostParams::default(),
            &support::from_json(json!({"metadata": {"name": "tfops-controller-b"}})),
        )
        .await
        .unwrap();
    Api::<ClusterRoleBinding>::all(op.admin.clone())
        .create(
            &PostParams::default(),
            &support::from_json(json!({
                "metadata": {"name": "tfops-controller-b"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tfops-controller"},
                "subjects": [{"kind": "ServiceAccount", "name": "tfops-controller-b", "namespace": "tfops-system"}],
            })),
        )
        .await
        .unwrap();
    support::bind(
        &op.admin,
        "tfops-system",
        "tfops-leader-election-b",
        "Role",
        "tfops-leader-election",
        "tfops-controller-b",
    )
    .await;
    let token = op
        .cluster
        .service_account_token("tfops-system", "tfops-controller-b")
        .await
        .unwrap();
    kubeconfig_dir_for(&op.cluster, &token)
}

/// Whether the request at `path` is about object `name` of the Terraform resource.
fn about(path: &str, name: &str) -> bool {
    let parts: Vec<&str> = path.split('/').collect();
    parts
        .windows(2)
        .any(|w| w[0] == "terraforms" && w[1] == name)
}

/// The users who touched Terraform `name` from audit entry `from` on, with a verb in `verbs`.
fn who_touched(op: &Operator, name: &str, from: usize, verbs: &[&str]) -> Vec<String> {
    op.cluster
        .audit()
        .into_iter()
        .skip(from)
        .filter(|a| about(&a.path, name) && verbs.contains(&a.method.as_str()))
        .map(|a| a.user)
        .collect()
}

async fn lease_holder(op: &Operator, name: &str) -> String {
    let leases: Api<Lease> = Api::namespaced(op.admin.clone(), "tfops-system");
    for _ in 0..600 {
        if let Some(holder) = leases
            .get_opt(name)
            .await
            .unwrap()
            .and_then(|l| l.spec?.holder_identity)
        {
            return holder;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("nobody holds Lease {name}");
}

fn manager(kubeconfig: &std::path::Path, identity: &str, extra: &[&str]) -> Manager {
    let mut flags: Vec<String> = [
        "--leader-election",
        "true",
        "--leader-election-lease-duration",
        "5s",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    flags.extend(extra.iter().map(ToString::to_string));
    Manager::start(kubeconfig, identity, &flags)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_shards_reconcile_only_their_objects_and_hand_a_moved_one_over_once() {
    let op = Operator::prepare().await;
    let (_dir, b_kubeconfig) = second_identity(&op).await;
    let default = manager(&op.controller_kubeconfig, "manager-default", &[]);
    let b = manager(&b_kubeconfig, "manager-b", &["--shard", "b"]);
    // Each shard elects its own leader, so both lead at once.
    assert_eq!(lease_holder(&op, "tfops-manager").await, "manager-default");
    assert_eq!(
        lease_holder(&op, "tfops-manager-shard-b").await,
        "manager-b"
    );

    let mut two = op.manifest("two", json!({"approvePlan": "auto"}));
    two = two.replacen(
        "namespace: team-a",
        "namespace: team-a\n  labels:\n    infra.argocd.io/shard: b",
        1,
    );
    op.apply(&op.manifest("one", json!({"approvePlan": "auto"})));
    op.apply(&two);
    for name in ["one", "two"] {
        op.wait_for(name, "became Ready", 120, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    }
    let writes = ["POST", "PUT", "PATCH", "DELETE"];
    let verbs = ["GET", "POST", "PUT", "PATCH", "DELETE"];
    let of_one = who_touched(&op, "one", 0, &writes);
    assert!(of_one.iter().any(|u| u == DEFAULT_USER), "{of_one:?}");
    assert!(
        !of_one.iter().any(|u| u == B_USER),
        "shard b wrote one: {of_one:?}"
    );
    let of_two = who_touched(&op, "two", 0, &verbs);
    assert!(of_two.iter().any(|u| u == B_USER), "{of_two:?}");
    assert!(
        !of_two.iter().any(|u| u == DEFAULT_USER),
        "the default shard touched two: {of_two:?}"
    );

    // Moved mid-apply: the default shard starts a slow apply, the object is relabelled for
    // shard b, which attaches to the apply; one runner Pod, one apply, one recorded run.
    op.git.commit("slow", &[("main.tf", &slow(20))]);
    let before_moving = op.cluster.audit().len();
    op.apply(&op.manifest(
        "moving",
        json!({"approvePlan": "auto", "sourceRef": {"url": op.git.url("slow")}}),
    ));
    applying(&op, "moving").await;
    let relabelled = op.cluster.audit().len();
    op.terraforms()
        .patch(
            "moving",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"infra.argocd.io/shard": "b"}}})),
        )
        .await
        .unwrap();
    let t = op
        .wait_for("moving", "was applied by shard b", 120, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    let (_, _, message) = condition(&t, "Apply").unwrap();
    assert!(message.contains("attached to run"), "{message}");
    let pods_created = op
        .cluster
        .audit()
        .iter()
        .skip(before_moving)
        .filter(|a| a.method == "POST" && a.path.ends_with("/namespaces/team-a/pods"))
        .count();
    assert_eq!(pods_created, 1, "one runner Pod, one apply");
    let after = who_touched(&op, "moving", relabelled, &writes);
    assert!(after.iter().any(|u| u == B_USER), "{after:?}");
    assert!(
        !after.iter().any(|u| u == DEFAULT_USER),
        "the default shard wrote after letting go: {after:?}"
    );
    op.wait_for_runs("moving", 1).await;
    let history: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(op.admin.clone(), "team-a");
    let runs = history
        .get(&tfops_kube::history::history_name("moving"))
        .await
        .unwrap();
    let runs: Vec<serde_json::Value> =
        serde_json::from_str(&runs.data.unwrap()["runs.json"]).unwrap();
    assert_eq!(runs.len(), 1, "one run recorded: {runs:?}");
    let log = default.log.lock().unwrap().join("\n");
    assert!(
        log.contains("moved to another shard mid-reconcile"),
        "{log}"
    );
    drop((default, b));
}
