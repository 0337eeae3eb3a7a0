//! The node agent judged by the real API server: a Pod is bound and run, its ServiceAccount
//! token (from the TokenRequest API, projected by the ServiceAccount admission plugin's volume)
//! authenticates at its real path, its environment comes from Secrets, its logs are read through
//! `pods/log`, a memory limit OOM-kills it, and a deletion honours the grace period.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, ServiceAccount};
use kube::api::{Api, LogParams, PostParams};
use serde_json::json;
use tfops_testcluster::node::{MEMORY_HOG as GROW, NodeConfig};
use tfops_testcluster::{Options, TestCluster};

fn from_json<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> K {
    serde_json::from_value(v).unwrap()
}

async fn cluster() -> (TestCluster, kube::Client, tempfile::TempDir) {
    let pods = tempfile::tempdir().unwrap();
    let mut images = BTreeMap::new();
    images.insert("shell".to_string(), PathBuf::from("/bin/sh"));
    images.insert("tail".to_string(), PathBuf::from("/usr/bin/tail"));
    let mut base_env = BTreeMap::new();
    base_env.insert("PATH".to_string(), "/usr/bin:/bin".to_string());
    let cluster = TestCluster::start_with(Options {
        node: Some(NodeConfig {
            name: None,
            images,
            root: pods.path().to_path_buf(),
            base_env,
            containers: false,
        }),
        binaries: None,
    })
    .await
    .unwrap();
    let admin = cluster.client().await.unwrap();
    let pp = PostParams::default();
    Api::<Namespace>::all(admin.clone())
        .create(&pp, &from_json(json!({"metadata": {"name": "team-a"}})))
        .await
        .unwrap();
    Api::<ServiceAccount>::namespaced(admin.clone(), "team-a")
        .create(&pp, &from_json(json!({"metadata": {"name": "runner"}})))
        .await
        .unwrap();
    (cluster, admin, pods)
}

