//! A runner given stores writes the object's plan and outputs itself (what a runner Pod does
//! with its own identity): the plan file, `show` and `show -json` go to the plan store, the
//! outputs to the outputs Secret (and those not sensitive to the outputs ConfigMap, as text),
//! and only the outputs the controller asks for come back.
//! A runner without stores refuses those commands and says why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::*;
use test_case::test_case;
use tfops_core::Timestamp;
use tfops_core::api::Binary;
use tfops_core::ports::{
    self, OutputsRequest, PlanRequest, PlanToStore, PortError, ResolvedInputs, RunnerSession,
    SetupRequest,
};
use tfops_core::testing::FakeWorld;
use tfops_runner::stores::{ObjectRef, Stores};

/// Stores over a fake world, remembering the owner uid each was made for.
struct WorldStores {
    world: FakeWorld,
    owners: std::sync::Mutex<Vec<String>>,
}

impl Stores for WorldStores {
    fn plans(&self, object: &ObjectRef) -> Arc<dyn ports::PlanStore> {
        self.owners.lock().unwrap().push(object.uid.clone());
        Arc::new(self.world.clone())
    }
    fn outputs(&self, object: &ObjectRef) -> Arc<dyn ports::OutputsSink> {
        self.owners.lock().unwrap().push(object.uid.clone());
        Arc::new(self.world.clone())
    }
    fn state(&self, object: &ObjectRef) -> Arc<dyn ports::StateAdmin> {
        self.owners.lock().unwrap().push(object.uid.clone());
        Arc::new(self.world.clone())
    }
}

fn setup_request(tree: &std::path::Path, binary: Binary) -> SetupRequest {
    std::fs::create_dir(tree.join("infra")).unwrap();
    write_config(
        &tree.join("infra"),
        r#"output "shape" { value = { n = var.size, tags = ["x"] } }"#,
    );
    let mut object = object_run_by("infra", binary);
    object.metadata.uid = "uid-123".into();
    SetupRequest {
        object,
        artifact: artifact(tree),
        inputs: ResolvedInputs {
            vars: [("size".to_string(), serde_json::json!(3))].into(),
            ..Default::default()
        },
    }
}

fn normal() -> PlanRequest {
    PlanRequest {
        kind: ports::PlanKind::Normal,
        targets: vec![],
        parallelism: 0,
    }
}

