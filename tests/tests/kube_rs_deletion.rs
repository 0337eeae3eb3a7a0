//! The loopback API server judged by kube-rs on deletion: finalizers (through
//! `kube::runtime::finalizer`, unchanged), delete preconditions, the garbage collector's three
//! propagation policies and a namespace's termination.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::json;
use tests::cluster::LoopbackCluster;

mod support;

async fn setup() -> (LoopbackCluster, kube::Client) {
    let cluster = LoopbackCluster::start().await.unwrap();
    let client = support::client(&cluster).await;
    support::namespace(&client, "team-a").await;
    (cluster, client)
}

fn config_map(name: &str) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c
}

fn owned_secret(name: &str, owner: &ConfigMap, block: bool) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some(name.into());
    s.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.metadata.name.clone().unwrap(),
        uid: owner.metadata.uid.clone().unwrap(),
        block_owner_deletion: Some(block),
        controller: Some(true),
    }]);
    s
}

async fn gone<K>(api: &Api<K>, name: &str, uid: &str)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let wait = await_condition(api.clone(), name, conditions::is_deleted(uid));
    tokio::time::timeout(Duration::from_secs(10), wait)
        .await
        .unwrap_or_else(|_| panic!("{name} was never deleted"))
        .unwrap();
}

#[tokio::test]
async fn kube_runtime_finalizer_holds_the_object_until_cleanup() {
    let (_cluster, client) = setup().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "team-a");
    api.create(&PostParams::default(), &config_map("c"))
        .await
        .unwrap();
    let run = |obj: ConfigMap| {
        let api = api.clone();
        async move {
            finalizer(
                &api,
                "tfops.io/cleanup",
                Arc::new(obj),
                |event| async move {
                    Ok::<_, std::convert::Infallible>(match event {
                        Event::Apply(_) => kube::runtime::controller::Action::await_change(),
                        Event::Cleanup(_) => kube::runtime::controller::Action::await_change(),
                    })
                },
            )
            .await
            .unwrap();
        }
    };
    run(api.get("c").await.unwrap()).await;
    let held = api.get("c").await.unwrap();
    assert_eq!(
        held.metadata.finalizers.as_deref(),
        Some(&["tfops.io/cleanup".to_string()][..])
    );
    api.delete("c", &DeleteParams::default()).await.unwrap();
    let deleting = api.get("c").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    // No finalizer may be added once deletion started.
    let e = support::status(
        api.patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["tfops.io/cleanup", "late"]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert!(
        e.message.contains("no new finalizers can be added"),
        "{}",
        e.message
    );
    let uid = deleting.metadata.uid.clone().unwrap();
    run(deleting).await;
    gone(&api, "c", &uid).await;
}

#[tokio::test]
async fn delete_preconditions_on_uid_and_resource_version_hold() {
    let (_cluster, client) = setup().await;
    let api: Api<ConfigMap> = Api::namespaced(client, "team-a");
    let c = api
        .create(&PostParams::default(), &config_map("c"))
        .await
        .unwrap();
    let wrong = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("someone-else".into()),
            resource_version: None,
        }),
        ..Default::default()
    };
    let e = support::status(api.delete("c", &wrong).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message
            .contains("Precondition failed: UID in precondition: someone-else"),
        "{}",
        e.message
    );
    let right = DeleteParams {
        preconditions: Some(Preconditions {
            uid: c.metadata.uid.clone(),
            resource_version: c.metadata.resource_version.clone(),
        }),
        ..Default::default()
    };
    api.delete("c", &right).await.unwrap();
    assert_eq!(support::status(api.get("c").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn the_garbage_collector_deletes_dependents_in_background_and_foreground_and_orphans() {
    let (_cluster, client) = setup().await;
    let owners: Api<ConfigMap> = Api::namespaced(client.clone(), "team-a");
    let secrets: Api<Secret> = Api::namespaced(client, "team-a");

    // Background (the default): the owner goes at once, then its dependents.
    let owner = owners
        .create(&PostParams::default(), &config_map("bg"))
        .await
        .unwrap();
    let dep = secrets
        .create(
            &PostParams::default(),
            &owned_secret("bg-dep", &owner, false),
        )
        .await
        .unwrap();
    owners.delete("bg", &DeleteParams::default()).await.unwrap();
    gone(&secrets, "bg-dep", dep.metadata.uid.as_deref().unwrap()).await;

    // Foreground: the owner waits, deleting, until its blocking dependents are gone.
    let owner = owners
        .create(&PostParams::default(), &config_map("fg"))
        .await
        .unwrap();
    let mut blocking = owned_secret("fg-dep", &owner, true);
    blocking.metadata.finalizers = Some(vec!["tfops.io/hold".into()]);
    secrets
        .create(&PostParams::default(), &blocking)
        .await
        .unwrap();
    owners
        .delete("fg", &DeleteParams::foreground())
        .await
        .unwrap();
    let waiting = owners.get("fg").await.unwrap();
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert!(
        waiting
            .metadata
            .finalizers
            .unwrap()
            .contains(&"foregroundDeletion".to_string())
    );
    let held = secrets.get("fg-dep").await.unwrap();
    assert!(
        held.metadata.deletion_timestamp.is_some(),
        "the dependent is being deleted"
    );
    secrets
        .patch(
            "fg-dep",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    gone(&owners, "fg", owner.metadata.uid.as_deref().unwrap()).await;

    // Orphan: the owner goes, the dependent stays without the reference.
    let owner = owners
        .create(&PostParams::default(), &config_map("or"))
        .await
        .unwrap();
    secrets
        .create(
            &PostParams::default(),
            &owned_secret("or-dep", &owner, false),
        )
        .await
        .unwrap();
    owners.delete("or", &DeleteParams::orphan()).await.unwrap();
    gone(&owners, "or", owner.metadata.uid.as_deref().unwrap()).await;
    let orphan = secrets.get("or-dep").await.unwrap();
    assert!(
        orphan
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
    assert_eq!(
        secrets
            .get_opt("or-dep")
            .await
            .unwrap()
            .and_then(|s| s.metadata.deletion_timestamp),
        None
    );
}

#[tokio::test]
async fn a_deleted_namespace_terminates_its_content_then_goes() {
    let (_cluster, client) = setup().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "team-a");
    let mut held = config_map("held");
    held.metadata.finalizers = Some(vec!["tfops.io/hold".into()]);
    cms.create(&PostParams::default(), &held).await.unwrap();
    cms.create(&PostParams::default(), &config_map("plain"))
        .await
        .unwrap();
    let ns = namespaces.get("team-a").await.unwrap();
    assert_eq!(
        ns.spec.unwrap().finalizers.unwrap(),
        ["kubernetes".to_string()]
    );
    namespaces
        .delete("team-a", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = namespaces.get("team-a").await.unwrap();
    assert_eq!(
        terminating.status.unwrap().phase.as_deref(),
        Some("Terminating")
    );
    // Nothing new may be created in it.
    let e = support::status(
        cms.create(&PostParams::default(), &config_map("late"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert!(
        e.message.contains("because it is being terminated"),
        "{}",
        e.message
    );
    let plain_gone = async {
        while cms.get_opt("plain").await.unwrap().is_some() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), plain_gone)
        .await
        .unwrap();
    // The held object keeps the namespace until its finalizer goes.
    assert!(namespaces.get_opt("team-a").await.unwrap().is_some());
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    gone(&namespaces, "team-a", ns.metadata.uid.as_deref().unwrap()).await;
}
