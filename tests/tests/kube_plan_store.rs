//! The plan store on the test cluster: plans round-trip through Secrets and ConfigMaps
//! with their labels, annotations and owner reference; a plan of more than 2 MiB is chunked
//! and read back whole; a smaller plan replaces a larger one without leftovers; a reader racing
//! saves only ever gets one whole plan; damage is reported, never returned as a plan; and
//! deleting the `Terraform` object lets the garbage collector take every plan object.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use tfops_core::api::ObjectKey;
use tfops_core::plan::CodecConfig;
use tfops_core::ports::{PlanStore, PortError, ShownPlan, StoredPlan};
use tfops_kube::meta::Owner;
use tfops_kube::plans::{ANNOTATION_CHUNK, ANNOTATION_PLAN_DIGEST, ANNOTATION_PLAN_ID};
use tfops_kube::{KubePlanStore, Terraform};
use tfops_testcluster::TestCluster;

/// Bytes that do not compress (so a plan's size is what it stores).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn plan(id: &str, binary: Vec<u8>, readable: String) -> StoredPlan {
    StoredPlan {
        id: id.into(),
        binary,
        shown: ShownPlan {
            readable,
            json: json!({"format_version": "1.2", "resource_changes": [
                {"address": "null_resource.a", "type": "null_resource", "name": "a",
                 "change": {"actions": ["create"], "before": null, "after": {"id": id}}}
            ]})
            .to_string(),
        },
        is_destroy: false,
        is_drift: true,
    }
}

struct World {
    _cluster: TestCluster,
    client: kube::Client,
    key: ObjectKey,
    object: Terraform,
}

async fn world() -> World {
    let cluster = TestCluster::start().await.unwrap();
    let client = support::client(&cluster).await;
    support::terraform_crd_served(&client).await;
    support::namespace(&client, "team").await;
    let object = support::terraform(&client, "team", "web", json!({})).await;
    World {
        _cluster: cluster,
        client,
        key: ObjectKey::new("team", "web"),
        object,
    }
}

