//! The loopback API server judged by kube-rs, unchanged: what kube-rs sends and what it makes of
//! the answers (typed objects, `ErrorResponse` reasons) must be what a real server gives.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use support::client;
use tests::cluster::LoopbackCluster;

mod support;

/// A client, and the namespace `team-a` created.
async fn client_in_team_a(cluster: &LoopbackCluster) -> kube::Client {
    let client = client(cluster).await;
    support::namespace(&client, "team-a").await;
    client
}

fn secret(name: &str, value: &str) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        string_data: None,
        data: Some(BTreeMap::from([(
            "password".to_string(),
            k8s_openapi::ByteString(value.as_bytes().to_vec()),
        )])),
        ..Default::default()
    }
}

fn reason(e: kube::Error) -> (u16, String) {
    let s = support::status(e);
    (s.code, s.reason)
}

#[tokio::test]
async fn kube_rs_creates_reads_lists_replaces_and_deletes_with_real_errors() {
    let cluster = LoopbackCluster::start().await.unwrap();
    let client = client(&cluster).await;
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: kube::api::ObjectMeta {
            name: Some("team-a".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    assert!(
        namespaces
            .get("team-a")
            .await
            .unwrap()
            .metadata
            .uid
            .is_some()
    );

    let nowhere: Api<Secret> = Api::namespaced(client.clone(), "nowhere");
    let refused = nowhere
        .create(&PostParams::default(), &secret("db", "one"))
        .await;
    assert_eq!(reason(refused.unwrap_err()), (404, "NotFound".into()));

    let secrets: Api<Secret> = Api::namespaced(client.clone(), "team-a");
    let created = secrets
        .create(&PostParams::default(), &secret("db", "one"))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(meta.uid.as_deref().is_some_and(|u| !u.is_empty()));
    assert!(meta.creation_timestamp.is_some());
    assert_eq!(meta.namespace.as_deref(), Some("team-a"));
    // The real Secret strategy keeps no generation.
    assert_eq!(meta.generation, None);
    let v1 = meta.resource_version.clone().unwrap();

    let again = secrets
        .create(&PostParams::default(), &secret("db", "two"))
        .await;
    assert_eq!(reason(again.unwrap_err()), (409, "AlreadyExists".into()));

    let got = secrets.get("db").await.unwrap();
    assert_eq!(got.data.unwrap()["password"].0, b"one");

    // A replace from the current version succeeds and moves the version on...
    let mut next = secrets.get("db").await.unwrap();
    next.data = secret("db", "two").data;
    let replaced = secrets
        .replace("db", &PostParams::default(), &next)
        .await
        .unwrap();
    let v2 = replaced.metadata.resource_version.clone().unwrap();
    assert!(v2.parse::<u64>().unwrap() > v1.parse::<u64>().unwrap());
    // ...and one from the stale version is a Conflict, as optimistic concurrency needs.
    let mut stale = next.clone();
    stale.metadata.resource_version = Some(v1);
    let conflict = secrets.replace("db", &PostParams::default(), &stale).await;
    assert_eq!(reason(conflict.unwrap_err()), (409, "Conflict".into()));

    // Lists in the namespace, across namespaces, and of another kind.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "team-a");
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("settings".into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("a".to_string(), "1".to_string())])),
        ..Default::default()
    };
    configmaps
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
    let listed = secrets.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert!(listed.metadata.resource_version.is_some());
    let everywhere: Api<Secret> = Api::all(client.clone());
    assert_eq!(
        everywhere
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    let missing = secrets.get("nope").await;
    assert_eq!(reason(missing.unwrap_err()), (404, "NotFound".into()));
    // Secrets answer a delete with a Success Status naming the object, as the real store does.
    let status = secrets
        .delete("db", &DeleteParams::default())
        .await
        .unwrap()
        .right()
        .expect("a Status, not the object");
    assert_eq!(status.details.unwrap().name, "db");
    assert_eq!(
        reason(secrets.get("db").await.unwrap_err()),
        (404, "NotFound".into())
    );
    assert!(secrets.get_opt("db").await.unwrap().is_none());
}

#[tokio::test]
async fn a_request_without_the_token_is_unauthorized() {
    let cluster = LoopbackCluster::start().await.unwrap();
    let wrong = cluster
        .kubeconfig()
        .replace(&cluster.admin_token, "someone-else");
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::from_yaml(&wrong).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let secrets: Api<Secret> = Api::namespaced(client, "team-a");
    let err = secrets.list(&ListParams::default()).await.unwrap_err();
    assert_eq!(reason(err), (401, "Unauthorized".into()));
}

