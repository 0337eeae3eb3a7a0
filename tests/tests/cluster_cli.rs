//! The `tfops` CLI against the operator in the test cluster, run as a person holding only
//! the shipped approver role (`config/rbac/approver.yaml`): `get`, `plan show` (from the
//! ConfigMaps alone), `approve` (a stale id refused, the pending one applied), `replan`,
//! `reconcile`, `suspend`, `resume`, `unlock` with nothing locked, and the messages for a
//! missing object, a missing CRD and an RBAC denial.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::json;
use support::operator::{Operator, kubeconfig_dir_for, pending, ready_with};

/// Runs the CLI with `kubeconfig`: exit code, stdout, stderr.
fn tfops(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tfops-cli"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The annotations of `app` now.
async fn annotations(op: &Operator) -> std::collections::BTreeMap<String, String> {
    let t = op.terraforms().get("app").await.unwrap();
    t.metadata.annotations.unwrap_or_default()
}

/// A kubeconfig of a new ServiceAccount `name` in `team-a`, holding the approver role there
/// when `approver`.
async fn person(
    op: &Operator,
    name: &str,
    approver: bool,
) -> (tempfile::TempDir, std::path::PathBuf) {
    Api::<ServiceAccount>::namespaced(op.admin.clone(), "team-a")
        .create(
            &PostParams::default(),
            &support::from_json(json!({"metadata": {"name": name}})),
        )
        .await
        .unwrap();
    if approver {
        let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(op.admin.clone());
        if roles.get_opt("tfops-approver").await.unwrap().is_none() {
            roles
                .create(
                    &PostParams::default(),
                    &support::shipped_cluster_role("approver.yaml"),
                )
                .await
                .unwrap();
        }
        support::bind(
            &op.admin,
            "team-a",
            name,
            "ClusterRole",
            "tfops-approver",
            name,
        )
        .await;
    }
    let token = op
        .cluster
        .service_account_token("team-a", name)
        .await
        .unwrap();
    kubeconfig_dir_for(&op.cluster, &token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_person_with_the_approver_role_reviews_approves_and_steers_objects() {
    let op = Operator::start().await;
    let (_alice_dir, alice) = person(&op, "alice", true).await;
    op.apply(&op.manifest("app", json!({})));
    let t = op
        .wait_for("app", "waited for approval", 120, |t| {
            ready_with(t, "TerraformPlannedWithChanges") && !pending(t).is_empty()
        })
        .await;
    let plan = pending(&t);

    let (code, out, err) = tfops(&alice, &["get", "-n", "team-a"]);
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("NAME") && lines[0].contains("PENDING PLAN"),
        "{out}"
    );
    assert!(
        lines[1].starts_with("app ")
            && lines[1].contains("TerraformPlannedWithChanges")
            && lines[1].contains(&plan),
        "{out}"
    );
    // Bound in team-a only: every namespace is refused, with the API server's words.
    let (code, _, err) = tfops(&alice, &["get", "-A"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("forbidden") && err.contains("cannot list resource \"terraforms\""),
        "{err}"
    );
    let (code, out, err) = tfops(&alice, &["get", "-n", "team-a", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let listed: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(listed[0]["metadata"]["name"], "app");

    // The readable plan, read with no access to Secrets.
    let (code, out, err) = tfops(&alice, &["plan", "show", "app", "-n", "team-a"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("terraform_data.x") && out.contains("will be created"),
        "{out}"
    );
    assert!(err.contains(&plan), "{err}");

    // A stale id is refused and nothing changes.
    let (code, _, err) = tfops(
        &alice,
        &["approve", "app", "plan-main-0123456789", "-n", "team-a"],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("is not the pending plan") && err.contains(&plan),
        "{err}"
    );
    let now = op.terraforms().get("app").await.unwrap();
    assert!(
        !now.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("infra.argocd.io/approve"),
        "a refused approval writes nothing"
    );

    let (code, out, err) = tfops(&alice, &["approve", "app", &plan, "-n", "team-a"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("approved plan {plan}")), "{out}");
    let t = op
        .wait_for("app", "applied the approved plan", 120, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    assert_eq!(t.status.as_ref().unwrap().plan.last_applied, plan);
    let (code, _, err) = tfops(&alice, &["approve", "app", "-n", "team-a"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("team-a/app has no plan waiting for approval"),
        "{err}"
    );

    // The run history: the run that planned and waited, then the approved one; newest first.
    op.wait_for_runs("app", 2).await;
    let (code, out, err) = tfops(&alice, &["history", "app", "-n", "team-a"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with('#') && lines[0].contains("TRIGGER"),
        "{out}"
    );
    let newest = lines[1];
    assert!(
        newest.starts_with("1 ")
            && newest.contains("approval")
            && newest.contains("Succeeded")
            && newest.contains(&plan),
        "{out}"
    );
    let first = lines.last().unwrap();
    assert!(
        first.contains("created")
            && first.contains("AwaitingApproval")
            && first.contains("+1 ~0 -0"),
        "{out}"
    );
    let (code, out, err) = tfops(&alice, &["logs", "app", "-n", "team-a"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("Apply complete!"),
        "Terraform's own output: {out}"
    );
    let (code, _, err) = tfops(&alice, &["logs", "app", "--run", "99", "-n", "team-a"]);
    assert_eq!(code, 2);
    assert!(err.contains("--run takes 1 (the newest)"), "{err}");
    let kept = Api::<ConfigMap>::namespaced(op.admin.clone(), "team-a")
        .get("tfhistory-app")
        .await
        .unwrap();
    let owner = &kept.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Terraform", "app")
    );
    let (code, _, err) = tfops(&alice, &["unlock", "app", "-n", "team-a"]);
    assert_eq!(code, 2);
    assert!(err.contains("records no held state lock"), "{err}");

    // Suspend sets the suspend annotation (the spec, Git's, stays) and the controller says
    // so; resume removes it; reconcile and replan set their annotations.
    let (code, out, _) = tfops(&alice, &["suspend", "app", "-n", "team-a"]);
    assert_eq!(code, 0);
    assert!(out.contains("suspended"), "{out}");
    let suspended = op.terraforms().get("app").await.unwrap();
    assert!(!suspended.spec.suspend);
    assert!(
        annotations(&op).await["infra.argocd.io/suspend"]
            .starts_with("suspended with tfops suspend at ")
    );
    op.wait_for("app", "said it is suspended", 120, |t| {
        ready_with(t, "Suspended")
            && t.status.as_ref().unwrap().conditions.iter().any(|c| {
                c.type_ == "Ready"
                    && c.message
                        .contains("infra.argocd.io/suspend: suspended with tfops suspend at")
            })
    })
    .await;
    let (code, _, _) = tfops(&alice, &["resume", "app", "-n", "team-a"]);
    assert_eq!(code, 0);
    assert!(
        !annotations(&op)
            .await
            .contains_key("infra.argocd.io/suspend")
    );
    let handled_before = t.status.as_ref().unwrap().last_handled_replan_at.clone();
    let (code, _, err) = tfops(&alice, &["replan", "app", "-n", "team-a"]);
    assert_eq!(code, 0, "{err}");
    let asked = annotations(&op).await;
    let replan = asked["infra.argocd.io/replan"].clone();
    assert_ne!(Some(&replan), handled_before.as_ref());
    // The replan is a request the controller handles: it records it as handled.
    op.wait_for("app", "handled the replan", 120, move |t| {
        t.status
            .as_ref()
            .and_then(|s| s.last_handled_replan_at.as_deref())
            == Some(replan.as_str())
    })
    .await;
    let (code, _, _) = tfops(&alice, &["reconcile", "app", "-n", "team-a"]);
    assert_eq!(code, 0);
    let asked = annotations(&op).await;
    assert!(asked.contains_key("infra.argocd.io/reconcile"));

    // Clear messages: a missing object, an identity without the role.
    let (code, _, err) = tfops(&alice, &["get", "nope", "-n", "team-a"]);
    assert_eq!(code, 2);
    assert!(err.contains("no Terraform object team-a/nope"), "{err}");
    let (_bob_dir, bob) = person(&op, "bob", false).await;
    let (code, _, err) = tfops(&bob, &["approve", "app", "-n", "team-a"]);
    assert_eq!(code, 2);
    assert!(err.contains("forbidden") && err.contains("bob"), "{err}");
}

/// `tfops logs -f`: started before the run, it waits, then prints Terraform's lines while the
/// apply is still going, and ends when the run's Pod does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn logs_follow_prints_a_run_while_it_goes() {
    use std::io::{BufRead, BufReader};
    let op = Operator::start().await;
    let (_alice_dir, alice) = person(&op, "alice", true).await;
    let config = format!(
        "{}\nresource \"terraform_data\" \"ticks\" {{\n  provisioner \"local-exec\" {{\n    command = \"for i in 1 2 3 4; do echo tick-$i; sleep 1; done\"\n  }}\n}}\n",
        support::operator::CONFIG
    );
    op.git.commit("infra", &[("main.tf", &config)]);
    // Suspended at first, so the CLI starts with no run under way.
    op.apply(&op.manifest("app", json!({"approvePlan": "auto", "suspend": true})));
    let mut child = Command::new(env!("CARGO_BIN_EXE_tfops-cli"))
        .args(["logs", "-f", "app", "-n", "team-a"])
        .env("KUBECONFIG", &alice)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut waiting = String::new();
    err.read_line(&mut waiting).unwrap();
    assert!(
        waiting.contains("team-a/app: no run under way; waiting"),
        "{waiting}"
    );
    op.apply(&op.manifest("app", json!({"approvePlan": "auto", "suspend": false})));
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    // The first tick arrives while the apply still runs (three more seconds of ticks).
    loop {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("no tick within 120 s: {seen:?}"));
        seen.push(line.clone());
        if line.contains("(local-exec): tick-1") {
            break;
        }
    }
    let now = op.terraforms().get("app").await.unwrap();
    assert!(
        !ready_with(&now, "TerraformAppliedSucceed"),
        "printed while the run was under way"
    );
    assert!(
        seen.iter().any(|l| l == "apply"),
        "a header per command: {seen:?}"
    );
    assert!(seen.iter().any(|l| l == "plan"), "{seen:?}");
    let status = child.wait().unwrap();
    seen.extend(rx.try_iter());
    assert!(status.success(), "{status:?}");
    assert!(
        seen.iter().any(|l| l.contains("tick-4"))
            && seen.iter().any(|l| l.contains("Apply complete!")),
        "{seen:?}"
    );
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(rest.contains("runner Pod has ended"), "{rest}");
    op.wait_for("app", "recorded the followed apply", 60, |t| {
        ready_with(t, "TerraformAppliedSucceed")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_without_the_crd_is_named_as_such() {
    let cluster = tfops_testcluster::TestCluster::start().await.unwrap();
    let (_dir, kubeconfig) = support::kubeconfig_file(&cluster);
    let (code, _, err) = tfops(&kubeconfig, &["get"]);
    assert_eq!(code, 2);
    assert!(err.contains("the CRD is not installed"), "{err}");
    let (code, _, err) = tfops(&kubeconfig, &["approve", "app"]);
    assert_eq!(code, 2);
    assert!(err.contains("the CRD is not installed"), "{err}");

    // Installed as the message says, with kubectl (a YAML 1.1 reader: a plain `no` would be
    // the boolean false and every object's default `forceUnlock` invalid).
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/crd/");
    let (ok, out, err) = support::kubectl(&kubeconfig, &["apply", "-k", crds.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    support::tfops_crds_established(&kubeconfig);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("app.yaml");
    std::fs::write(
        &file,
        "apiVersion: infra.argocd.io/v1alpha1\nkind: Terraform\nmetadata: {name: app, namespace: default}\nspec:\n  sourceRef: {kind: GitRepository, url: 'https://git.example.com/infra.git'}\n",
    )
    .unwrap();
    let (ok, out, err) = support::kubectl(&kubeconfig, &["apply", "-f", file.to_str().unwrap()]);
    assert!(ok, "the defaults are valid: {out}{err}");
    let (ok, out, _) = support::kubectl(
        &kubeconfig,
        &[
            "get",
            "terraform",
            "app",
            "-o",
            "jsonpath={.spec.tfstate.forceUnlock}",
        ],
    );
    assert!(ok && out == "no", "{out}");
    let (code, out, err) = tfops(&kubeconfig, &["get"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().nth(1).unwrap().starts_with("app "), "{out}");
}
