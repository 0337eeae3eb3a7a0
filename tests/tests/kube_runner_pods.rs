//! Runner Pods through tfops-kube's runner port, on the test cluster with its node agent, the
//! real runner and Terraform: a whole run in a hardened runner Pod (docs/security.md), plans and outputs
//! written by the runner as its ServiceAccount, the Pod gone afterwards; a kept Pod reused
//! and replaced once the certificate changes; a new session waiting for a command an earlier
//! one left running; a Pod left behind ended, but never a busy one; and every way a Pod fails
//! ending in its reason
//! within a bounded time: never Ready, an image that cannot run, no ServiceAccount, a quota,
//! OOM-killed mid-apply.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::json;
use tfops_core::api::{RunnerRole, TerraformObject};
use tfops_core::ports::{
    Artifact, OutputsRequest, PlanKind, PlanRequest, PlanToStore, PortError, RunnerPort,
    SetupRequest,
};
use tfops_kube::runner::pki::{ControllerPki, Validity};
use tfops_kube::{KubeRunnerPort, RunnerSettings};

struct World {
    cluster: tfops_testcluster::TestCluster,
    client: kube::Client,
    pki: Arc<ControllerPki>,
    _root: tempfile::TempDir,
}

async fn world() -> World {
    let (cluster, root) = support::cluster_with_node().await;
    let client = support::client(&cluster).await;
    support::terraform_crd_served(&client).await;
    support::namespace(&client, "tfops-system").await;
    support::namespace(&client, "team-a").await;
    Api::<ServiceAccount>::namespaced(client.clone(), "team-a")
        .create(
            &PostParams::default(),
            &support::from_json(json!({"metadata": {"name": "tf-runner"}})),
        )
        .await
        .unwrap();
    support::grant_runner(&client, "team-a", "tf-runner").await;
    let pki = ControllerPki::load_or_create(
        client.clone(),
        "tfops-system",
        "tfops-ca",
        Validity::default(),
    )
    .await
    .unwrap();
    World {
        cluster,
        client,
        pki: Arc::new(pki),
        _root: root,
    }
}

fn port(w: &World, timeout: Duration) -> KubeRunnerPort {
    let mut settings = RunnerSettings::new(&format!("{}:dev", support::RUNNER_IMAGE));
    settings.creation_timeout = timeout;
    KubeRunnerPort::new(w.client.clone(), w.pki.clone(), settings)
}

async fn object(w: &World, name: &str, spec: serde_json::Value) -> TerraformObject {
    support::terraform(&w.client, "team-a", name, spec)
        .await
        .to_object()
}

const CONFIG: &str = r#"
variable "greeting" {
  type = string
}
resource "terraform_data" "x" {
  input = var.greeting
}
output "greeting" {
  value = terraform_data.x.output
}
output "token" {
  value     = "s3cr3t"
  sensitive = true
}
"#;

fn setup(object: &TerraformObject, config: &str) -> SetupRequest {
    let tree = tempfile::tempdir().unwrap();
    std::fs::write(tree.path().join("main.tf"), config).unwrap();
    let mut data = Vec::new();
    let summary = tfops_core::source::build_archive(tree.path(), None, &mut data).unwrap();
    SetupRequest {
        object: object.clone(),
        artifact: Artifact {
            sha256: summary.sha256,
            data: Arc::new(data),
        },
        inputs: tfops_core::ports::ResolvedInputs {
            vars: [("greeting".to_string(), json!("hello"))].into(),
            ..Default::default()
        },
    }
}

fn normal() -> PlanRequest {
    PlanRequest {
        kind: PlanKind::Normal,
        targets: vec![],
        parallelism: 0,
    }
}

