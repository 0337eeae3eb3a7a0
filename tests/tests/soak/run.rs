//! The soak's phases: prepare the cluster and tfops, drive users and faults for the time
//! asked, then settle (faults healed, every object made wanted again and approved where it
//! waits) and measure how long each object takes to converge.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::workload::{self, Change, World};
use crate::{Replica, Settings, Soak, faults, ledger, observe};

/// How long after the faults stop every object must have converged.
pub(crate) const CONVERGE_WITHIN: Duration = Duration::from_secs(240);

/// How long each create takes (so that faults land mid-apply).
const APPLY_SECONDS: u32 = 2;

/// The cluster with its node running containers, tfops' RBAC and two namespaces, the ledger,
/// the repository, two shards of two manager replicas and the six objects.
pub(crate) async fn prepare(settings: Settings) -> Soak {
    std::fs::create_dir_all(&settings.out).unwrap();
    let op = crate::support::operator::Operator::prepare_on(true).await;
    op.add_namespace("team-b").await;
    apply_identities(&op.admin, "team-b").await;
    let gateway = op
        .cluster
        .pod_gateway
        .expect("the soak runs runner Pods as containers: podman's network has no gateway");
    let ledger =
        ledger::Ledger::start(&gateway.to_string(), &settings.out.join("ledger.log")).await;
    let mut world = World::new();
    let files: Vec<(String, String)> = world
        .objects
        .iter()
        .map(|o| {
            (
                format!("{}/main.tf", o.dir()),
                ledger::config(ledger.addr, 0, APPLY_SECONDS),
            )
        })
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    let sha = op.git.commit("soak", &refs);
    world.commits.push((sha, "*".into(), 0));
    let repo_url = op.git.url("soak");
    let states = observe::States::start(&op.admin, &["team-a", "team-b"]);
    let rng = fastrand::Rng::with_seed(settings.seed);
    let mut soak = Soak {
        settings,
        op,
        ledger,
        replicas: Vec::new(),
        world,
        rng,
        started: Instant::now(),
        events: Vec::new(),
        actions: BTreeMap::new(),
        faults: BTreeMap::new(),
        active: Vec::new(),
        states,
        repo_url,
    };
    for (identity, shard) in [
        ("tfops-manager-0", None),
        ("tfops-manager-1", None),
        ("tfops-manager-b-0", Some(workload::SHARD)),
        ("tfops-manager-b-1", Some(workload::SHARD)),
    ] {
        soak.replicas.push(Replica {
            identity: identity.into(),
            shard: shard.map(Into::into),
            process: None,
            logs: Vec::new(),
            frozen_until: None,
            caused_exits: 0,
            crashes: Vec::new(),
            lease_losses: 0,
            started_at: Instant::now(),
            restart_at: None,
            memory_at_start: 0,
        });
        soak.start_replica(soak.replicas.len() - 1);
    }
    for i in 0..soak.world.objects.len() {
        workload::write(&mut soak.world, i, &soak.op.admin, &soak.repo_url)
            .await
            .unwrap();
        record_change(&mut soak.world, i, false, None);
    }
    for r in 0..soak.replicas.len() {
        soak.replicas[r].memory_at_start = crate::report::memory(&soak.replicas[r]).unwrap_or(0);
    }
    soak.note("prepared: 6 objects, 4 manager replicas in 2 shards");
    soak
}

/// The plan and apply ServiceAccounts of the objects with an apply identity, each with the
/// runner's role (the state and its lock); the ledger tells which one ran each create.
async fn apply_identities(admin: &kube::Client, namespace: &str) {
    for account in [workload::PLAN_ACCOUNT, workload::APPLY_ACCOUNT] {
        crate::support::runner_account(admin, namespace, account).await;
    }
}

/// Records that object `i` now asks for its current content (or, for an approval, `content`).
pub(crate) fn record_change(world: &mut World, i: usize, approval: bool, content: Option<String>) {
    let content = content.unwrap_or_else(|| world.content_now(i));
    let owner = world.objects[i].owner();
    world.changes.push(Change {
        at: Instant::now(),
        owner,
        content,
        approval,
    });
}

