//! Apply as a separate identity (`spec.runner.apply`, docs/apply-identity.md), end to end with real
//! Terraform: the configuration manages ConfigMaps in the namespace `infra-out` (the "cloud")
//! through `kubectl`, as the runner's own ServiceAccount. `tf-plan` may only read there,
//! `tf-apply` may write; both hold the runner's role in `team-a` (state, plans).
//!
//! - With `tf-plan` as the only identity, the apply is refused by RBAC: the plan identity
//!   cannot write what the configuration manages.
//! - With the split, plans and drift checks run as `tf-plan` and succeed; an approved plan is
//!   applied by the apply runner Pod as `tf-apply`; status and history say who did what.
//! - A plan made stale between the plan runner and the apply runner (the upstream state it
//!   reads changes while the apply runner starts) is not applied and is pending again.
//! - Deletion with `destroyResourcesOnDeletion` goes the same way: the destroy is planned as
//!   `tf-plan` and applied by the apply runner as `tf-apply`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use support::operator::{Operator, condition, ready_with, upstream_state};

const PLAN_SA: &str = "system:serviceaccount:team-a:tf-plan";
const APPLY_SA: &str = "system:serviceaccount:team-a:tf-apply";

/// A resource whose input is the upstream state's `color` and whose creation writes a
/// ConfigMap into `infra-out` with the runner's own credentials.
fn config(upstream: &std::path::Path) -> String {
    format!(
        r#"data "terraform_remote_state" "upstream" {{
  backend = "local"
  config = {{ path = "{}" }}
}}
resource "terraform_data" "managed" {{
  input = data.terraform_remote_state.upstream.outputs.color
  provisioner "local-exec" {{
    command = "kubectl -n infra-out create configmap managed-${{self.input}} --from-literal=color=${{self.input}}"
  }}
  provisioner "local-exec" {{
    when    = destroy
    command = "kubectl -n infra-out delete configmap managed-${{self.input}}"
  }}
}}
"#,
        upstream.display()
    )
}

/// `tf-plan` and `tf-apply` in `team-a` with the runner's role there; in `infra-out`,
/// `tf-plan` reads ConfigMaps and `tf-apply` also creates and deletes them.
async fn identities(op: &Operator) {
    let admin = &op.admin;
    support::namespace(admin, "infra-out").await;
    for name in ["tf-plan", "tf-apply"] {
        support::runner_account(admin, "team-a", name).await;
    }
    let pp = PostParams::default();
    let roles: Api<Role> = Api::namespaced(admin.clone(), "infra-out");
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), "infra-out");
    for (name, verbs, account) in [
        ("reader", json!(["get", "list"]), "tf-plan"),
        (
            "writer",
            json!(["get", "list", "create", "delete"]),
            "tf-apply",
        ),
    ] {
        roles
            .create(
                &pp,
                &support::from_json(json!({
                    "metadata": {"name": name},
                    "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}],
                })),
            )
            .await
            .unwrap();
        bindings
            .create(
                &pp,
                &support::from_json(json!({
                    "metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                    "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": "team-a"}],
                })),
            )
            .await
            .unwrap();
    }
}

fn status(t: &tfops_kube::Terraform) -> tfops_core::api::TerraformStatus {
    t.status.clone().unwrap_or_default()
}

/// The ConfigMaps the configuration wrote into `infra-out`.
async fn managed(op: &Operator) -> Vec<String> {
    Api::<ConfigMap>::namespaced(op.admin.clone(), "infra-out")
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .filter(|n| n.starts_with("managed-"))
        .collect()
}

/// Requests to create ConfigMaps in `infra-out`, as (user, code); but the root CA publisher's
/// (kube-controller-manager puts `kube-root-ca.crt` in every namespace).
fn writes(op: &Operator) -> Vec<(String, u16)> {
    op.cluster
        .audit()
        .iter()
        .filter(|a| a.method == "POST" && a.path.ends_with("/namespaces/infra-out/configmaps"))
        .filter(|a| a.user != "system:kube-controller-manager")
        .map(|a| (a.user.clone(), a.code))
        .collect()
}

/// Requests to delete ConfigMaps in `infra-out`, as (user, code).
fn deletes(op: &Operator) -> Vec<(String, u16)> {
    op.cluster
        .audit()
        .iter()
        .filter(|a| {
            a.method == "DELETE" && a.path.contains("/namespaces/infra-out/configmaps/managed-")
        })
        .map(|a| (a.user.clone(), a.code))
        .collect()
}