/// Waits until the Pod satisfies `done`; gives it.
async fn wait_pod(pods: &Api<Pod>, name: &str, done: impl Fn(&Pod) -> bool) -> Pod {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(p) = pods.get_opt(name).await.unwrap()
            && done(&p)
        {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "pod {name}: {:#?}",
            pods.get_opt(name).await.unwrap().and_then(|p| p.status)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn terminated(p: &Pod) -> Option<(i32, String)> {
    let s = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
    let t = s.state.as_ref()?.terminated.as_ref()?;
    Some((t.exit_code, t.reason.clone().unwrap_or_default()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_runs_with_its_token_environment_and_logs_read_through_the_api_server() {
    let (_cluster, admin, _dir) = cluster().await;
    let pp = PostParams::default();
    Api::<Secret>::namespaced(admin.clone(), "team-a")
        .create(
            &pp,
            &from_json(json!({"metadata": {"name": "creds"}, "stringData": {"TOKEN": "s3cret"}})),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "team-a");
    // The container finds the projected token, CA and namespace at their real path, the API
    // server's address in its environment, and its Secret in its environment.
    let script = r#"echo "secret=$TOKEN ns=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)"
test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token-present
test -s /var/run/secrets/kubernetes.io/serviceaccount/ca.crt && echo ca-present
echo "api=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT""#;
    pods.create(
        &pp,
        &from_json(json!({
            "metadata": {"name": "hello"},
            "spec": {
                "serviceAccountName": "runner",
                "restartPolicy": "Never",
                "initContainers": [{"name": "first", "image": "shell", "args": ["-c", "echo init-ran"]}],
                "containers": [{
                    "name": "main", "image": "shell:1",
                    "args": ["-c", script],
                    "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "TOKEN"}}}],
                }],
            },
        })),
    )
    .await
    .unwrap();
    let done = wait_pod(&pods, "hello", |p| phase(p) == "Succeeded").await;
    assert_eq!(terminated(&done), Some((0, "Completed".into())));
    assert_eq!(done.spec.unwrap().node_name.as_deref(), Some("node-1"));
    let logs = pods.logs("hello", &LogParams::default()).await.unwrap();
    assert!(logs.contains("secret=s3cret ns=team-a"), "{logs}");
    assert!(
        logs.contains("token-present") && logs.contains("ca-present"),
        "{logs}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_limit_oom_kills_and_a_deletion_honours_the_grace_period() {
    let (cluster, admin, _dir) = cluster().await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "team-a");
    let pp = PostParams::default();
    // A shell doubling a string touches each page it takes itself: past 32 MiB that page
    // fault waits for (cgroup v1) or meets (v2) the OOM kill. (`tail /dev/zero` meets the
    // limit inside `read()`, which fails with EFAULT on v1 instead.)
    pods.create(
        &pp,
        &from_json(json!({
            "metadata": {"name": "hungry"},
            "spec": {"serviceAccountName": "runner", "restartPolicy": "Never", "containers": [{
                "name": "main", "image": "shell", "args": ["-c", GROW],
                "resources": {"limits": {"memory": "32Mi"}},
            }]},
        })),
    )
    .await
    .unwrap();
    let killed = wait_pod(&pods, "hungry", |p| phase(p) == "Failed").await;
    assert_eq!(terminated(&killed), Some((137, "OOMKilled".into())));

    // A container that ignores SIGTERM is killed when its grace period runs out, and then the
    // Pod goes.
    pods.create(
        &pp,
        &from_json(json!({
            "metadata": {"name": "stubborn"},
            "spec": {"serviceAccountName": "runner", "restartPolicy": "Never", "containers": [{
                "name": "main", "image": "shell", "args": ["-c", "trap '' TERM; echo ignoring; while :; do sleep 1; done"],
            }]},
        })),
    )
    .await
    .unwrap();
    wait_pod(&pods, "stubborn", |p| phase(p) == "Running").await;
    // Running says the process started, not that its shell set the trap yet.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pods
        .logs("stubborn", &LogParams::default())
        .await
        .unwrap_or_default()
        .contains("ignoring")
    {
        assert!(
            Instant::now() < deadline,
            "the container never set its trap"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pods.delete(
        "stubborn",
        &kube::api::DeleteParams {
            grace_period_seconds: Some(1),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while pods.get_opt("stubborn").await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "the Pod was never removed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let node = cluster.node().unwrap();
    assert_eq!(node.stopped_by_sigterm("team-a", "stubborn"), Some(false));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordoned_node_takes_no_pod_until_uncordoned_and_an_oom_kills_the_whole_container() {
    let (_cluster, admin, _dir) = cluster().await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "team-a");
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(admin.clone());
    let cordon = |on: bool| {
        let nodes = nodes.clone();
        async move {
            nodes
                .patch(
                    "node-1",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"spec": {"unschedulable": on}})),
                )
                .await
                .unwrap();
        }
    };
    cordon(true).await;
    let pp = PostParams::default();
    // The hog is a child of the container's shell, not the shell itself; the whole container
    // goes with it, as with cgroup v2's memory.oom.group.
    pods.create(
        &pp,
        &from_json(json!({
            "metadata": {"name": "waits"},
            "spec": {"serviceAccountName": "runner", "restartPolicy": "Never", "containers": [{
                "name": "main", "image": "shell", "args": ["-c", format!("sh -c '{GROW}'; sleep 600")],
                "resources": {"limits": {"memory": "32Mi"}},
            }]},
        })),
    )
    .await
    .unwrap();
    let p = wait_pod(&pods, "waits", |p| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.reason.as_deref() == Some("Unschedulable"))
            })
    })
    .await;
    assert_eq!(phase(&p), "Pending");
    assert!(p.spec.unwrap().node_name.is_none());
    cordon(false).await;
    let killed = wait_pod(&pods, "waits", |p| phase(p) == "Failed").await;
    assert_eq!(terminated(&killed), Some((137, "OOMKilled".into())));
}