/// Users and faults at random for `length`.
pub(crate) async fn drive(soak: &mut Soak, length: Duration) {
    let end = Instant::now() + length;
    let mut next_action = Instant::now();
    let mut next_fault = Instant::now() + Duration::from_millis(soak.rng.u64(4000..10_000));
    let mut faults_made = 0u32;
    let mut aiming: Option<Instant> = None;
    let mut last_look = Instant::now();
    while Instant::now() < end {
        soak.heal_due().await;
        soak.tend_replicas();
        if Instant::now() >= next_action {
            crate::actions::act(soak).await;
            next_action = Instant::now() + Duration::from_millis(soak.rng.u64(800..3000));
        }
        // Every third fault is aimed at an apply: it waits (looking once a second, at most
        // 30 s) for one under way; the others land at random.
        if let Some(since) = aiming {
            if last_look.elapsed() >= Duration::from_secs(1) {
                last_look = Instant::now();
                if soak.inject_mid_apply().await || since.elapsed() > Duration::from_secs(30) {
                    aiming = None;
                }
            }
        } else if Instant::now() >= next_fault {
            faults_made += 1;
            if faults_made.is_multiple_of(3) {
                aiming = Some(Instant::now());
            } else if soak.active.len() < 3 {
                let all = faults::allowed(&faults::ALL, &soak.settings.only);
                assert!(
                    !all.is_empty(),
                    "TFOPS_SOAK_ONLY names no fault: {:?}",
                    soak.settings.only
                );
                let fault = all[soak.rng.usize(..all.len())];
                soak.inject(fault, false).await;
            }
            next_fault = Instant::now() + Duration::from_millis(soak.rng.u64(3000..10_000));
        }
        // The driver's pace (one look every quarter second), not a wait for a condition.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    soak.note("faults stop");
    soak.heal_all().await;
}

/// How each object ended: the time from the end of the faults to converged (`None`: not
/// within [`CONVERGE_WITHIN`]).
pub(crate) struct Converged {
    pub(crate) at: BTreeMap<String, Option<Duration>>,
}

/// Brings every object back to what its users want (created again, resumed) and approves
/// what waits for approval, as its users would, until every object converged: its current
/// content created by Terraform (ledger `done`) and `Ready`.
pub(crate) async fn settle(soak: &mut Soak) -> Converged {
    let began = Instant::now();
    for i in 0..soak.world.objects.len() {
        if !soak.world.objects[i].alive {
            while !workload::gone(&soak.world, i, &soak.op.admin).await {
                assert!(
                    began.elapsed() < CONVERGE_WITHIN,
                    "{} was never deleted",
                    soak.world.objects[i].key()
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let recreated = crate::actions::recreate(soak, i).await;
            soak.note(format!("settle: created again: {recreated:?}"));
        }
        soak.world.objects[i].suspended = false;
        // Written again (with retries), so that the spec is what the world says.
        loop {
            let written = workload::write(&mut soak.world, i, &soak.op.admin, &soak.repo_url).await;
            if written.is_ok() {
                break;
            }
            assert!(began.elapsed() < CONVERGE_WITHIN, "{written:?}");
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    soak.note("settling: every object wanted, resumed, written again");
    let mut at: BTreeMap<String, Option<Duration>> =
        soak.world.objects.iter().map(|o| (o.key(), None)).collect();
    let mut approved: BTreeMap<usize, String> = BTreeMap::new();
    while began.elapsed() < CONVERGE_WITHIN && at.values().any(Option::is_none) {
        let entries = soak.ledger.entries();
        for i in 0..soak.world.objects.len() {
            let o = soak.world.objects[i].clone();
            if at[&o.key()].is_some() {
                continue;
            }
            let Ok(t) = workload::api(&soak.op.admin, &o).get(&o.name).await else {
                continue;
            };
            let content = soak.world.content_now(i);
            let done = entries.iter().any(|e| {
                e.kind == ledger::Kind::Done && e.owner == o.owner() && e.content == content
            });
            if done && ready(&t) {
                at.insert(o.key(), Some(began.elapsed()));
                continue;
            }
            let status = t.status.clone().unwrap_or_default();
            let plan = status.plan.clone();
            let key = format!("{}@{}", plan.pending, plan.pending_generation);
            if o.manual
                && !plan.pending.is_empty()
                && status.applying().is_none()
                && approved.get(&i) != Some(&key)
                && workload::content_of(&soak.world, i, &plan.pending, plan.pending_generation)
                    .as_deref()
                    == Some(content.as_str())
            {
                record_change(&mut soak.world, i, true, Some(content));
                if workload::approve(&mut soak.world, i, &plan.pending, &soak.op.admin)
                    .await
                    .is_ok()
                {
                    approved.insert(i, key);
                    soak.note(format!("settle: approved {} {}", o.key(), plan.pending));
                }
            }
        }
        // A look every half second at most (the objects and the ledger are read each time).
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    soak.note("settled");
    for o in soak.world.objects.clone() {
        if at[&o.key()].is_none() {
            let seen = workload::api(&soak.op.admin, &o).get(&o.name).await;
            soak.note(format!(
                "not converged: {} {}",
                o.key(),
                where_it_stands(seen)
            ));
        }
    }
    Converged { at }
}

/// What an object's status says, in a line of the event log: what reproduces a finding.
fn where_it_stands(seen: Result<tfops_kube::Terraform, kube::Error>) -> String {
    let t = match seen {
        Ok(t) => t,
        Err(e) => return format!("unreadable: {e}"),
    };
    let s = t.status.unwrap_or_default();
    let ready = s.conditions.iter().find(|c| c.type_ == "Ready");
    format!(
        "generation {} observed {}; Ready {:?} {:?}; pending plan {:?} (generation {}); last applied {:?} at {:?}; active run {:?}",
        t.metadata.generation.unwrap_or_default(),
        s.observed_generation,
        ready.map(|c| &c.reason),
        ready.map(|c| &c.message),
        s.plan.pending,
        s.plan.pending_generation,
        s.plan.last_applied,
        s.last_applied_revision,
        s.active_run.map(|a| a.run_id),
    )
}

/// `Ready` is `True` for the object's current generation.
pub(crate) fn ready(t: &tfops_kube::Terraform) -> bool {
    let generation = t.metadata.generation.unwrap_or_default();
    t.status.as_ref().is_some_and(|s| {
        s.observed_generation >= generation
            && s.conditions.iter().any(|c| {
                c.type_ == "Ready" && c.status == tfops_core::conditions::ConditionStatus::True
            })
    })
}