async fn gone(pods: &Api<Pod>, name: &str) {
    let cond = await_condition(pods.clone(), name, |p: Option<&Pod>| p.is_none());
    tokio::time::timeout(Duration::from_secs(30), cond)
        .await
        .expect("the runner Pod goes")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_run_in_a_runner_pod_that_writes_plans_and_outputs_itself() {
    let w = world().await;
    let port = port(&w, Duration::from_secs(60));
    let object = object(
        &w,
        "vpc",
        json!({"runner": {"podTemplate": {"metadata": {"labels": {"team": "a"}}}}}),
    )
    .await;
    let mut s = port.start(&object, RunnerRole::Plan).await.unwrap();
    assert_eq!(s.runner(), "vpc-tf-runner");
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), "team-a");
    let pod = pods.get("vpc-tf-runner").await.unwrap();
    let labels = pod.metadata.labels.clone().unwrap();
    assert_eq!(labels["app.kubernetes.io/name"], "tf-runner");
    assert_eq!(labels["team"], "a");
    assert_eq!(pod.metadata.owner_references.unwrap()[0].name, "vpc");

    s.setup(&setup(&object, CONFIG)).await.unwrap();
    s.init().await.unwrap();
    assert!(s.writes_for_object(), "a runner Pod writes for its object");
    s.select_workspace("default").await.unwrap();
    assert!(s.plan(&normal()).await.unwrap().has_changes);
    let shown = s.show().await.unwrap();
    s.save_plan(&PlanToStore {
        workspace: "default".into(),
        id: "plan-main-abc".into(),
        is_destroy: false,
        is_drift: false,
    })
    .await
    .unwrap();
    let secrets: Api<Secret> = Api::namespaced(w.client.clone(), "team-a");
    let plan = secrets.get("tfplan-default-vpc").await.unwrap();
    assert_eq!(
        plan.metadata.owner_references.unwrap()[0].uid,
        object.metadata.uid
    );
    let readable = Api::<ConfigMap>::namespaced(w.client.clone(), "team-a")
        .get("tfplan-default-vpc-readable")
        .await
        .unwrap();
    assert_eq!(readable.data.unwrap()["plan.txt"], shown.readable);

    s.apply("apply-1").await.unwrap();
    assert!(
        secrets
            .get_opt("tfstate-default-vpc")
            .await
            .unwrap()
            .is_some()
    );
    let target = support::from_json(json!({"name": "vpc-outputs"}));
    let outputs = s
        .write_outputs(&OutputsRequest {
            target: Some(target),
            ..OutputsRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(
        outputs["greeting"].value,
        serde_json::Value::Null,
        "values stay in the runner"
    );
    let written = secrets.get("vpc-outputs").await.unwrap();
    assert_eq!(written.data.unwrap()["greeting"].0, b"hello");
    s.cleanup().await.unwrap();
    gone(&pods, "vpc-tf-runner").await;
    // Every write in the namespace was allowed to the runner's identity.
    let refused: Vec<_> = w
        .cluster
        .audit()
        .into_iter()
        .filter(|a| a.code == 403)
        .collect();
    assert!(refused.is_empty(), "{refused:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_pod_is_reused_until_its_certificate_changes() {
    let w = world().await;
    let port = port(&w, Duration::from_secs(60));
    let object = object(&w, "kept", json!({"runner": {"alwaysCleanup": false}})).await;
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), "team-a");
    let mut first = port.start(&object, RunnerRole::Plan).await.unwrap();
    first.cleanup().await.unwrap();
    let uid = pods.get("kept-tf-runner").await.unwrap().metadata.uid;
    let mut second = port.start(&object, RunnerRole::Plan).await.unwrap();
    assert_eq!(
        pods.get("kept-tf-runner").await.unwrap().metadata.uid,
        uid,
        "reused"
    );
    second.cleanup().await.unwrap();
    // A new certificate (the Secret was removed, so a new one is issued): a fresh Pod.
    Api::<Secret>::namespaced(w.client.clone(), "team-a")
        .delete("terraform-runner.tls", &DeleteParams::default())
        .await
        .unwrap();
    let mut third = port.start(&object, RunnerRole::Plan).await.unwrap();
    let now = pods.get("kept-tf-runner").await.unwrap();
    assert_ne!(
        now.metadata.uid, uid,
        "replaced after the certificate changed"
    );
    third.cleanup().await.unwrap();
}