/// kube-rs' watcher (what `Controller` and reflectors stand on): the initial list, then every
/// change in order, from one `resourceVersion` sequence.
#[tokio::test]
async fn kube_rs_watcher_sees_the_initial_list_then_every_change() {
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    let cluster = LoopbackCluster::start().await.unwrap();
    let client = client_in_team_a(&cluster).await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "team-a");
    secrets
        .create(&PostParams::default(), &secret("a", "one"))
        .await
        .unwrap();
    let mut events = watcher::watcher(secrets.clone(), watcher::Config::default()).boxed();
    let mut next = async || {
        tokio::time::timeout(std::time::Duration::from_secs(10), events.next())
            .await
            .expect("an event within 10 s")
            .expect("the stream goes on")
            .expect("no watch error")
    };
    assert!(matches!(next().await, Event::Init));
    assert!(matches!(next().await, Event::InitApply(s) if s.metadata.name.as_deref() == Some("a")));
    assert!(matches!(next().await, Event::InitDone));

    secrets
        .create(&PostParams::default(), &secret("b", "two"))
        .await
        .unwrap();
    assert!(matches!(next().await, Event::Apply(s) if s.metadata.name.as_deref() == Some("b")));
    let mut a = secrets.get("a").await.unwrap();
    a.data = secret("a", "changed").data;
    secrets
        .replace("a", &PostParams::default(), &a)
        .await
        .unwrap();
    match next().await {
        Event::Apply(s) => assert_eq!(s.data.unwrap()["password"].0, b"changed"),
        other => panic!("{other:?}"),
    }
    secrets.delete("b", &DeleteParams::default()).await.unwrap();
    assert!(matches!(next().await, Event::Delete(s) if s.metadata.name.as_deref() == Some("b")));
}

#[tokio::test]
async fn kube_rs_lists_and_watches_by_label_selector() {
    use futures::StreamExt;
    use kube::runtime::watcher::{self, Event};
    let cluster = LoopbackCluster::start().await.unwrap();
    let client = client_in_team_a(&cluster).await;
    let secrets: Api<Secret> = Api::namespaced(client, "team-a");
    for (name, tier) in [("a", "prod"), ("b", "dev"), ("c", "prod")] {
        let mut s = secret(name, "x");
        s.metadata.labels = Some(BTreeMap::from([
            ("tier".to_string(), tier.to_string()),
            (
                "app.kubernetes.io/managed-by".to_string(),
                "tfops".to_string(),
            ),
        ]));
        secrets.create(&PostParams::default(), &s).await.unwrap();
    }
    let names = |list: kube::api::ObjectList<Secret>| -> Vec<String> {
        list.items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect()
    };
    let prod = secrets
        .list(&ListParams::default().labels("tier=prod,app.kubernetes.io/managed-by"))
        .await
        .unwrap();
    assert_eq!(names(prod), vec!["a", "c"]);
    let not_prod = secrets
        .list(&ListParams::default().labels("tier notin (prod)"))
        .await
        .unwrap();
    assert_eq!(names(not_prod), vec!["b"]);

    let config = watcher::Config::default().labels("tier=dev");
    let mut events = watcher::watcher(secrets.clone(), config).boxed();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let event = tokio::time::timeout(std::time::Duration::from_secs(10), events.next())
            .await
            .expect("an event within 10 s")
            .unwrap()
            .unwrap();
        match event {
            Event::InitApply(s) | Event::Apply(s) => seen.push(s.metadata.name.unwrap()),
            Event::InitDone => {
                let mut d = secret("d", "x");
                d.metadata.labels = Some(BTreeMap::from([("tier".into(), "dev".into())]));
                secrets
                    .create(&PostParams::default(), &secret("e", "x"))
                    .await
                    .unwrap();
                secrets.create(&PostParams::default(), &d).await.unwrap();
            }
            _ => {}
        }
    }
    assert_eq!(seen, vec!["b", "d"], "only what the selector selects");
}

#[tokio::test]
async fn kube_rs_merge_and_json_patches_apply_and_a_bad_one_is_invalid() {
    use kube::api::{Patch, PatchParams};
    let cluster = LoopbackCluster::start().await.unwrap();
    let client = client_in_team_a(&cluster).await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "team-a");
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("settings".into());
    cm.data = Some(BTreeMap::from([("a".to_string(), "1".to_string())]));
    let created = maps.create(&PostParams::default(), &cm).await.unwrap();
    let pp = PatchParams::default();
    let merged = maps
        .patch(
            "settings",
            &pp,
            &Patch::Merge(serde_json::json!({"data": {"b": "2", "a": null}})),
        )
        .await
        .unwrap();
    assert_eq!(
        merged.data.unwrap(),
        BTreeMap::from([("b".to_string(), "2".to_string())])
    );
    assert_ne!(
        merged.metadata.resource_version,
        created.metadata.resource_version
    );
    let ops: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "add", "path": "/data/c", "value": "3"},
        {"op": "test", "path": "/data/b", "value": "2"}
    ]))
    .unwrap();
    let patched = maps
        .patch("settings", &pp, &Patch::<()>::Json(ops))
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["c"], "3");
    let failing: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "test", "path": "/data/b", "value": "not 2"}
    ]))
    .unwrap();
    let err = maps
        .patch("settings", &pp, &Patch::<()>::Json(failing))
        .await
        .unwrap_err();
    assert_eq!(reason(err), (422, "Invalid".into()));
    // A merge patch carrying a stale resourceVersion is a Conflict.
    let stale = maps
        .patch(
            "settings",
            &pp,
            &Patch::Merge(serde_json::json!({
                "metadata": {"resourceVersion": created.metadata.resource_version},
                "data": {"d": "4"}
            })),
        )
        .await
        .unwrap_err();
    assert_eq!(reason(stale), (409, "Conflict".into()));
}
