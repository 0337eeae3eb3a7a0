//! tfops in a real Argo CD, end to end: Argo CD's controller, repo-server and API server (built
//! from its published module) run against the test cluster with `config/argocd` installed. An
//! `Application` syncs a `Terraform` object from Git; Argo CD judges it with our health script
//! (Suspended with our message while its plan waits), offers our actions, runs `approve` for the
//! admin through its CLI and refuses it to a read-only user by its RBAC; the object turns
//! Healthy when applied and Degraded when its plan fails, and the Application's health follows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use serde_json::{Value, json};
use support::argocd::ArgoCd;
use support::operator::{Operator, pending, ready_with, slow};

/// The `(status, message)` Argo CD's resource tree gives Terraform `name`.
fn node_health(argo: &ArgoCd, token: &str, name: &str) -> Option<(String, String)> {
    let tree = argo.get(token, "/api/v1/applications/infra/resource-tree")?;
    let node = tree["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["kind"] == "Terraform" && n["name"] == name)?
        .clone();
    Some((
        node["health"]["status"].as_str()?.to_string(),
        node["health"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    ))
}

/// The Application's own health and sync status.
fn app_status(argo: &ArgoCd, token: &str) -> (String, String) {
    let app = argo
        .get(token, "/api/v1/applications/infra")
        .unwrap_or(Value::Null);
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    (
        s(&app["status"]["health"]["status"]),
        s(&app["status"]["sync"]["status"]),
    )
}

/// What tfops itself says of the live object (`tfops_core::health`).
async fn our_health(op: &Operator, name: &str) -> (String, String) {
    let t = op.terraforms().get(name).await.unwrap();
    let h = tfops_core::health::health(&t.to_object());
    (format!("{:?}", h.status), h.message)
}

fn action(argo: &ArgoCd, config: &std::path::Path, name: &str) -> (bool, String, String) {
    argo.cli(
        config,
        &[
            "app",
            "actions",
            "run",
            "infra",
            name,
            "--kind",
            "Terraform",
            "--group",
            "infra.argocd.io",
            "--resource-name",
            "infra",
            "--namespace",
            "team-a",
        ],
    )
}

/// `argocd app actions list` for the Terraform object: what it printed, and its approve line.
fn approve_offered(argo: &ArgoCd, config: &std::path::Path) -> (String, String) {
    let (ok, out, err) = argo.cli(
        config,
        &[
            "app",
            "actions",
            "list",
            "infra",
            "--kind",
            "Terraform",
            "--group",
            "infra.argocd.io",
            "--resource-name",
            "infra",
            "--namespace",
            "team-a",
        ],
    );
    assert!(ok, "{out}{err}");
    let approve = out
        .lines()
        .find(|l| l.contains("approve"))
        .unwrap_or_default()
        .to_string();
    (out, approve)
}

/// What the `infra` Application's sync operation says: its phase and message.
fn operation(argo: &ArgoCd, token: &str) -> (String, String) {
    let app = argo
        .get(token, "/api/v1/applications/infra")
        .unwrap_or(Value::Null);
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let op = &app["status"]["operationState"];
    (s(&op["phase"]), s(&op["message"]))
}

/// The ConfigMap of sync wave 1, which reads what the Terraform object (wave 0) made: the
/// pattern docs/argocd.md, "Sync waves", describes.
const LATER_WAVE: &str = r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: reads-outputs
  namespace: team-a
  annotations:
    argocd.argoproj.io/sync-wave: "1"
data:
  note: applied once the Terraform object of wave 0 is Healthy
"#;

async fn later_wave_exists(op: &Operator) -> bool {
    kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(op.admin.clone(), "team-a")
        .get_opt("reads-outputs")
        .await
        .unwrap()
        .is_some()
}

/// The `infra` Application synced from Git (a Terraform object needing approval in wave 0, a
/// ConfigMap in wave 1) and its plan waiting; Argo CD shows the object Suspended with tfops'
/// own message, and its sync operation waits before wave 1 for as long. The admin's token and
/// the pending plan.
async fn waiting_in_argo_cd(op: &Operator, argo: &mut ArgoCd) -> (String, String) {
    op.git.commit(
        "apps",
        &[
            ("terraform.yaml", &op.manifest("infra", json!({}))),
            ("later.yaml", LATER_WAVE),
        ],
    );
    op.apply(
        &serde_yaml_ng::to_string(&json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "infra", "namespace": "argocd"},
            "spec": {
                "project": "default",
                "source": {"repoURL": op.git.url("apps"), "targetRevision": "HEAD", "path": "."},
                "destination": {"server": "https://kubernetes.default.svc", "namespace": "team-a"},
                "syncPolicy": {"automated": {}},
            },
        }))
        .unwrap(),
    );
    let admin = argo.token("admin");

    // Argo CD applies wave 0; tfops plans; Argo CD shows it Suspended with our message.
    argo.wait_for("the sync operation to start", 180, |a| {
        !operation(a, &admin).0.is_empty()
    });
    let t = op
        .wait_for("infra", "waited for approval", 240, |t| {
            ready_with(t, "TerraformPlannedWithChanges") && !pending(t).is_empty()
        })
        .await;
    let plan = pending(&t);
    let ours = our_health(op, "infra").await;
    assert_eq!(ours.0, "Suspended");
    argo.wait_for("the object Suspended in Argo CD", 120, |a| {
        node_health(a, &admin, "infra").as_ref() == Some(&ours)
    });
    assert!(ours.1.contains(&plan), "{ours:?}");
    println!("Argo CD shows the object {}: {}", ours.0, ours.1);
    // The later wave waits while the plan awaits approval: the operation stays Running,
    // waiting for the Terraform object's health, and wave 1 is not applied.
    argo.wait_for("the sync waiting for the Terraform object", 120, |a| {
        let (phase, message) = operation(a, &admin);
        phase == "Running" && message.contains("infra.argocd.io/Terraform/infra")
    });
    assert!(
        !later_wave_exists(op).await,
        "wave 1 applied before approval"
    );
    println!(
        "while the plan awaits approval: operation {:?}, Application {:?}",
        operation(argo, &admin),
        app_status(argo, &admin)
    );
    (admin, plan)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn argo_cd_syncs_judges_approves_and_refuses_as_tfops_says() {
    let op = Operator::start().await;
    // An apply that takes a while, to see what Argo CD shows meanwhile (long enough for an
    // Argo CD slowed by a busy machine to catch up: in a CI run of two Argo CDs at once on two
    // cores, 20 s were not).
    op.git.commit("infra", &[("main.tf", &slow(60))]);
    let mut argo = ArgoCd::start(&op).await;
    let (admin, plan) = waiting_in_argo_cd(&op, &mut argo).await;

    // Discovery, as Argo CD offers the actions: approve is enabled now.
    let admin_cli = argo.login("admin");
    let (out, approve_line) = approve_offered(&argo, &admin_cli);
    assert!(
        approve_line.contains("false"),
        "approve offered and enabled:\n{out}"
    );
    println!("argocd app actions list:\n{out}");

    // A read-only user: Argo CD's RBAC refuses the action; nothing changes.
    let viewer = argo.login("viewer");
    let (ok, out, err) = action(&argo, &viewer, "approve");
    assert!(!ok, "the viewer's approve ran: {out}");
    assert!(err.contains("permission denied"), "{err}");
    println!("the viewer's approve: {}", err.trim());
    let t = op.terraforms().get("infra").await.unwrap();
    assert!(
        !t.metadata
            .annotations
            .unwrap_or_default()
            .contains_key("infra.argocd.io/approve"),
        "no approval written"
    );

    // The admin approves through Argo CD; while tfops applies that plan Argo CD shows it
    // Progressing, applying, and approving again is neither offered nor taken.
    let (ok, out, err) = action(&argo, &admin_cli, "approve");
    assert!(
        ok,
        "argocd app actions run approve: {out}{err}\n{}",
        argo.logs()
    );
    support::operator::applying(&op, "infra").await;
    let ours = our_health(&op, "infra").await;
    assert_eq!(ours.0, "Progressing", "{ours:?}");
    assert!(
        ours.1.starts_with(&format!("applying plan {plan} (")),
        "{ours:?}"
    );
    let mut shown = None;
    argo.wait_for("the object Progressing, applying, in Argo CD", 50, |a| {
        let now = node_health(a, &admin, "infra");
        if now != shown {
            println!("Argo CD shows {now:?}");
            shown = now.clone();
        }
        // Either TerraformApplying message: Argo CD refreshes a node whose health status
        // stays Progressing only at its next refresh, so it may still show the re-plan's
        // ("plan X was approved …: making it again …") while the apply runs (seen in a CI run).
        now.is_some_and(|(s, m)| {
            s == "Progressing"
                && (m.starts_with(&format!("applying plan {plan}"))
                    || m.starts_with(&format!("plan {plan} was approved with")))
        })
    });
    println!(
        "Argo CD during the apply: {:?}",
        node_health(&argo, &admin, "infra")
    );
    let (out, approve_line) = approve_offered(&argo, &admin_cli);
    assert!(
        approve_line.contains("true"),
        "approve disabled while applying:\n{out}"
    );
    let (ok, out, err) = action(&argo, &admin_cli, "approve");
    assert!(!ok, "a second approve ran during the apply: {out}");
    assert!(
        err.contains(&format!(
            "plan {plan} is already approved and being applied"
        )),
        "{err}"
    );
    println!("approve during the apply: {}", err.trim());
    assert!(
        !later_wave_exists(&op).await,
        "wave 1 applied during the apply"
    );
    let t = op
        .wait_for("infra", "applied", 240, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    let status = t.status.as_ref().unwrap();
    assert_eq!(
        status.plan.last_applied, plan,
        "the approved plan is the one applied"
    );
    let ours = our_health(&op, "infra").await;
    assert_eq!(ours.0, "Healthy");
    argo.wait_for("the object Healthy in Argo CD", 120, |a| {
        node_health(a, &admin, "infra").as_ref() == Some(&ours)
    });
    argo.wait_for("the Application Healthy", 60, |a| {
        app_status(a, &admin).0 == "Healthy"
    });
    // Healthy lets the sync go on: wave 1 is applied and the operation succeeds.
    argo.wait_for("the sync to finish with wave 1", 120, |a| {
        operation(a, &admin).0 == "Succeeded"
    });
    assert!(later_wave_exists(&op).await, "wave 1 applied once Healthy");

    // Suspend through Argo CD: an annotation (the spec Git owns stays), Suspended with the
    // reason; resume removes it.
    let (ok, out, err) = action(&argo, &admin_cli, "suspend");
    assert!(ok, "argocd app actions run suspend: {out}{err}");
    argo.wait_for("the object Suspended by the suspend action", 120, |a| {
        node_health(a, &admin, "infra").is_some_and(|(s, m)| {
            s == "Suspended" && m.contains("infra.argocd.io/suspend: suspended through Argo CD at")
        })
    });
    let t = op.terraforms().get("infra").await.unwrap();
    assert!(!t.spec.suspend, "the spec is Git's");
    println!(
        "after the suspend action: {:?}",
        node_health(&argo, &admin, "infra").unwrap()
    );
    let (ok, out, err) = action(&argo, &admin_cli, "resume");
    assert!(ok, "argocd app actions run resume: {out}{err}");
    argo.wait_for("the object Healthy again after resume", 120, |a| {
        node_health(a, &admin, "infra").is_some_and(|(s, _)| s == "Healthy")
    });

    // A configuration whose plan fails, and a reconcile through Argo CD: Degraded.
    op.git.commit(
        "infra",
        &[(
            "main.tf",
            "resource \"terraform_data\" \"x\" {\n  input = var.missing\n}\n",
        )],
    );
    let (ok, out, err) = action(&argo, &admin_cli, "reconcile");
    assert!(ok, "argocd app actions run reconcile: {out}{err}");
    op.wait_for("infra", "failed to plan", 240, |t| {
        t.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| {
                c.status == tfops_core::conditions::ConditionStatus::False
                    && c.reason.contains("Plan")
            })
    })
    .await;
    let ours = our_health(&op, "infra").await;
    assert_eq!(ours.0, "Degraded", "{ours:?}");
    argo.wait_for("the object Degraded in Argo CD", 120, |a| {
        node_health(a, &admin, "infra").is_some_and(|(s, _)| s == "Degraded")
    });
    let shown = node_health(&argo, &admin, "infra").unwrap();
    println!("Argo CD shows the object {}: {}", shown.0, shown.1);
    assert!(
        shown.1.contains("var.missing") || shown.1 == ours.1,
        "{shown:?} / {ours:?}"
    );
    argo.wait_for("the Application Degraded", 60, |a| {
        app_status(a, &admin).0 == "Degraded"
    });
}

