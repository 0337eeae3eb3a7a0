//! The loopback API server judged by kube-rs on lists and watches: pages (`limit`/`continue`)
//! read at one version, field selectors, a watch from a compacted version answered `410` (and
//! kube-rs' watcher relisting when its version was compacted), streaming lists
//! (`sendInitialEvents`), bookmarks, a reflector's store, and `kube::runtime`'s event recorder
//! (`events.k8s.io/v1`, repeats as a series).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use tests::cluster::LoopbackCluster;

mod support;

fn config_map(name: &str) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c
}

async fn setup(count: usize) -> (LoopbackCluster, Api<ConfigMap>) {
    let cluster = LoopbackCluster::start().await.unwrap();
    let client = support::client(&cluster).await;
    support::namespace(&client, "team-a").await;
    let api: Api<ConfigMap> = Api::namespaced(client, "team-a");
    for i in 0..count {
        api.create(&PostParams::default(), &config_map(&format!("cm-{i}")))
            .await
            .unwrap();
    }
    (cluster, api)
}

#[tokio::test]
async fn pages_are_read_at_the_version_of_the_first() {
    let (_cluster, api) = setup(5).await;
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(first.items.len(), 2);
    let token = first.metadata.continue_.clone().unwrap();
    // A change between pages is not seen by the rest of the list.
    api.create(&PostParams::default(), &config_map("cm-9"))
        .await
        .unwrap();
    let mut names: Vec<String> = first
        .items
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    let mut next = Some(token);
    while let Some(token) = next {
        let page = api
            .list(&ListParams::default().limit(2).continue_token(&token))
            .await
            .unwrap();
        assert_eq!(
            page.metadata.resource_version,
            first.metadata.resource_version
        );
        names.extend(page.items.iter().map(|c| c.metadata.name.clone().unwrap()));
        next = page.metadata.continue_.clone().filter(|t| !t.is_empty());
    }
    assert_eq!(names, ["cm-0", "cm-1", "cm-2", "cm-3", "cm-4"]);
    // A new list sees cm-9: a first page of 4 of the 6, with a token for the rest.
    let again = api.list(&ListParams::default().limit(4)).await.unwrap();
    assert_eq!(again.items.len(), 4);
    assert!(again.metadata.continue_.is_some_and(|t| !t.is_empty()));
    let selected = api
        .list(&ListParams::default().fields("metadata.name=cm-3"))
        .await
        .unwrap();
    assert_eq!(selected.items.len(), 1);
    let e = api
        .list(&ListParams::default().fields("data.x=1"))
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("field label not supported: data.x"),
        "{e}"
    );
}

#[tokio::test]
async fn a_watch_from_a_compacted_version_gets_a_410_error_event() {
    let (cluster, api) = setup(2).await;
    let old = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    api.create(&PostParams::default(), &config_map("cm-late"))
        .await
        .unwrap();
    cluster.compact(0);
    let mut stream = api
        .watch(&WatchParams::default().timeout(5), &old)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message.starts_with("too old resource version"),
                "{}",
                e.message
            );
        }
        other => panic!("expected a 410 error event, got {other:?}"),
    }
}

