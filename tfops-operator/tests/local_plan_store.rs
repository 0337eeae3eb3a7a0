//! Local mode's plan store: a saved plan loads back byte for byte, and damage is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use tfops_core::api::ObjectKey;
use tfops_core::ports::{PlanStore, PortError, ShownPlan, StoredPlan};
use tfops_operator::local::output::Printer;
use tfops_operator::local::ports::LocalWorld;
use tfops_operator::local::store::StateDir;

fn plan(size: usize) -> StoredPlan {
    // Not compressible, and several chunks long.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let binary = (0..size)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    StoredPlan {
        id: "plan-main-1111111111".into(),
        binary,
        shown: ShownPlan {
            readable: "terraform_data.a will be created\n".into(),
            json: r#"{"resource_changes":[]}"#.into(),
        },
        is_destroy: true,
        is_drift: false,
    }
}

#[tokio::test]
async fn a_saved_plan_loads_back_whole_and_a_damaged_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let world = LocalWorld::new(
        StateDir::open(dir.path()).unwrap(),
        BTreeMap::new(),
        Printer::new(true),
    );
    let key = ObjectKey::new("demo", "app");
    assert_eq!(world.load(&key, "default").await.unwrap(), None);
    let saved = plan(3 << 20);
    world.save(&key, "default", &saved).await.unwrap();
    let loaded = world.load(&key, "default").await.unwrap().unwrap();
    assert_eq!(loaded, saved);

    // Flip one byte of one chunk: the codec's checks refuse it.
    let chunk = dir.path().join("objects/demo/app/plan/chunk-1.bin");
    let mut bytes = std::fs::read(&chunk).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&chunk, bytes).unwrap();
    let err = world.load(&key, "default").await.unwrap_err();
    assert!(
        matches!(err, PortError::Invalid(ref m) if m.contains("damaged")),
        "{err:?}"
    );

    world.delete(&key, "default").await.unwrap();
    assert_eq!(world.load(&key, "default").await.unwrap(), None);
}
