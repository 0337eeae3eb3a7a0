//! Deletion on the operator, end to end: a dependency's deletion waits while a dependant
//! exists; a dependant deleted with `destroyResourcesOnDeletion` destroys its resources and
//! keeps its state; one deleted without it keeps both; one with `deleteOnDestroy` loses its
//! state too, removed by its runner (the controller deletes no Secret); and nothing is left
//! behind — no object stuck on its finalizer, no runner Pod, no plan or outputs object.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::json;
use support::operator::{Operator, condition, ready_with};

async fn delete(op: &Operator, name: &str) -> String {
    let uid = op
        .terraforms()
        .get(name)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    op.terraforms()
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    uid
}

async fn gone(op: &Operator, name: &str, uid: &str) {
    let cond = await_condition(op.terraforms(), name, conditions::is_deleted(uid));
    if tokio::time::timeout(Duration::from_secs(120), cond)
        .await
        .is_err()
    {
        let left = op.terraforms().get_opt(name).await.unwrap();
        panic!(
            "{name} was not released: {:?}",
            left.map(|t| (t.metadata.finalizers, t.status))
        );
    }
}

fn names<K: kube::Resource>(items: Vec<K>) -> Vec<String> {
    let mut n: Vec<String> = items.iter().filter_map(|o| o.meta().name.clone()).collect();
    n.sort();
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deletion_with_and_without_destroy_waits_for_dependants_and_leaves_nothing() {
    let op = Operator::start().await;
    op.apply(&op.manifest(
        "net",
        json!({"approvePlan": "auto", "writeOutputsToSecret": {"name": "net-out"}}),
    ));
    op.apply(&op.manifest(
        "app",
        json!({"approvePlan": "auto", "dependsOn": [{"name": "net"}],
               "destroyResourcesOnDeletion": true, "writeOutputsToSecret": {"name": "app-out"}}),
    ));
    op.apply(&op.manifest(
        "tmp",
        json!({"approvePlan": "auto", "destroyResourcesOnDeletion": true,
               "tfstate": {"deleteOnDestroy": true}}),
    ));
    for name in ["net", "app", "tmp"] {
        op.wait_for(name, "became Ready", 120, |t| {
            ready_with(t, "TerraformOutputsWritten") || ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    }

    // The dependency waits for its dependant.
    let net = delete(&op, "net").await;
    let t = op
        .wait_for("net", "waited for its dependant", 60, |t| {
            condition(t, "Ready").is_some_and(|(_, r, _)| r == "DeletionBlockedByDependants")
        })
        .await;
    assert!(condition(&t, "Ready").unwrap().2.contains("team-a/app"));

    // The dependant goes, destroying what it made; then the dependency is released.
    let app = delete(&op, "app").await;
    gone(&op, "app", &app).await;
    gone(&op, "net", &net).await;
    let tmp = delete(&op, "tmp").await;
    gone(&op, "tmp", &tmp).await;

    let secrets: Api<Secret> = Api::namespaced(op.admin.clone(), "team-a");
    let state = |name: &str| {
        let secrets = secrets.clone();
        let name = format!("tfstate-default-{name}");
        async move { secrets.get_opt(&name).await.unwrap() }
    };
    // State is kept unless asked: app's (destroyed, so empty of resources) and net's.
    assert!(state("net").await.is_some());
    let app_state = state("app").await.expect("app's state is kept");
    let tfstate = app_state.data.unwrap()["tfstate"].0.clone();
    let mut json = String::new();
    use std::io::Read;
    flate2::read::GzDecoder::new(&tfstate[..])
        .read_to_string(&mut json)
        .unwrap();
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        doc["resources"],
        json!([]),
        "app's resources were destroyed"
    );
    assert!(
        state("tmp").await.is_none(),
        "deleteOnDestroy removed tmp's state"
    );
    // The runner that destroyed removed it; the controller deleted no Secret at all (its role
    // has no such right).
    let deleters: Vec<(String, String)> = op
        .cluster
        .audit()
        .into_iter()
        .filter(|a| a.method == "DELETE" && a.path.contains("/secrets/"))
        .map(|a| (a.user, a.path))
        .collect();
    assert!(
        deleters.iter().any(
            |(user, path)| user == "system:serviceaccount:team-a:tf-runner"
                && path.ends_with("/secrets/tfstate-default-tmp")
        ),
        "{deleters:?}"
    );
    assert!(
        deleters
            .iter()
            .all(|(user, _)| !user.contains("tfops-controller")),
        "{deleters:?}"
    );
    let leases: Api<Lease> = Api::namespaced(op.admin.clone(), "team-a");
    assert!(
        leases
            .get_opt("lock-tfstate-default-tmp")
            .await
            .unwrap()
            .is_none()
    );

    // Nothing else is left, once the garbage collector has taken what the objects owned.
    let pods: Api<Pod> = Api::namespaced(op.admin.clone(), "team-a");
    let maps: Api<ConfigMap> = Api::namespaced(op.admin.clone(), "team-a");
    let lp = ListParams::default();
    let clean = async {
        loop {
            let left_secrets: Vec<String> = names(secrets.list(&lp).await.unwrap().items)
                .into_iter()
                .filter(|n| !n.starts_with("tfstate-") && n != "terraform-runner.tls")
                .collect();
            let left_pods = names(pods.list(&lp).await.unwrap().items);
            let left_maps: Vec<String> = names(maps.list(&lp).await.unwrap().items)
                .into_iter()
                .filter(|n| n.starts_with("tfplan-"))
                .collect();
            if left_secrets.is_empty() && left_pods.is_empty() && left_maps.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(90), clean)
        .await
        .is_err()
    {
        panic!(
            "left behind: secrets {:?}, pods {:?}, configmaps {:?}",
            names(secrets.list(&lp).await.unwrap().items),
            names(pods.list(&lp).await.unwrap().items),
            names(maps.list(&lp).await.unwrap().items)
        );
    }
    assert!(op.terraforms().list(&lp).await.unwrap().items.is_empty());
}