#[tokio::test]
async fn kube_rs_watcher_relists_when_its_version_was_compacted() {
    let (cluster, api) = setup(0).await;
    let mut selected = config_map("watched-1");
    selected.metadata.labels = Some([("w".to_string(), "1".to_string())].into());
    api.create(&PostParams::default(), &selected).await.unwrap();
    // Watches of one second without bookmarks: the watcher resumes from the last version it
    // saw, which the compaction below leaves behind.
    let config = watcher::Config::default()
        .labels("w=1")
        .timeout(1)
        .disable_bookmarks();
    let mut stream = watcher::watcher(api.clone(), config).boxed();
    let mut inits = 0;
    let mut errors = Vec::new();
    let mut compacted = false;
    let run = async {
        loop {
            match stream.next().await.unwrap() {
                Ok(watcher::Event::InitDone) => {
                    inits += 1;
                    if inits == 2 {
                        return;
                    }
                    if !compacted {
                        for i in 0..3 {
                            api.create(&PostParams::default(), &config_map(&format!("other-{i}")))
                                .await
                                .unwrap();
                        }
                        cluster.compact(0);
                        compacted = true;
                    }
                }
                Ok(_) => {}
                Err(e) => errors.push(e.to_string()),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("the watcher never relisted");
    assert!(
        errors
            .iter()
            .any(|e| e.contains("410") || e.contains("too old")),
        "{errors:?}"
    );
}

#[tokio::test]
async fn streaming_lists_end_their_initial_events_with_a_bookmark() {
    let (_cluster, api) = setup(3).await;
    let config = watcher::Config::default().streaming_lists();
    let mut stream = watcher::watcher(api.clone(), config).boxed();
    let mut initial = Vec::new();
    let done = async {
        loop {
            match stream.try_next().await.unwrap().unwrap() {
                watcher::Event::Init => {}
                watcher::Event::InitApply(c) => initial.push(c.metadata.name.unwrap()),
                watcher::Event::InitDone => return,
                other => panic!("unexpected {other:?}"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), done)
        .await
        .expect("the initial events never ended");
    assert_eq!(initial, ["cm-0", "cm-1", "cm-2"]);
    api.create(&PostParams::default(), &config_map("cm-3"))
        .await
        .unwrap();
    let next = tokio::time::timeout(Duration::from_secs(10), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match next {
        watcher::Event::Apply(c) => assert_eq!(c.metadata.name.as_deref(), Some("cm-3")),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn bookmarks_carry_the_reached_version() {
    let (_cluster, api) = setup(1).await;
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = api
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    let event = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match event {
        WatchEvent::Bookmark(b) => assert_eq!(b.metadata.resource_version, rv),
        other => panic!("expected a bookmark, got {other:?}"),
    }
}

#[tokio::test]
async fn a_reflector_mirrors_creations_and_deletions() {
    use kube::runtime::reflector;
    let (_cluster, api) = setup(2).await;
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector::reflector(
        writer,
        watcher::watcher(api.clone(), watcher::Config::default()),
    );
    let task = tokio::spawn(stream.for_each(|_| async {}));
    let names = |reader: &reflector::Store<ConfigMap>| {
        let mut n: Vec<String> = reader
            .state()
            .iter()
            .map(|c| c.metadata.name.clone().unwrap())
            .collect();
        n.sort();
        n
    };
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(names(&reader), ["cm-0", "cm-1"]);
    api.create(&PostParams::default(), &config_map("cm-2"))
        .await
        .unwrap();
    api.delete("cm-0", &Default::default()).await.unwrap();
    let settled = async {
        while names(&reader) != ["cm-1", "cm-2"] {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), settled)
        .await
        .expect("the reflector never caught up");
    task.abort();
}

#[tokio::test]
async fn kube_runtime_recorder_publishes_events_and_their_series() {
    use k8s_openapi::api::events::v1::Event;
    use kube::Resource;
    use kube::runtime::events::{Event as Publish, EventType, Recorder, Reporter};
    let (cluster, api) = setup(1).await;
    let client = support::client(&cluster).await;
    let cm = api.get("cm-0").await.unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "tfops".into(),
            instance: Some("tfops-0".into()),
        },
    );
    let event = Publish {
        type_: EventType::Normal,
        reason: "Planned".into(),
        note: Some("plan-main-0123456789 has 2 to add".into()),
        action: "Plan".into(),
        secondary: None,
    };
    let reference = cm.object_ref(&());
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();
    let events: Api<Event> = Api::namespaced(client, "team-a");
    let list = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        list.items.len(),
        1,
        "the repeat is a series, not a second event"
    );
    let e = &list.items[0];
    assert_eq!(e.reason.as_deref(), Some("Planned"));
    assert_eq!(e.regarding.as_ref().unwrap().name.as_deref(), Some("cm-0"));
    assert_eq!(e.series.as_ref().unwrap().count, 2);
}