#[test_case(Binary::Terraform ; "terraform")]
#[test_case(Binary::Tofu ; "tofu")]
#[tokio::test]
async fn plans_and_outputs_are_written_by_the_runner_and_only_revealed_values_return(
    binary: Binary,
) {
    let pki = pki();
    let world = FakeWorld::new(Timestamp::now());
    let stores = Arc::new(WorldStores {
        world: world.clone(),
        owners: Default::default(),
    });
    let runner = start_runner_with(server_tls(&pki, "team-a"), Some(stores.clone())).await;
    let tree = tempfile::tempdir().unwrap();
    let request = setup_request(tree.path(), binary);
    let key = request.object.key();
    let mut s = session(runner.addr, &pki, "vpc-1").await;
    s.setup(&request).await.unwrap();
    s.init().await.unwrap();
    assert!(s.writes_for_object(), "Info says the runner writes itself");
    s.select_workspace("default").await.unwrap();
    let planned = s.plan(&normal()).await.unwrap();
    let shown = s.show().await.unwrap();
    let to_store = PlanToStore {
        workspace: "default".into(),
        id: "plan-main-abc".into(),
        is_destroy: false,
        is_drift: false,
    };
    s.save_plan(&to_store).await.unwrap();
    let stored = world.lock().plans[&(key.clone(), "default".into())].clone();
    assert_eq!(stored.id, "plan-main-abc");
    assert_eq!(stored.binary, planned.plan_file, "the plan file itself");
    assert_eq!(stored.shown, shown, "the same show the controller saw");

    s.apply("apply-1").await.unwrap();
    let target = serde_json::from_value(serde_json::json!({
        "name": "vpc-outputs", "outputs": ["a", "secret:password"]
    }))
    .unwrap();
    let got = s
        .write_outputs(&OutputsRequest {
            target: Some(target),
            reveal: vec!["a".into()],
            ..OutputsRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(got["a"].value, serde_json::json!("a-3"));
    assert_eq!(
        got["secret"].value,
        serde_json::Value::Null,
        "not asked for"
    );
    assert!(got["secret"].sensitive);
    assert_eq!(got["color"].value, serde_json::Value::Null);
    let secret = world.lock().output_secrets[&("team-a".into(), "vpc-outputs".into())].clone();
    assert_eq!(secret["a"], serde_json::json!("a-3"));
    assert_eq!(secret["password"], serde_json::json!("s3cr3t-3"));
    assert!(stores.owners.lock().unwrap().iter().all(|o| o == "uid-123"));

    // A renamed Secret: the old one goes, through the runner too.
    let renamed = serde_json::from_value(serde_json::json!({"name": "vpc-out"})).unwrap();
    s.write_outputs(&OutputsRequest {
        target: Some(renamed),
        remove: Some("vpc-outputs".into()),
        ..OutputsRequest::default()
    })
    .await
    .unwrap();
    let names: Vec<String> = world
        .lock()
        .output_secrets
        .keys()
        .map(|(_, n)| n.clone())
        .collect();
    assert_eq!(names, ["vpc-out"]);
    config_map_outputs(&mut s, &world).await;
    s.delete_plan("default").await.unwrap();
    assert!(world.lock().plans.is_empty());
    // On a deletion that destroys: the outputs Secret and, when asked, the state go through
    // the runner as well.
    s.delete_outputs("vpc-out").await.unwrap();
    assert!(world.lock().output_secrets.is_empty());
    s.delete_state("default", "vpc").await.unwrap();
    assert_eq!(
        world.lock().deleted_states,
        [(key.clone(), "default".to_string(), "vpc".to_string())]
    );
    s.cleanup().await.unwrap();
}

/// The outputs ConfigMap through a writing runner: what is not sensitive, as text; a selected
/// sensitive output refused by name before anything is written; a renamed one removed.
async fn config_map_outputs(s: &mut impl RunnerSession, world: &FakeWorld) {
    let maps = |w: &FakeWorld| w.lock().output_config_maps.clone();
    fn target<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Option<T> {
        Some(serde_json::from_value(v).unwrap())
    }
    s.write_outputs(&OutputsRequest {
        config_map: target(serde_json::json!({"name": "vpc-values"})),
        ..OutputsRequest::default()
    })
    .await
    .unwrap();
    let values = maps(world)[&("team-a".into(), "vpc-values".into())].clone();
    let keys: Vec<&str> = values.keys().map(String::as_str).collect();
    assert_eq!(keys, ["a", "color", "shape", "upstream_color"], "no secret");
    assert_eq!(values["a"], "a-3", "a string as it is");
    assert_eq!(values["shape"], r#"{"n":3,"tags":["x"]}"#, "JSON as text");

    let before = (maps(world), world.lock().output_secrets.clone());
    let refused = s
        .write_outputs(&OutputsRequest {
            target: target(serde_json::json!({"name": "other-outputs"})),
            config_map: target(
                serde_json::json!({"name": "vpc-values", "outputs": ["a", "secret:pw"]}),
            ),
            ..OutputsRequest::default()
        })
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(r#"output "secret" is marked sensitive"#)
            && refused.contains("writeOutputsToSecret"),
        "{refused}"
    );
    assert_eq!(
        (maps(world), world.lock().output_secrets.clone()),
        before,
        "nothing written"
    );

    s.write_outputs(&OutputsRequest {
        config_map: target(serde_json::json!({"name": "vpc-cfg", "outputs": ["color:colour"]})),
        remove_config_map: Some("vpc-values".into()),
        ..OutputsRequest::default()
    })
    .await
    .unwrap();
    let expected = [(
        ("team-a".to_string(), "vpc-cfg".to_string()),
        [("colour".to_string(), "blue".to_string())].into(),
    )];
    assert_eq!(maps(world), expected.into());
    s.delete_outputs_config_map("vpc-cfg").await.unwrap();
    assert!(maps(world).is_empty());
}

#[tokio::test]
async fn a_runner_without_stores_refuses_to_store_and_says_why() {
    let pki = pki();
    let runner = start_runner(server_tls(&pki, "team-a")).await;
    let tree = tempfile::tempdir().unwrap();
    let request = setup_request(tree.path(), Binary::Terraform);
    let mut s = session(runner.addr, &pki, "vpc-1").await;
    s.setup(&request).await.unwrap();
    s.init().await.unwrap();
    assert!(!s.writes_for_object());
    s.plan(&normal()).await.unwrap();
    let to_store = PlanToStore {
        workspace: "default".into(),
        id: "plan-main-abc".into(),
        is_destroy: false,
        is_drift: false,
    };
    match s.save_plan(&to_store).await {
        Err(PortError::Terraform(m)) => assert!(m.contains("no stores"), "{m}"),
        other => panic!("{other:?}"),
    }
}
