//! The node agent running Pods as real containers (podman and runc), judged by the real API
//! server: the container `securityContext` holds inside the container (uid, capabilities,
//! seccomp, no privilege escalation, read-only root), volumes are mounted with a kubelet's
//! owners and modes (a Secret read-only, emptyDirs writable), the environment comes from a
//! Secret, an init container runs first, the API server is reached from the container's own network at its Pod IP, a memory
//! limit OOM-kills it, an image podman lacks fails to pull, a deletion stops it by SIGTERM.
//!
//! The image is the runner image `scripts/build-images` builds (`TFOPS_RUNNER_IMAGE`): it has
//! bash, which the Pods here run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, LogParams, PostParams};
use serde_json::{Value, json};
use tfops_testcluster::node::NodeConfig;
use tfops_testcluster::{Options, TestCluster};

fn from_json<K: serde::de::DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).unwrap()
}

fn image() -> String {
    std::env::var("TFOPS_RUNNER_IMAGE").unwrap_or_else(|_| {
        panic!("TFOPS_RUNNER_IMAGE is unset: run scripts/build-images and set it to the runner image it prints")
    })
}

async fn cluster() -> (TestCluster, kube::Client, tempfile::TempDir) {
    assert!(
        tfops_testcluster::node::containers_available(),
        "podman does not answer: install podman and runc (scripts/test does)"
    );
    let pods = tempfile::tempdir().unwrap();
    let cluster = TestCluster::start_with(Options {
        node: Some(NodeConfig {
            root: pods.path().to_path_buf(),
            containers: true,
            ..NodeConfig::default()
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
async fn wait_pod(pods: &Api<Pod>, name: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(p) = pods.get_opt(name).await.unwrap() {
            let p = serde_json::to_value(p).unwrap();
            if done(&p) {
                return p;
            }
            assert!(Instant::now() < deadline, "pod {name}: {:#}", p["status"]);
        }
        assert!(Instant::now() < deadline, "pod {name} never appeared");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn terminated(p: &Value) -> &Value {
    &p["status"]["containerStatuses"][0]["state"]["terminated"]
}

/// What the Pod's container reports about itself, one `key=value` per line.
const SELF_REPORT: &str = r#"
echo "uid=$(id -u) gid=$(id -g) groups=$(id -G)"
grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status | tr -d '\t' | sed 's/:/=/'
touch /written 2>/dev/null && echo root=writable || echo root=read-only
touch /tmp/x && echo tmp=writable
touch /home/runner/x && echo home=writable
cat /tls/tls.key >/dev/null && echo tls=readable
touch /tls/other 2>/dev/null && echo tls-mount=writable || echo tls-mount=read-only
echo "secret=$TOKEN"
echo "accounts=$(ls /var/run/secrets/kubernetes.io/serviceaccount | tr '\n' ,)"
echo "hostname=$(cat /proc/sys/kernel/hostname)"
echo "init=$(cat /home/runner/init-ran)"
(exec 3<>/dev/tcp/$KUBERNETES_SERVICE_HOST/$KUBERNETES_SERVICE_PORT) && echo api=reachable
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hardened_pod_runs_as_a_real_container_and_its_security_context_holds_inside() {
    let (_cluster, admin, _dir) = cluster().await;
    let pp = PostParams::default();
    Api::<Secret>::namespaced(admin.clone(), "team-a")
        .create(
            &pp,
            &from_json(json!({"metadata": {"name": "creds"},
                "stringData": {"TOKEN": "s3cret", "tls.key": "not really a key"}})),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "team-a");
    pods.create(
        &pp,
        &from_json(json!({
            "metadata": {"name": "hardened"},
            "spec": {
                "serviceAccountName": "runner",
                "restartPolicy": "Never",
                "securityContext": {"fsGroup": 65532},
                "initContainers": [{
                    "name": "first", "image": image(),
                    "command": ["/bin/bash", "-c", "echo ran > /home/runner/init-ran"],
                    "volumeMounts": [{"name": "home", "mountPath": "/home/runner"}],
                }],
                "containers": [{
                    "name": "main", "image": image(),
                    "command": ["/bin/bash", "-c", SELF_REPORT],
                    "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "TOKEN"}}}],
                    "securityContext": {
                        "runAsUser": 65532, "runAsGroup": 65532, "runAsNonRoot": true,
                        "readOnlyRootFilesystem": true, "allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "volumeMounts": [
                        {"name": "tls", "mountPath": "/tls", "readOnly": true},
                        {"name": "tmp", "mountPath": "/tmp"},
                        {"name": "home", "mountPath": "/home/runner"},
                    ],
                }],
                "volumes": [
                    {"name": "tls", "secret": {"secretName": "creds", "defaultMode": 0o400}},
                    {"name": "tmp", "emptyDir": {}},
                    {"name": "home", "emptyDir": {}},
                ],
            },
        })),
    )
    .await
    .unwrap();
    let done = wait_pod(&pods, "hardened", |p| p["status"]["phase"] == "Succeeded").await;
    assert_eq!(terminated(&done)["reason"], "Completed");
    let ip = done["status"]["podIP"].as_str().unwrap();
    assert!(ip.starts_with("10.88."), "a bridge address: {ip}");
    let logs = pods.logs("hardened", &LogParams::default()).await.unwrap();
    for line in [
        "uid=65532 gid=65532",
        "CapEff=0000000000000000",
        "NoNewPrivs=1",
        "Seccomp=2",
        "root=read-only",
        "tmp=writable",
        "home=writable",
        "tls=readable",
        "tls-mount=read-only",
        "secret=s3cret",
        "accounts=ca.crt,namespace,token,",
        "hostname=hardened",
        "init=ran",
        "api=reachable",
    ] {
        assert!(
            logs.lines()
                .any(|l| l.trim() == line || l.starts_with(line)),
            "{line} not in:\n{logs}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_over_its_memory_limit_is_oom_killed_and_a_missing_image_fails_to_pull() {
    let (_cluster, admin, _dir) = cluster().await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "team-a");
    let pp = PostParams::default();
    // The string grows in bash's own memory, so its page faults meet the limit (a pipe from
    // `head` would take pipe pages in the kernel, which cgroup v1 may refuse with ENOMEM).
    let hog = format!(
        "echo growing; {}; echo survived",
        tfops_testcluster::node::MEMORY_HOG
    );
    pods.create(
        &pp,
        &from_json(json!({
            "metadata": {"name": "hog"},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": image(), "command": ["/bin/bash", "-c", hog],
                "resources": {"limits": {"memory": "48Mi"}},
            }]},
        })),
    )
    .await
    .unwrap();
    pods.create(
        &pp,
        &from_json(json!({
            "metadata": {"name": "unpulled"},
            "spec": {"restartPolicy": "Never", "containers": [{
                "name": "main", "image": "localhost/tfops-no-such-image:1",
            }]},
        })),
    )
    .await
    .unwrap();
    let done = wait_pod(&pods, "hog", |p| p["status"]["phase"] == "Failed").await;
    assert_eq!(
        terminated(&done)["reason"],
        "OOMKilled",
        "{:#}",
        done["status"]
    );
    assert_eq!(terminated(&done)["exitCode"], 137);
    let logs = pods.logs("hog", &LogParams::default()).await.unwrap();
    assert!(
        logs.contains("growing") && !logs.contains("survived"),
        "{logs}"
    );
    let waiting =
        |p: &Value| p["status"]["containerStatuses"][0]["state"]["waiting"]["reason"].clone();
    let backoff = wait_pod(&pods, "unpulled", |p| waiting(p) == "ImagePullBackOff").await;
    assert!(
        backoff["status"]["containerStatuses"][0]["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .contains("localhost/tfops-no-such-image:1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_pod_stops_its_container_by_sigterm_within_the_grace_period() {
    let (cluster, admin, _dir) = cluster().await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "team-a");
    let script =
        r#"trap 'echo stopping; exit 0' TERM; echo started; while true; do sleep 0.2; done"#;
    pods.create(
        &PostParams::default(),
        &from_json(json!({
            "metadata": {"name": "polite"},
            "spec": {"terminationGracePeriodSeconds": 60, "containers": [{
                "name": "main", "image": image(), "command": ["/bin/bash", "-c", script],
            }]},
        })),
    )
    .await
    .unwrap();
    let running = wait_pod(&pods, "polite", |p| {
        p["status"]["containerStatuses"][0]["ready"] == true
    })
    .await;
    let uid = running["metadata"]["uid"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pods
        .logs("polite", &LogParams::default())
        .await
        .unwrap()
        .contains("started")
    {
        assert!(Instant::now() < deadline, "the container never logged");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let asked = Instant::now();
    pods.delete("polite", &DeleteParams::default())
        .await
        .unwrap();
    while pods.get_opt("polite").await.unwrap().is_some() {
        assert!(
            asked.elapsed() < Duration::from_secs(60),
            "the Pod was never removed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let node = cluster.node().unwrap();
    assert_eq!(node.stopped_by_sigterm("team-a", "polite"), Some(true));
    let listed = std::process::Command::new("podman")
        .args(["ps", "--all", "--format", "{{.Names}}"])
        .output()
        .unwrap();
    let names = String::from_utf8_lossy(&listed.stdout);
    assert!(!names.contains(&uid), "its container is gone: {names}");
}
