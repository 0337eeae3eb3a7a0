//! A runner Pod on the real API server and the node agent, with the real runner binary and the
//! real Terraform: a runner Pod created through the API becomes a process on its own loopback
//! address, Ready when its port accepts, reachable over mTLS with the certificates of its
//! Secret volume; a whole run through it writes Terraform's state with the Pod's
//! ServiceAccount (its projected token, read by in-cluster configuration); deletion stops it
//! gracefully; faults as they happen in a cluster (the process killed, no node to take the
//! Pod, an image not runnable, a missing Secret) end as a kubelet reports them;
//! ResourceQuota admission refuses a Pod over quota with the real message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Pod, ResourceQuota, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, LogParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::json;
use tfops_runner::client::{ClientTls, RunnerClient, Session};
use tfops_runner::tls::{Pki, runner_server_name};
use tfops_testcluster::TestCluster;

mod support;

const IMAGE: &str = support::RUNNER_IMAGE;

struct Fixture {
    cluster: TestCluster,
    client: kube::Client,
    pki: Pki,
    _root: tempfile::TempDir,
}

async fn fixture() -> Fixture {
    let (cluster, root) = support::cluster_with_node().await;
    let client = support::client(&cluster).await;
    support::namespace(&client, "team-a").await;
    let pp = PostParams::default();
    Api::<ServiceAccount>::namespaced(client.clone(), "team-a")
        .create(
            &pp,
            &support::from_json(json!({"metadata": {"name": "tf-runner"}})),
        )
        .await
        .unwrap();
    let pki = Pki::new(
        SystemTime::now(),
        Duration::from_secs(30 * 86_400),
        Duration::from_secs(7 * 86_400),
        Duration::from_secs(3 * 86_400),
    )
    .unwrap();
    let s = pki.runner_secret("team-a", SystemTime::now()).unwrap();
    Api::<Secret>::namespaced(client.clone(), "team-a")
        .create(
            &pp,
            &support::from_json(json!({
                "metadata": {"name": "terraform-runner.tls"},
                "stringData": {"tls.crt": s.tls_crt, "tls.key": s.tls_key, "ca.crt": s.ca_crt},
            })),
        )
        .await
        .unwrap();
    Fixture {
        cluster,
        client,
        pki,
        _root: root,
    }
}

/// A runner Pod as the controller will shape it (the parts the node agent reads).
fn runner_pod(name: &str, image: &str) -> Pod {
    support::from_json(json!({
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "tf-runner"}},
        "spec": {
            "serviceAccountName": "tf-runner",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 10,
            "containers": [{
                "name": "runner",
                "image": format!("{image}:dev"),
                "args": ["--grpc-port", "30000", "--tls-dir", "/run/tfops/tls"],
                "ports": [{"name": "grpc", "containerPort": 30000}],
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "env": [
                    {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                    {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                ],
                "volumeMounts": [
                    {"name": "tls", "mountPath": "/run/tfops/tls", "readOnly": true},
                    {"name": "tmp", "mountPath": "/tmp"},
                    {"name": "home", "mountPath": "/home/runner"},
                ],
            }],
            "volumes": [
                {"name": "tls", "secret": {"secretName": "terraform-runner.tls"}},
                {"name": "tmp", "emptyDir": {}},
                {"name": "home", "emptyDir": {}},
            ],
        },
    }))
}

