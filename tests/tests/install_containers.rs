//! The chart installed with `helm install` and the images `scripts/build-images` built, run as
//! real containers: kube-controller-manager makes the Deployment's ReplicaSet and Pods, the
//! node agent runs the manager image under the chart's securityContext and ServiceAccount (the
//! in-cluster configuration: no kubeconfig anywhere), two replicas elect a leader, an object
//! goes from creation to Ready with runner containers, the leader's container is killed and its
//! Pod removed (a node lost) and another replica takes over, and objects are deleted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::json;
use support::operator::{CONFIG, ready_with};
use tfops_kube::Terraform;

/// The namespace of the chart's install.
const NAMESPACE: &str = "tfops-system";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `TFOPS_HELM`, else what `scripts/install-helm` prints.
fn helm() -> PathBuf {
    if let Some(path) = std::env::var_os("TFOPS_HELM") {
        return PathBuf::from(path);
    }
    let out = Command::new(repo().join("scripts/install-helm"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// `(repository, tag)` of the image in `variable` (`localhost/tfops-manager:dev`).
fn image(variable: &str) -> (String, String) {
    let reference = std::env::var(variable).unwrap_or_else(|_| {
        panic!("{variable} is unset: run scripts/build-images and set it to the image it prints")
    });
    let (repository, tag) = reference.rsplit_once(':').expect("an image with a tag");
    (repository.to_string(), tag.to_string())
}

/// The holder of the manager's leader Lease, once there is one.
async fn leader(leases: &Api<Lease>, not: Option<&str>, seconds: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let holder = leases
            .get_opt("tfops-manager")
            .await
            .unwrap()
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty() && Some(h.as_str()) != not);
        if let Some(h) = holder {
            return h;
        }
        assert!(
            Instant::now() < deadline,
            "no (new) leader within {seconds} s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn ready(terraforms: &Api<Terraform>, name: &str) {
    let cond = |t: Option<&Terraform>| t.is_some_and(|t| ready_with(t, "TerraformAppliedSucceed"));
    tokio::time::timeout(
        Duration::from_secs(240),
        await_condition(terraforms.clone(), name, cond),
    )
    .await
    .unwrap_or_else(|_| panic!("{name} never became Ready"))
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_chart_runs_the_manager_image_as_a_deployment_with_leader_election() {
    let (cluster, _pods) = support::cluster_with_node_on(true).await;
    let admin = support::client(&cluster).await;
    let (_dir, kubeconfig) = support::kubeconfig_file(&cluster);
    for ns in ["team-a", NAMESPACE] {
        support::namespace(&admin, ns).await;
    }
    let (manager_repository, manager_tag) = image("TFOPS_MANAGER_IMAGE");
    let (runner_repository, runner_tag) = image("TFOPS_RUNNER_IMAGE");
    let sets = [
        "runnerNamespaces={team-a}".to_string(),
        "replicaCount=2".to_string(),
        format!("image.repository={manager_repository}"),
        format!("image.tag={manager_tag}"),
        format!("runnerImage.repository={runner_repository}"),
        format!("runnerImage.tag={runner_tag}"),
    ];
    let mut args: Vec<String> = ["install", "tfops", "charts/tfops", "--namespace", NAMESPACE]
        .map(String::from)
        .to_vec();
    args.push(format!("--kubeconfig={}", kubeconfig.display()));
    for s in &sets {
        args.extend(["--set".to_string(), s.clone()]);
    }
    let out = Command::new(helm())
        .args(&args)
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm install: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    support::tfops_crds_established(&kubeconfig);

    // Two manager containers from the Deployment; one leads.
    let leases: Api<Lease> = Api::namespaced(admin.clone(), NAMESPACE);
    let first = leader(&leases, None, 180).await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(120);
    let managers = loop {
        let items = pods
            .list(&ListParams::default().labels("app.kubernetes.io/name=tfops"))
            .await
            .unwrap()
            .items;
        let ips: Vec<String> = items
            .iter()
            .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
            .collect();
        if items.len() == 2 && ips.len() == 2 {
            for ip in &ips {
                assert!(ip.starts_with("10.88."), "a container on the bridge: {ip}");
            }
            break items;
        }
        assert!(Instant::now() < deadline, "two running replicas: {ips:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };

    let gateway = cluster
        .pod_gateway
        .expect("the container network's gateway")
        .to_string();
    let git = support::git::GitDaemon::start_for_containers(&gateway);
    git.commit("infra", &[("main.tf", CONFIG)]);
    let terraforms: Api<Terraform> = Api::namespaced(admin.clone(), "team-a");
    let object = |name: &str| -> Terraform {
        support::from_json(json!({
            "apiVersion": "infra.argocd.io/v1alpha1", "kind": "Terraform",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {
                "interval": "1h", "retryInterval": "2s", "approvePlan": "auto",
                "sourceRef": {"kind": "GitRepository", "url": git.url("infra")},
            },
        }))
    };
    terraforms
        .create(&PostParams::default(), &object("app"))
        .await
        .unwrap();
    ready(&terraforms, "app").await;

    // The leader's container dies; the other replica takes the Lease and reconciles.
    let leader_pod = managers
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .find(|n| first.contains(n.as_str()))
        .unwrap_or_else(|| panic!("the leader {first} is one of the replicas"));
    // Killed and gone, as when its node dies: a container that merely restarts keeps its Pod's
    // name, its identity, and takes its own Lease straight back.
    assert!(cluster.node().unwrap().kill(NAMESPACE, &leader_pod));
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete(&leader_pod, &now).await.unwrap();
    let second = leader(&leases, Some(&first), 120).await;
    assert!(!second.contains(&leader_pod), "{second}");
    terraforms
        .create(&PostParams::default(), &object("app2"))
        .await
        .unwrap();
    ready(&terraforms, "app2").await;

    for name in ["app", "app2"] {
        terraforms
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    while !terraforms
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty()
    {
        assert!(Instant::now() < deadline, "the objects were never deleted");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