async fn start_error(port: &KubeRunnerPort, object: &TerraformObject) -> PortError {
    let started = tokio::time::timeout(
        Duration::from_secs(60),
        port.start(object, RunnerRole::Plan),
    )
    .await
    .expect("start ends in bounded time");
    match started {
        Err(e) => e,
        Ok(_) => panic!("the runner started"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_cannot_serve_fail_with_their_reason_and_are_not_left_behind() {
    let w = world().await;
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), "team-a");

    // Never Ready (no node takes it: cordoned): the creation timeout, with what the Pod was
    // doing.
    let quick = port(&w, Duration::from_secs(3));
    let stuck = object(&w, "stuck", json!({})).await;
    support::cordon(&w.client, true).await;
    match start_error(&quick, &stuck).await {
        PortError::Unavailable(m) => assert!(m.contains("did not become Ready within 3 s"), "{m}"),
        other => panic!("{other:?}"),
    }
    gone(&pods, "stuck-tf-runner").await;
    support::cordon(&w.client, false).await;

    // An image the node cannot run: at once, with the kubelet's reason.
    let port = port(&w, Duration::from_secs(60));
    let bad = object(
        &w,
        "bad",
        json!({"runner": {"image": "registry.example.com/nothing:1"}}),
    )
    .await;
    match start_error(&port, &bad).await {
        PortError::Unavailable(m) => assert!(m.contains("ErrImagePull"), "{m}"),
        other => panic!("{other:?}"),
    }
    gone(&pods, "bad-tf-runner").await;

    // No such ServiceAccount: the admission plugin refuses the Pod.
    let nosa = object(
        &w,
        "nosa",
        json!({"runner": {"serviceAccountName": "missing"}}),
    )
    .await;
    match start_error(&port, &nosa).await {
        PortError::NotFound(m) => assert!(m.contains("missing"), "{m}"),
        other => panic!("{other:?}"),
    }

    // A quota with no room for another Pod.
    support::quota(&w.client, "team-a", "pods", json!({"pods": "0"})).await;
    let over = object(&w, "over", json!({})).await;
    match start_error(&port, &over).await {
        PortError::QuotaExhausted(m) => assert_eq!(
            m,
            "the ResourceQuota pods in team-a allows no more Pods (used 0 of 0)"
        ),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_oom_killed_mid_apply_is_reported_at_once_with_its_reason() {
    let w = world().await;
    let port = port(&w, Duration::from_secs(60));
    // A memory limit on the runner container, and an apply that outgrows it once `gate` exists.
    let limit = json!({"runner": {"podTemplate": {"spec": {"resources": {"limits": {"memory": "512Mi"}}}}}});
    let object = object(&w, "slow", limit).await;
    let gate = tempfile::tempdir().unwrap();
    let gate = gate.path().join("go");
    let slow = format!(
        "{CONFIG}\nresource \"terraform_data\" \"slow\" {{\n  provisioner \"local-exec\" {{\n    command = \"while [ ! -e '{}' ]; do sleep 0.1; done; {}\"\n  }}\n}}\n",
        gate.display(),
        support::operator::GROW
    );
    let mut s = port.start(&object, RunnerRole::Plan).await.unwrap();
    s.setup(&setup(&object, &slow)).await.unwrap();
    s.init().await.unwrap();
    s.plan(&normal()).await.unwrap();
    let killer = {
        let client = w.client.clone();
        tokio::spawn(async move {
            // Once the apply holds the state lock, the apply outgrows the limit.
            let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
                Api::namespaced(client, "team-a");
            loop {
                if let Ok(Some(_)) = leases.get_opt("lock-tfstate-default-slow").await {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            std::fs::write(&gate, "").unwrap();
        })
    };
    let applied = tokio::time::timeout(Duration::from_secs(60), s.apply("apply-1"))
        .await
        .expect("a dead runner is noticed, not waited on");
    killer.await.unwrap();
    match applied {
        Err(PortError::Unavailable(m)) => {
            assert!(
                m.contains("runner Pod team-a/slow-tf-runner died: killed (OOMKilled: over its memory limit, exit code 137)"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
    // Its Terraform died with it: nothing is applying any more.
    s.cleanup().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), "team-a");
    gone(&pods, "slow-tf-runner").await;
}

/// Plans and starts an apply that takes `seconds` in the object's kept runner Pod, then drops
/// the session a second in, as a manager that stopped mid-run does: the apply goes on there.
async fn leave_an_apply_running(port: &KubeRunnerPort, object: &TerraformObject, seconds: u32) {
    let slow = format!(
        "{CONFIG}\nresource \"terraform_data\" \"slow\" {{\n  provisioner \"local-exec\" {{\n    command = \"sleep {seconds}\"\n  }}\n}}\n"
    );
    let mut first = port.start(object, RunnerRole::Plan).await.unwrap();
    first.setup(&setup(object, &slow)).await.unwrap();
    first.init().await.unwrap();
    first.select_workspace("default").await.unwrap();
    assert!(first.plan(&normal()).await.unwrap().has_changes);
    let apply = tokio::spawn(async move {
        let _ = tokio::time::timeout(Duration::from_secs(1), first.apply("apply-1")).await;
    });
    apply.await.unwrap();
}

/// A new session on a kept Pod that still runs a command of an earlier one (a manager that
/// stopped, or lost the object to another shard, mid-run) waits for that command to end,
/// never running beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_waits_for_the_command_an_earlier_one_left_running() {
    let w = world().await;
    let port = port(&w, Duration::from_secs(60));
    let object = object(&w, "busy", json!({"runner": {"alwaysCleanup": false}})).await;
    leave_an_apply_running(&port, &object, 4).await;
    let secrets: Api<Secret> = Api::namespaced(w.client.clone(), "team-a");
    let state_has_slow = || async {
        secrets
            .get_opt("tfstate-default-busy")
            .await
            .unwrap()
            .and_then(|s| s.data)
            .and_then(|d| d.get("tfstate").cloned())
            .is_some_and(|gz| {
                let mut text = String::new();
                std::io::Read::read_to_string(
                    &mut flate2::read::GzDecoder::new(gz.0.as_slice()),
                    &mut text,
                )
                .unwrap();
                text.contains("\"slow\"")
            })
    };
    assert!(!state_has_slow().await, "the apply is still running");
    let mut second = port.start(&object, RunnerRole::Plan).await.unwrap();
    assert!(
        state_has_slow().await,
        "the new session started only after the earlier apply ended"
    );
    second.cleanup().await.unwrap();
}

/// A suspended object's runner Pods left by runs that ended elsewhere are ended
/// ([`RunnerPort::release`]), but never one whose runner still runs a command: that one is
/// asked again later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_ends_a_runner_pod_left_behind_but_never_a_busy_one() {
    let w = world().await;
    let port = port(&w, Duration::from_secs(60));
    let object = object(&w, "left", json!({"runner": {"alwaysCleanup": false}})).await;
    leave_an_apply_running(&port, &object, 6).await;
    let busy = port.release(&object).await;
    assert!(
        matches!(&busy, Err(PortError::Unavailable(m)) if m.contains("still runs")),
        "{busy:?}"
    );
    let pods: Api<Pod> = Api::namespaced(w.client.clone(), "team-a");
    let live = || async {
        pods.get_opt("left-tf-runner")
            .await
            .unwrap()
            .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
    };
    assert!(live().await, "a busy runner is kept");
    // Once its apply has ended, the Pod is ended; then there is nothing left to end.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match port.release(&object).await {
            Ok(()) => break,
            Err(PortError::Unavailable(m)) => {
                assert!(std::time::Instant::now() < deadline, "still busy: {m}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(!live().await, "the left runner Pod was ended");
    port.release(&object).await.unwrap();
}