async fn wait_for(
    pods: &Api<Pod>,
    name: &str,
    what: &str,
    test: impl Fn(&Pod) -> bool + Send + 'static,
) -> Pod {
    let cond = move |p: Option<&Pod>| p.is_some_and(&test);
    match tokio::time::timeout(
        Duration::from_secs(60),
        await_condition(pods.clone(), name, cond),
    )
    .await
    {
        Ok(p) => p.unwrap().unwrap(),
        Err(_) => {
            let now = pods
                .get(name)
                .await
                .ok()
                .map(|p| serde_json::to_string(&p.status).unwrap());
            let log = pods.logs(name, &LogParams::default()).await.ok();
            panic!("{name} never {what}: status {now:?}, log {log:?}")
        }
    }
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn terminated(p: &Pod) -> Option<k8s_openapi::api::core::v1::ContainerStateTerminated> {
    p.status.as_ref()?.container_statuses.as_ref()?[0]
        .state
        .as_ref()?
        .terminated
        .clone()
}

fn client_tls(pki: &Pki) -> ClientTls {
    let c = pki.client(SystemTime::now()).unwrap();
    ClientTls {
        ca_bundle: pki.trust_bundle(),
        cert: c.cert,
        key: c.key,
        server_name: runner_server_name("team-a"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_pod_runs_a_whole_run_as_its_service_account() {
    let f = fixture().await;
    let pp = PostParams::default();
    // The state backend's RBAC for the runner's ServiceAccount (the notes' list).
    support::grant_state_backend(&f.client, "team-a", "tf-runner").await;
    let pods: Api<Pod> = Api::namespaced(f.client.clone(), "team-a");
    pods.create(&pp, &runner_pod("vpc-tf-runner", IMAGE))
        .await
        .unwrap();
    let pod = wait_for(&pods, "vpc-tf-runner", "became Ready", ready).await;
    let status = pod.status.clone().unwrap();
    let ip = status.pod_ip.clone().unwrap();
    assert!(ip.starts_with("127.") && ip != "127.0.0.1", "{ip}");
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(
        pod.spec.as_ref().unwrap().node_name.as_deref(),
        Some("node-1")
    );

    // The controller's way in: Pod IP, port 30000, mTLS with the Secret's certificates.
    let client = RunnerClient::connect(&format!("https://{ip}:30000"), &client_tls(&f.pki))
        .await
        .unwrap();
    let mut session = Session::start(client, "vpc-1").await.unwrap();
    let tree = tempfile::tempdir().unwrap();
    std::fs::write(
        tree.path().join("main.tf"),
        "resource \"terraform_data\" \"x\" {\n  input = \"hello\"\n}\noutput \"x\" {\n  value = terraform_data.x.output\n}\n",
    )
    .unwrap();
    let mut data = Vec::new();
    let summary = tfops_core::source::build_archive(tree.path(), None, &mut data).unwrap();
    let object: tfops_core::api::TerraformObject = support::from_json(json!({
        "metadata": {"name": "vpc", "namespace": "team-a", "generation": 1},
        "spec": {"sourceRef": {"kind": "Local", "url": "."}, "path": "."},
    }));
    use tfops_core::ports::RunnerSession;
    session
        .setup(&tfops_core::ports::SetupRequest {
            object,
            artifact: tfops_core::ports::Artifact {
                sha256: summary.sha256,
                data: Arc::new(data),
            },
            inputs: Default::default(),
        })
        .await
        .unwrap();
    session.init().await.unwrap();
    session.select_workspace("default").await.unwrap();
    let plan = session
        .plan(&tfops_core::ports::PlanRequest {
            kind: tfops_core::ports::PlanKind::Normal,
            targets: vec![],
            parallelism: 0,
        })
        .await
        .unwrap();
    assert!(plan.has_changes);
    session.apply("apply-1").await.unwrap();
    // Terraform's kubernetes backend wrote the state as the Pod's ServiceAccount.
    let state = Api::<Secret>::namespaced(f.client.clone(), "team-a")
        .get("tfstate-default-vpc")
        .await
        .unwrap();
    assert_eq!(state.metadata.labels.unwrap()["tfstateSecretSuffix"], "vpc");
    let refused: Vec<_> = f
        .cluster
        .audit()
        .into_iter()
        .filter(|a| a.code == 403)
        .collect();
    assert!(refused.is_empty(), "{refused:?}");
    let log = pods
        .logs("vpc-tf-runner", &LogParams::default())
        .await
        .unwrap();
    let serving = log
        .lines()
        .find(|l| l.contains("serving"))
        .unwrap_or_default();
    assert!(
        serving.contains("pod=vpc-tf-runner") && serving.contains("namespace=team-a"),
        "the runner's log line names its Pod: {log}"
    );
    drop(session);

    // Deletion: SIGTERM, the runner stops by itself, the Pod goes.
    let uid = pod.metadata.uid.clone().unwrap();
    // (The answer is the Pod, marked for deletion: it waits for its process to stop.)
    let answer = pods
        .delete("vpc-tf-runner", &DeleteParams::default())
        .await
        .unwrap();
    let marked = answer
        .left()
        .expect("a graceful delete answers with the Pod");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(10));
    let gone = await_condition(pods.clone(), "vpc-tf-runner", conditions::is_deleted(&uid));
    tokio::time::timeout(Duration::from_secs(20), gone)
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_as_in_a_cluster_end_as_a_kubelet_reports_them() {
    let f = fixture().await;
    let node = f.cluster.node().unwrap();
    let pods: Api<Pod> = Api::namespaced(f.client.clone(), "team-a");
    let pp = PostParams::default();

    // Killed mid-run: terminated with 137 and the log's tail as message, phase Failed.
    pods.create(&pp, &runner_pod("killed", IMAGE))
        .await
        .unwrap();
    wait_for(&pods, "killed", "became Ready", ready).await;
    assert!(node.kill("team-a", "killed"));
    let p = wait_for(&pods, "killed", "terminated", |p| terminated(p).is_some()).await;
    let t = terminated(&p).unwrap();
    assert_eq!((t.exit_code, t.reason.as_deref()), (137, Some("Error")));
    assert!(t.message.unwrap_or_default().contains("serving"));
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Failed"));

    // No node takes Pods (cordoned): Pending, Unschedulable, never Ready; scheduled and Ready
    // once uncordoned.
    support::cordon(&f.client, true).await;
    pods.create(&pp, &runner_pod("stuck", IMAGE)).await.unwrap();
    let p = wait_for(&pods, "stuck", "was found unschedulable", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.reason.as_deref() == Some("Unschedulable"))
            })
    })
    .await;
    assert!(!ready(&p));
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
    support::cordon(&f.client, false).await;
    wait_for(&pods, "stuck", "became Ready", ready).await;

    // An image that does not exist here: waiting to be pulled, never running.
    pods.create(&pp, &runner_pod("noimage", "registry.invalid/nothing"))
        .await
        .unwrap();
    let p = wait_for(&pods, "noimage", "reported the pull", |p| {
        waiting_reason(p).as_deref() == Some("ImagePullBackOff")
    })
    .await;
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));

    // A missing Secret the environment needs: CreateContainerConfigError naming it.
    let mut pod = runner_pod("nosecret", IMAGE);
    pod.spec.as_mut().unwrap().containers[0]
        .env
        .as_mut()
        .unwrap()
        .push(support::from_json(json!({"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}})));
    pods.create(&pp, &pod).await.unwrap();
    let p = wait_for(&pods, "nosecret", "reported the missing secret", |p| {
        waiting_reason(p).as_deref() == Some("CreateContainerConfigError")
    })
    .await;
    let message = p.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap()
        .message
        .unwrap();
    assert_eq!(message, "secret \"creds\" not found");
}

fn waiting_reason(p: &Pod) -> Option<String> {
    p.status.as_ref()?.container_statuses.as_ref()?[0]
        .state
        .as_ref()?
        .waiting
        .as_ref()?
        .reason
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_quota_refuses_a_pod_over_it() {
    let f = fixture().await;
    let pp = PostParams::default();
    support::quota(
        &f.client,
        "team-a",
        "runners",
        json!({"pods": "1", "limits.memory": "1Gi"}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(f.client.clone(), "team-a");
    // Limits are quota'd, so a Pod must state them.
    let e = pods
        .create(&pp, &runner_pod("bare", IMAGE))
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("failed quota: runners: must specify limits.memory"),
        "{e}"
    );
    let with_limits = |name: &str| {
        let mut p = runner_pod(name, IMAGE);
        p.spec.as_mut().unwrap().containers[0].resources =
            Some(support::from_json(json!({"limits": {"memory": "512Mi"}})));
        p
    };
    pods.create(&pp, &with_limits("first")).await.unwrap();
    let e = pods.create(&pp, &with_limits("second")).await.unwrap_err();
    let kube::Error::Api(s) = e else {
        panic!("not an API error")
    };
    assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        s.message,
        "pods \"second\" is forbidden: exceeded quota: runners, requested: pods=1, used: pods=1, limited: pods=1"
    );
    // The quota's status shows the usage.
    let settled = async {
        loop {
            let q = Api::<ResourceQuota>::namespaced(f.client.clone(), "team-a")
                .get("runners")
                .await
                .unwrap();
            let used = q.status.and_then(|s| s.used).unwrap_or_default();
            if used.get("pods").map(|q| q.0.as_str()) == Some("1")
                && used.get("limits.memory").map(|q| q.0.as_str()) == Some("512Mi")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), settled)
        .await
        .unwrap();
}
