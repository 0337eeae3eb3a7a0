//! Embeds the tfops reconciler with the in-memory fakes and prints the conditions of a
//! plan → approve → apply → drift cycle.
//!
//! Run with `cargo run -p examples --example embed_reconciler`.
//!
//! A real embedder replaces `FakeWorld` with its own ports (the Kubernetes ones of
//! `tfops-kube`, or local ones) and calls `Driver::reconcile` from its controller loop.

use std::time::Duration;

use tfops_core::api::{ObjectKey, ObjectMeta, TerraformObject, annotations};
use tfops_core::health::health;
use tfops_core::reconcile::Driver;
use tfops_core::testing::FakeWorld;

const REPO: &str = "https://git.example/platform/network.git";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    runtime.block_on(cycle())
}

async fn cycle() -> Result<(), Box<dyn std::error::Error>> {
    let world = FakeWorld::new("2026-11-29T09:00:00Z".parse()?);
    world.publish(
        REPO,
        "main",
        "3f2a9c1b7d4e5f60718293a4b5c6d7e8f9012345",
        &[
            ("terraform_data.vpc", "10.0.0.0/16"),
            ("terraform_data.subnet", "10.0.1.0/24"),
        ],
    );
    // The same YAML a user commits to Git for Argo CD to sync.
    let spec = serde_json::from_value(serde_json::json!({
        "interval": "10m",
        "sourceRef": {"kind": "GitRepository", "url": REPO, "ref": {"branch": "main"}},
        "vars": [{"name": "region", "value": "eu-west-1"}],
    }))?;
    let object = TerraformObject {
        metadata: ObjectMeta {
            name: "network".into(),
            namespace: "platform".into(),
            ..ObjectMeta::default()
        },
        spec,
        status: Default::default(),
    };
    let key = world.create(object);
    let driver = Driver::new(world.ports());

    step(
        &world,
        &driver,
        &key,
        "1. first reconcile: a plan waits for approval",
    )
    .await?;
    let pending = current(&world, &key)?.status.plan.pending;

    world.edit(&key, |s| s.approve_plan = pending.clone());
    step(
        &world,
        &driver,
        &key,
        &format!("2. approvePlan: {pending} → re-plan and apply"),
    )
    .await?;

    world.advance(Duration::from_secs(601));
    step(
        &world,
        &driver,
        &key,
        "3. interval elapsed, nothing changed → drift check",
    )
    .await?;

    world.drift(&key, "terraform_data.subnet", "10.0.9.0/24");
    world.advance(Duration::from_secs(601));
    step(
        &world,
        &driver,
        &key,
        "4. someone edited the subnet by hand → drift reported",
    )
    .await?;

    world.annotate(&key, annotations::REPLAN, "2026-11-29T09:25:00Z");
    step(
        &world,
        &driver,
        &key,
        "5. re-plan action → a drift-correcting plan waits for a new approval",
    )
    .await?;
    let pending = current(&world, &key)?.status.plan.pending;
    // What Argo CD's approve action sets: the id with a fresh token (an approval counts once).
    world.annotate(
        &key,
        annotations::APPROVE,
        &format!("{pending}@2026-11-29T09:30:00Z"),
    );
    world.annotate(&key, annotations::RECONCILE, "2026-11-29T09:30:00Z");
    step(
        &world,
        &driver,
        &key,
        &format!("6. approve action on {pending} → applied"),
    )
    .await?;
    Ok(())
}

fn current(world: &FakeWorld, key: &ObjectKey) -> Result<TerraformObject, String> {
    world
        .object(key)
        .ok_or_else(|| format!("{key} disappeared"))
}

async fn step(
    world: &FakeWorld,
    driver: &Driver,
    key: &ObjectKey,
    title: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let object = current(world, key)?;
    let (dependencies, dependants) = world.relations(&object);
    let report = driver.reconcile(object, dependencies, dependants).await?;
    let object = current(world, key)?;
    println!("\n{title}");
    let steps: Vec<String> = report
        .records
        .iter()
        .map(|r| format!("{:?}", r.step))
        .collect();
    println!("  steps:  {}", steps.join(" → "));
    for c in &object.status.conditions {
        println!(
            "  {:<12} {:<8} {:<28} {}",
            c.type_,
            format!("{:?}", c.status),
            c.reason,
            c.message
        );
    }
    let h = health(&object);
    println!("  Argo CD health: {:?}", h.status);
    Ok(())
}