async fn names<K>(api: &Api<K>) -> Vec<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut names: Vec<String> = api
        .list(&ListParams::default().labels("infra.argocd.io/object=web"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|o| o.meta().name.clone())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn a_plan_round_trips_with_its_metadata_and_owner() {
    let w = world().await;
    let store = KubePlanStore::new(w.client.clone(), Owner::Lookup(w.client.clone()));
    assert_eq!(store.load(&w.key, "default").await.unwrap(), None);
    let saved = plan(
        "plan-main-abc",
        b"PK\x03\x04 a plan".to_vec(),
        "+ create".into(),
    );
    store.save(&w.key, "default", &saved).await.unwrap();
    assert_eq!(
        store.load(&w.key, "default").await.unwrap(),
        Some(saved.clone())
    );

    let secrets: Api<Secret> = Api::namespaced(w.client.clone(), "team");
    let head = secrets.get("tfplan-default-web").await.unwrap();
    let annotations = head.metadata.annotations.clone().unwrap();
    assert_eq!(annotations[ANNOTATION_PLAN_ID], "plan-main-abc");
    assert_eq!(annotations[ANNOTATION_CHUNK], "0");
    assert_eq!(
        annotations[ANNOTATION_PLAN_DIGEST],
        tfops_core::plan::content_digest(&saved.shown.json).unwrap()
    );
    let owner = &head.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(owner.kind, "Terraform");
    assert_eq!(owner.uid, w.object.metadata.uid.clone().unwrap());
    assert_eq!(owner.controller, Some(true));
    // The readable plan is plain text in its ConfigMap, for kubectl and the UI.
    let maps: Api<ConfigMap> = Api::namespaced(w.client.clone(), "team");
    let readable = maps.get("tfplan-default-web-readable").await.unwrap();
    assert_eq!(readable.data.unwrap()["plan.txt"], "+ create");
    assert_eq!(names(&secrets).await, ["tfplan-default-web"]);

    store.delete(&w.key, "default").await.unwrap();
    store.delete(&w.key, "default").await.unwrap();
    assert_eq!(store.load(&w.key, "default").await.unwrap(), None);
    assert!(names(&secrets).await.is_empty());
    assert!(names(&maps).await.is_empty());
}

#[tokio::test]
async fn a_plan_over_2_mib_is_chunked_and_a_smaller_one_replaces_it_without_leftovers() {
    let w = world().await;
    let store = KubePlanStore::new(w.client.clone(), Owner::Lookup(w.client.clone()));
    let secrets: Api<Secret> = Api::namespaced(w.client.clone(), "team");
    let maps: Api<ConfigMap> = Api::namespaced(w.client.clone(), "team");

    let readable = "  + resource \"null_resource\" \"ü\" {}\n".repeat(40_000);
    assert!(readable.len() > 1 << 20);
    let big = plan("plan-main-big", noise(2_500_000, 7), readable);
    store.save(&w.key, "default", &big).await.unwrap();
    assert_eq!(
        names(&secrets).await,
        [
            "tfplan-default-web",
            "tfplan-default-web-1",
            "tfplan-default-web-2"
        ]
    );
    assert_eq!(
        names(&maps).await,
        [
            "tfplan-default-web-readable",
            "tfplan-default-web-readable-1"
        ]
    );
    for s in secrets
        .list(&ListParams::default().labels("infra.argocd.io/object=web"))
        .await
        .unwrap()
    {
        let stored: usize = s.data.unwrap().values().map(|v| v.0.len()).sum();
        assert!(stored <= 1 << 20, "a Secret holds at most 1 MiB");
    }
    assert_eq!(store.load(&w.key, "default").await.unwrap(), Some(big));

    let small = plan("plan-main-small", b"small".to_vec(), "~ update".into());
    store.save(&w.key, "default", &small).await.unwrap();
    assert_eq!(names(&secrets).await, ["tfplan-default-web"]);
    assert_eq!(names(&maps).await, ["tfplan-default-web-readable"]);
    assert_eq!(store.load(&w.key, "default").await.unwrap(), Some(small));
}

#[tokio::test]
async fn a_reader_racing_saves_gets_one_whole_plan_or_the_other() {
    let w = world().await;
    // Small chunks: each plan spreads over a dozen Secrets and ConfigMaps.
    let small = CodecConfig {
        chunk_size: 4096,
        ..CodecConfig::default()
    };
    let small_text = CodecConfig {
        chunk_size: 4096,
        ..CodecConfig::readable()
    };
    let store = KubePlanStore::new(w.client.clone(), Owner::None).with_codec(small, small_text);
    let a = plan("plan-main-a", noise(48_000, 1), "a".repeat(30_000));
    let b = plan("plan-main-b", noise(40_000, 2), "b".repeat(20_000));
    store.save(&w.key, "default", &a).await.unwrap();

    let writer = {
        let (store, key, a, b) = (store.clone(), w.key.clone(), a.clone(), b.clone());
        tokio::spawn(async move {
            for i in 0..8 {
                let next = if i % 2 == 0 { &b } else { &a };
                store.save(&key, "default", next).await.unwrap();
            }
        })
    };
    let mut reads = 0;
    let mut unavailable = 0;
    while !writer.is_finished() {
        match store.load(&w.key, "default").await {
            Ok(Some(p)) => {
                assert!(p == a || p == b, "a read returned a mix of two plans");
                reads += 1;
            }
            Err(PortError::Unavailable(_)) => unavailable += 1,
            other => panic!("unexpected read: {other:?}"),
        }
    }
    writer.await.unwrap();
    assert!(
        reads > 0,
        "no read completed while saving ({unavailable} kept changing)"
    );
    assert_eq!(store.load(&w.key, "default").await.unwrap(), Some(a));
}

#[tokio::test]
async fn damage_is_reported_not_returned() {
    let w = world().await;
    let small = CodecConfig {
        chunk_size: 1024,
        ..CodecConfig::default()
    };
    let store = KubePlanStore::new(w.client.clone(), Owner::None)
        .with_codec(small, CodecConfig::readable());
    store
        .save(
            &w.key,
            "default",
            &plan("plan-main-a", noise(3000, 3), "x".into()),
        )
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(w.client.clone(), "team");
    let mut chunk = secrets.get("tfplan-default-web-1").await.unwrap();
    chunk.data.as_mut().unwrap().get_mut("chunk").unwrap().0[10] ^= 0xff;
    let patch = json!({"data": {"chunk": chunk.data.unwrap()["chunk"]}});
    secrets
        .patch(
            "tfplan-default-web-1",
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .unwrap();
    match store.load(&w.key, "default").await {
        Err(PortError::Invalid(m)) => assert!(m.contains("damaged"), "{m}"),
        other => panic!("a damaged plan must be an error: {other:?}"),
    }
    secrets
        .delete("tfplan-default-web-1", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        store.load(&w.key, "default").await.is_err(),
        "a missing chunk is an error"
    );
}

#[tokio::test]
async fn deleting_the_terraform_object_garbage_collects_its_plan() {
    let w = world().await;
    let small = CodecConfig {
        chunk_size: 1024,
        ..CodecConfig::default()
    };
    let store = KubePlanStore::new(w.client.clone(), Owner::Lookup(w.client.clone()))
        .with_codec(small, CodecConfig::readable());
    store
        .save(
            &w.key,
            "default",
            &plan("plan-main-a", noise(5000, 4), "x".into()),
        )
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(w.client.clone(), "team");
    assert!(names(&secrets).await.len() > 1, "a chunked plan");
    Api::<Terraform>::namespaced(w.client.clone(), "team")
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(w.client.clone(), "team");
    // The garbage collector learns of a new CRD's kind at its discovery sync, every 30 s in
    // kube-controller-manager: until then it cannot act on Terraform owners (20 s, the old
    // limit, failed a CI run).
    tokio::time::timeout(Duration::from_secs(90), async {
        while !names(&secrets).await.is_empty() || !names(&maps).await.is_empty() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the garbage collector removes a deleted object's plan objects");
}

/// The controller's store (`leaving_secrets_to_garbage_collection`): on a deleted object's
/// cleanup it removes the readable ConfigMaps and leaves the plan Secrets, which carry the
/// owner reference, to the garbage collector; it refuses to save, which would need to
/// delete what it replaces.
#[tokio::test]
async fn the_controllers_store_deletes_no_secret_and_saves_nothing() {
    let w = world().await;
    let runner = KubePlanStore::new(w.client.clone(), Owner::Lookup(w.client.clone()));
    let saved = plan("plan-main-abc", b"a plan".to_vec(), "+ create".into());
    runner.save(&w.key, "default", &saved).await.unwrap();
    let controller = KubePlanStore::new(w.client.clone(), Owner::Lookup(w.client.clone()))
        .leaving_secrets_to_garbage_collection();
    let e = controller
        .save(&w.key, "default", &saved)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("stored by the runner"), "{e}");
    controller.delete(&w.key, "default").await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(w.client.clone(), "team");
    let maps: Api<ConfigMap> = Api::namespaced(w.client.clone(), "team");
    assert_eq!(names(&secrets).await, ["tfplan-default-web"]);
    assert!(names(&maps).await.is_empty(), "the readable plan is gone");
    let owner = &secrets
        .get("tfplan-default-web")
        .await
        .unwrap()
        .metadata
        .owner_references
        .unwrap()[0];
    assert_eq!(
        owner.uid,
        w.object.metadata.uid.clone().unwrap(),
        "the collector's to take"
    );
}