/// The extension as Argo CD's extension installer lays it out (`ui/extension`'s build).
fn extension_file() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../ui/extension/dist/resources/tfops/extension-tfops.js")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_terraform_tab_served_by_argocd_server_reads_and_approves_through_its_api() {
    let extension = extension_file();
    assert!(
        extension.is_file(),
        "{} is missing: `npm ci && npm run build` in ui/extension (scripts/test does)",
        extension.display()
    );
    let op = Operator::start().await;
    let mut argo = ArgoCd::start(&op).await;
    let installed = argo.extensions.join("resources/tfops");
    std::fs::create_dir_all(&installed).unwrap();
    std::fs::copy(&extension, installed.join("extension-tfops.js")).unwrap();
    let (_, plan) = waiting_in_argo_cd(&op, &mut argo).await;
    // argocd-server wraps each extension file it finds into /extensions.js.
    let served = argo
        .curl(&["-fsS", &format!("http://{}/extensions.js", argo.server)])
        .unwrap();
    assert!(served.contains("extension-tfops.js"), "{served:.300}");
    assert!(
        served.contains("registerResourceExtension"),
        "{served:.300}"
    );

    let ui = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../ui/extension");
    let mut node = std::process::Command::new("node");
    node.current_dir(&ui)
        .args(["--test", "test/argocd-server.test.mjs"])
        .env("TFOPS_ARGOCD_URL", format!("http://{}", argo.server))
        .env("TFOPS_ARGOCD_STATIC", argo.static_assets())
        .env("TFOPS_ARGOCD_PASSWORD", support::argocd::PASSWORD)
        .env("TFOPS_ARGOCD_PLAN", &plan);
    let out = node.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert!(
        out.status.success(),
        "the browser test failed:\n{text}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        argo.logs()
    );
    // What the admin's click approved is what tfops applied.
    let t = op.terraforms().get("infra").await.unwrap();
    assert!(ready_with(&t, "TerraformAppliedSucceed"));
    assert_eq!(t.status.unwrap().plan.last_applied, plan);
}