fn pods_created(op: &Operator) -> usize {
    op.cluster
        .audit()
        .iter()
        .filter(|a| a.method == "POST" && a.path.ends_with("/namespaces/team-a/pods"))
        .count()
}

fn awaiting(t: &tfops_kube::Terraform) -> bool {
    ready_with(t, "TerraformPlannedWithChanges") && !status(t).plan.pending.is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_plan_identity_cannot_apply_and_the_apply_runner_applies_only_what_was_approved() {
    let op = Operator::start_with_processes(&[]).await;
    identities(&op).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("upstream.tfstate");
    upstream_state(&file, "red", 1);
    op.git.commit("managed", &[("main.tf", &config(&file))]);
    let source = json!({"kind": "GitRepository", "url": op.git.url("managed")});

    // The plan identity alone: Terraform plans, and the apply is refused by RBAC.
    op.apply(&op.manifest(
        "unsplit",
        json!({"approvePlan": "auto", "sourceRef": source, "runner": {"serviceAccountName": "tf-plan"}}),
    ));
    let t = op
        .wait_for("unsplit", "failed to apply", 180, |t| {
            ready_with(t, "TFExecApplyFailed")
        })
        .await;
    let (_, _, message) = condition(&t, "Apply").unwrap();
    assert!(message.contains("forbidden"), "{message}");
    let refused = writes(&op);
    assert!(!refused.is_empty());
    assert!(
        refused.iter().all(|w| *w == (PLAN_SA.to_string(), 403)),
        "{refused:?}"
    );
    assert!(managed(&op).await.is_empty());
    op.terraforms()
        .delete("unsplit", &Default::default())
        .await
        .unwrap();

    // The split: planning runs as tf-plan and waits for approval; no apply runner started.
    let pods_before = pods_created(&op);
    // The apply runner's Pod waits in an init container until the test opens `gate` (a Pod
    // not yet initialized: created, not Ready).
    let gate = dir.path().join("gate");
    let wait = format!("while [ ! -e '{}' ]; do sleep 0.1; done", gate.display());
    op.apply(&op.manifest(
        "guarded",
        json!({"sourceRef": source, "runner": {
            "serviceAccountName": "tf-plan",
            "apply": {"serviceAccountName": "tf-apply", "podTemplate": {"spec": {"initContainers": [
                {"name": "gate", "image": support::SHELL_IMAGE, "command": ["sh", "-c", wait]},
            ]}}},
        }}),
    ));
    let t = op
        .wait_for("guarded", "waited for approval", 180, awaiting)
        .await;
    let first = status(&t);
    assert_eq!(first.last_planned_by.as_deref(), Some(PLAN_SA));
    assert!(first.last_applied_by.is_none());
    assert_eq!(pods_created(&op) - pods_before, 1, "only the plan runner");

    // Approved, but the upstream state changes while the apply runner starts: its plan does
    // something else, so nothing is applied and the new plan is pending.
    op.approve("guarded", &first.plan.pending, "t1").await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(op.admin.clone(), "team-a");
    tokio::time::timeout(
        std::time::Duration::from_secs(120),
        kube::runtime::wait::await_condition(pods, "guarded-tf-runner-apply", |p: Option<&_>| {
            p.is_some()
        }),
    )
    .await
    .expect("the approved plan reached the apply runner")
    .unwrap();
    upstream_state(&file, "blue", 2);
    std::fs::write(&gate, "").unwrap();
    let approved = first.plan.pending_digest.clone();
    let t = op
        .wait_for("guarded", "found the plan changed", 180, move |t| {
            awaiting(t) && status(t).plan.pending_digest != approved
        })
        .await;
    let (_, _, message) = condition(&t, "Ready").unwrap();
    assert!(
        message.contains("changed before it was applied") && message.contains(APPLY_SA),
        "{message}"
    );
    assert!(status(&t).last_applied_revision.is_none());
    assert!(managed(&op).await.is_empty(), "nothing applied");
    assert!(
        writes(&op).iter().all(|(user, _)| user == PLAN_SA),
        "the apply identity wrote nothing: {:?}",
        writes(&op)
    );

    // Approving the new plan applies it, in the apply runner, as tf-apply; `tfops logs -f`
    // follows the plan runner and then the apply runner.
    use std::io::{BufRead, BufReader, Read};
    let mut follow = std::process::Command::new(env!("CARGO_BIN_EXE_tfops-cli"))
        .args(["logs", "-f", "guarded", "-n", "team-a"])
        .env("KUBECONFIG", &op.kubeconfig)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut follow_err = BufReader::new(follow.stderr.take().unwrap());
    let mut waiting = String::new();
    follow_err.read_line(&mut waiting).unwrap();
    assert!(waiting.contains("waiting for the next one"), "{waiting}");
    let pending = status(&t).plan.pending;
    op.approve("guarded", &pending, "t2").await;
    let t = op
        .wait_for("guarded", "applied", 180, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    let mut stdout = follow.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        let _ = tx.send(text);
    });
    let followed = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .unwrap_or_else(|_| {
            let _ = follow.kill();
            panic!("tfops logs -f did not end with the apply runner")
        });
    assert!(follow.wait().unwrap().success());
    assert!(
        followed.contains("configmap/managed-blue created") && followed.contains("plan\n"),
        "the apply runner's output followed: {followed}"
    );
    let applied = status(&t);
    assert_eq!(applied.last_applied_by.as_deref(), Some(APPLY_SA));
    assert_eq!(applied.last_planned_by.as_deref(), Some(PLAN_SA));
    assert_eq!(managed(&op).await, ["managed-blue"]);
    let written = |op: &Operator| -> Vec<(String, u16)> {
        writes(op)
            .into_iter()
            .filter(|(_, code)| *code == 201)
            .collect()
    };
    assert_eq!(
        written(&op),
        [(APPLY_SA.to_string(), 201)],
        "written once, by the apply identity"
    );
    op.wait_for_runs("guarded", 3).await;
    let history = tfops_kube::history::history_name("guarded");
    let runs = Api::<ConfigMap>::namespaced(op.admin.clone(), "team-a")
        .get(&history)
        .await
        .unwrap()
        .data
        .unwrap()["runs.json"]
        .clone();
    let runs: Vec<serde_json::Value> = serde_json::from_str(&runs).unwrap();
    assert_eq!(runs[0]["plannedBy"], PLAN_SA);
    assert_eq!(runs[0]["appliedBy"], APPLY_SA);
    assert_eq!(
        runs[1]["appliedBy"],
        serde_json::Value::Null,
        "{:?}",
        runs[1]
    );

    // A drift check runs as the plan identity only.
    let pods_before = pods_created(&op);
    op.terraforms()
        .patch(
            "guarded",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"infra.argocd.io/reconcile": "t3"}}}),
            ),
        )
        .await
        .unwrap();
    let t = op
        .wait_for("guarded", "checked for drift", 180, |t| {
            ready_with(t, "NoDrift") && status(t).last_handled_reconcile_at.as_deref() == Some("t3")
        })
        .await;
    assert_eq!(status(&t).last_planned_by.as_deref(), Some(PLAN_SA));
    assert_eq!(pods_created(&op) - pods_before, 1, "only the plan runner");
    assert_eq!(written(&op).len(), 1, "a drift check writes nothing");

    // Deleted with destroyResourcesOnDeletion: the destroy is planned by the plan runner and
    // applied by the apply runner, whose destroy provisioner deletes the ConfigMap.
    op.terraforms()
        .patch(
            "guarded",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"approvePlan": "auto", "destroyResourcesOnDeletion": true}}),
            ),
        )
        .await
        .unwrap();
    let t = op
        .wait_for("guarded", "saw the new spec", 180, |t| {
            Some(status(t).observed_generation) == t.metadata.generation
                && status(t).active_run.is_none()
        })
        .await;
    let uid = t.metadata.uid.clone().unwrap();
    let pods_before = pods_created(&op);
    op.terraforms()
        .delete("guarded", &Default::default())
        .await
        .unwrap();
    let released = kube::runtime::wait::await_condition(
        op.terraforms(),
        "guarded",
        kube::runtime::conditions::is_deleted(&uid),
    );
    if tokio::time::timeout(std::time::Duration::from_secs(180), released)
        .await
        .is_err()
    {
        let left = op.terraforms().get_opt("guarded").await.unwrap();
        panic!("guarded was not released: {:?}", left.map(|t| t.status));
    }
    assert!(managed(&op).await.is_empty(), "the destroy removed it");
    assert_eq!(
        deletes(&op),
        [(APPLY_SA.to_string(), 200)],
        "deleted once, by the apply identity"
    );
    assert_eq!(
        pods_created(&op) - pods_before,
        2,
        "the plan runner made the destroy plan, the apply runner applied it"
    );
}
