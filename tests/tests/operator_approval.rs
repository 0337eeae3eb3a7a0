//! Manual approval on the operator, end to end: a plan waits with its id in status and its
//! objects stored; an approval naming another (stale) plan is refused and says so; approval
//! through the annotation applies, as does approval through `spec.approvePlan`; an approved
//! apply reads as applying while it runs (approving again is refused) and its conditions change
//! when it ends; and a plan of more than 2 MiB is stored in chunks, read back whole, approved
//! and applied.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use support::operator::{CONFIG, Operator, applying, condition, pending, ready_with, slow};
use tfops_core::api::ObjectKey;
use tfops_core::conditions::{ConditionType, find};
use tfops_core::health::{HealthStatus, health};
use tfops_core::ports::PlanStore;
use tfops_kube::KubePlanStore;
use tfops_kube::actions::{ActionError, Actions};
use tfops_kube::meta::Owner;

async fn annotate(op: &Operator, name: &str, key: &str, value: &str) {
    op.terraforms()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
        )
        .await
        .unwrap();
}

fn waiting(t: &tfops_kube::Terraform) -> bool {
    ready_with(t, "TerraformPlannedWithChanges") && !pending(t).is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn approvals_by_annotation_and_by_spec_and_a_stale_one_refused() {
    let op = Operator::start().await;
    op.apply(&op.manifest("app", json!({})));
    let t = op
        .wait_for("app", "waited for approval", 120, waiting)
        .await;
    let first = pending(&t);
    assert!(first.starts_with("plan-main-"), "{first}");
    assert!(
        t.status.as_ref().unwrap().last_applied_revision.is_none(),
        "nothing applied"
    );
    let stored = KubePlanStore::new(op.admin.clone(), Owner::None)
        .load(&ObjectKey::new("team-a", "app"), "default")
        .await
        .unwrap()
        .expect("the pending plan is stored");
    assert_eq!(stored.id, first);
    assert!(
        stored.shown.readable.contains("terraform_data.x"),
        "{}",
        stored.shown.readable
    );

    // A new commit: a new plan replaces the pending one.
    op.git
        .commit("infra", &[("main.tf", &CONFIG.replace("hello", "bonjour"))]);
    annotate(&op, "app", "infra.argocd.io/reconcile", "1").await;
    let first_ = first.clone();
    let t = op
        .wait_for("app", "planned the new commit", 120, move |t| {
            waiting(t) && pending(t) != first_
        })
        .await;
    let second = pending(&t);

    // Approving the first (stale) plan applies nothing and says why.
    op.approve("app", &first, "t1").await;
    let first_ = first.clone();
    let t = op
        .wait_for("app", "refused the stale approval", 120, move |t| {
            condition(t, "Ready").is_some_and(|(_, _, m)| {
                m.contains(&format!(
                    "approval {first_}@t1 does not match the pending plan"
                ))
            })
        })
        .await;
    assert!(t.status.as_ref().unwrap().last_applied_revision.is_none());

    // The right one, by annotation: applied.
    op.approve("app", &second, "t2").await;
    let t = op
        .wait_for("app", "applied the approved plan", 120, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    let status = t.status.clone().unwrap();
    assert_eq!(status.plan.last_applied, second);
    assert!(status.plan.pending.is_empty());

    // Another commit, approved through spec.approvePlan.
    op.git
        .commit("infra", &[("main.tf", &CONFIG.replace("hello", "hola"))]);
    annotate(&op, "app", "infra.argocd.io/reconcile", "2").await;
    let second_ = second.clone();
    let t = op
        .wait_for("app", "planned the third commit", 120, move |t| {
            waiting(t) && pending(t) != second_
        })
        .await;
    let third = pending(&t);
    op.apply(&op.manifest("app", json!({"approvePlan": third})));
    let third_ = third.clone();
    op.wait_for(
        "app",
        "applied the plan approved in the spec",
        120,
        move |t| {
            ready_with(t, "TerraformAppliedSucceed")
                && t.status
                    .as_ref()
                    .is_some_and(|s| s.plan.last_applied == third_)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_approved_apply_reads_as_applying_and_its_conditions_change_when_it_ends() {
    let op = Operator::start().await;
    op.git.commit("infra", &[("main.tf", &slow(15))]);
    op.apply(&op.manifest("app", json!({})));
    let t = op
        .wait_for("app", "waited for approval", 120, waiting)
        .await;
    let plan = pending(&t);
    let waiting_health = health(&t.to_object());
    assert_eq!(waiting_health.status, HealthStatus::Suspended);
    assert_eq!(
        waiting_health.message.matches("awaits approval").count(),
        1,
        "one sentence: {}",
        waiting_health.message
    );

    // Approved as `tfops approve` does; while it is applied, it says so.
    let key = ObjectKey::new("team-a", "app");
    let actions = Actions::new(op.admin.clone());
    actions.approve(&key, Some(&plan)).await.unwrap();
    applying(&op, "app").await;
    let t = op.terraforms().get("app").await.unwrap();
    let seen_applying = jiff::Timestamp::now();
    let status = t.status.clone().unwrap();
    let (ready, reason, message) = condition(&t, "Ready").unwrap();
    assert_eq!(
        (ready.as_str(), reason.as_str()),
        ("Unknown", "TerraformApplying")
    );
    assert!(
        message.starts_with(&format!("applying plan {plan} (+2 ~0 -0) at main@sha1:")),
        "{message}"
    );
    assert!(
        message.contains(", approved with the infra.argocd.io/approve annotation at "),
        "{message}"
    );
    let (reconciling, _, doing) = condition(&t, "Reconciling").unwrap();
    assert_eq!(reconciling, "True");
    assert!(
        doing.starts_with(&format!("applying plan {plan}")),
        "{doing}"
    );
    assert_eq!(status.applying(), Some(plan.as_str()));
    let h = health(&t.to_object());
    assert_eq!((h.status, h.message), (HealthStatus::Progressing, message));
    println!("during the apply: Ready Unknown TerraformApplying, Argo CD Progressing");

    // Approving again meanwhile is refused, and writes nothing.
    let e = actions.approve(&key, None).await.unwrap_err();
    assert!(
        matches!(&e, ActionError::Applying { plan: p, .. } if *p == plan),
        "{e}"
    );
    println!("tfops approve during the apply: {e}");
    let again = op.terraforms().get("app").await.unwrap();
    assert_eq!(
        again.metadata.annotations, t.metadata.annotations,
        "nothing written"
    );

    // When it ends: Ready and Apply changed then, not when the run started.
    let started = status.active_run.as_ref().unwrap().started_at;
    let t = op
        .wait_for("app", "applied the approved plan", 120, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    let done = t.status.unwrap();
    assert_eq!(done.plan.last_applied, plan);
    let ready = find(&done.conditions, ConditionType::Ready).unwrap();
    let apply = find(&done.conditions, ConditionType::Apply).unwrap();
    let sleep = jiff::SignedDuration::from_secs(15);
    assert!(
        apply.last_transition_time >= started + sleep,
        "Apply changed at {} though the apply started at {started} and slept 15 s",
        apply.last_transition_time
    );
    assert!(ready.last_transition_time >= apply.last_transition_time);
    assert!(
        ready.last_transition_time > seen_applying,
        "Ready changed after it was seen applying"
    );
    assert!(find(&done.conditions, ConditionType::Reconciling).is_none());
    assert_eq!(done.applying(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_plan_over_2_mib_is_stored_read_back_approved_and_applied() {
    let op = Operator::start().await;
    // About 3 MB of base64 that the plan carries (and its show, and later the state).
    let big = r#"resource "terraform_data" "big" {
  input = join("", [for i in range(1000) : join("", [for j in range(70) : base64sha256("${i}-${j}")])])
}
"#;
    op.git.commit("infra", &[("big.tf", big)]);
    op.apply(&op.manifest("big", json!({})));
    let t = op
        .wait_for("big", "waited for approval", 240, waiting)
        .await;
    let id = pending(&t);
    let stored = KubePlanStore::new(op.admin.clone(), Owner::None)
        .load(&ObjectKey::new("team-a", "big"), "default")
        .await
        .unwrap()
        .expect("stored");
    assert!(
        stored.binary.len() > 2 << 20,
        "the binary plan is {} bytes",
        stored.binary.len()
    );
    assert!(stored.binary.starts_with(b"PK"), "a whole plan file");
    let secrets = Api::<Secret>::namespaced(op.admin.clone(), "team-a")
        .list(&ListParams::default().labels("infra.argocd.io/plan-part=binary"))
        .await
        .unwrap()
        .items;
    assert!(secrets.len() >= 3, "{} plan Secrets", secrets.len());
    let maps = Api::<ConfigMap>::namespaced(op.admin.clone(), "team-a")
        .list(&ListParams::default().labels("infra.argocd.io/plan-part=readable"))
        .await
        .unwrap()
        .items;
    assert!(maps.len() >= 2, "{} readable ConfigMaps", maps.len());
    op.approve("big", &id, "go").await;
    let t = op
        .wait_for("big", "applied the big plan", 240, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    assert_eq!(t.status.unwrap().plan.last_applied, id);
}
