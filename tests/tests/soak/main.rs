//! The seeded soak: tfops on the real control plane (etcd, kube-apiserver,
//! kube-controller-manager, the node agent running runner Pods as podman containers), two
//! shards of two manager replicas each electing a leader, six objects in two namespaces (two
//! of them applying as an identity of their own), users acting at random
//! and faults at random, several at once: the kube-apiserver and etcd killed and paused, the
//! controller manager killed, etcd compacted, managers killed, stopped and frozen past their
//! Lease, runner containers killed and frozen, runner Pods deleted, a zero quota, a cordoned
//! node. An outside witness (the [`ledger`]) records what Terraform really did; at the end the
//! invariants ([`check`]) are judged from it, the state Secrets seen, the managers' logs and the
//! cluster, and a report is written.
//!
//! `scripts/test` runs it for a few minutes with a fixed seed; `scripts/soak --seed S
//! --minutes M` runs it by hand (`TFOPS_SOAK_SEED`, `TFOPS_SOAK_MINUTES`, `TFOPS_SOAK_DIR`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../support/mod.rs"]
mod support;

mod actions;
mod check;
mod faults;
mod ledger;
mod observe;
mod report;
mod run;
mod workload;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::manager::Manager;
use support::operator::Operator;

/// What one soak run is asked to do.
pub(crate) struct Settings {
    pub(crate) seed: u64,
    pub(crate) minutes: f64,
    /// Where the report, the event log, the ledger and every component's log are kept.
    pub(crate) out: PathBuf,
    /// The commit the soak runs (the report says it).
    pub(crate) commit: String,
    /// Only these faults (their names as the report gives them, `TFOPS_SOAK_ONLY`,
    /// comma-separated); all when empty. To reproduce one kind of fault on its own.
    pub(crate) only: Vec<String>,
}

impl Settings {
    fn from_env() -> Self {
        let seed = std::env::var("TFOPS_SOAK_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(20_261_205);
        let minutes = std::env::var("TFOPS_SOAK_MINUTES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(3.0);
        let out = std::env::var_os("TFOPS_SOAK_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../target/soak")
                    .join(seed.to_string())
            });
        Self {
            seed,
            minutes,
            out,
            commit: report::git_commit(),
            only: std::env::var("TFOPS_SOAK_ONLY")
                .unwrap_or_default()
                .split(',')
                .map(|f| f.trim().to_string())
                .filter(|f| !f.is_empty())
                .collect(),
        }
    }
}

/// One manager replica: the process now (none while it is down) and the logs of every
/// process it has been.
pub(crate) struct Replica {
    pub(crate) identity: String,
    /// The shard it serves (`None`: the default shard); each shard elects its own leader.
    pub(crate) shard: Option<String>,
    pub(crate) process: Option<Manager>,
    pub(crate) logs: Vec<Arc<Mutex<Vec<String>>>>,
    /// Stopped (`SIGSTOP`) until then.
    pub(crate) frozen_until: Option<Instant>,
    /// Exits that the soak caused (so that they are not counted as crashes).
    pub(crate) caused_exits: u32,
    /// Exits nobody caused.
    pub(crate) crashes: Vec<String>,
    /// Exits because the replica lost its leader Lease (the API server away longer than the
    /// Lease, or the process stopped past it): by design, as a Pod it would be restarted.
    pub(crate) lease_losses: u32,
    /// When its process was started, and when a process that ended soon may start again (as
    /// a kubelet backs off a crash-looping container).
    pub(crate) started_at: Instant,
    pub(crate) restart_at: Option<Instant>,
    /// Resident memory (KiB) of its first process at the start.
    pub(crate) memory_at_start: u64,
}

/// The soak's world: the cluster and tfops, the witness, and what happened.
pub(crate) struct Soak {
    pub(crate) settings: Settings,
    pub(crate) op: Operator,
    pub(crate) ledger: ledger::Ledger,
    pub(crate) replicas: Vec<Replica>,
    pub(crate) world: workload::World,
    pub(crate) rng: fastrand::Rng,
    pub(crate) started: Instant,
    /// What was done and injected, when: the event log.
    pub(crate) events: Vec<(Instant, String)>,
    /// User actions by kind: (made, refused by the API or while it was away).
    pub(crate) actions: std::collections::BTreeMap<&'static str, (u32, u32)>,
    /// Faults by kind and the phase of the object(s) they landed on.
    pub(crate) faults: std::collections::BTreeMap<(&'static str, String), u32>,
    pub(crate) active: Vec<faults::Active>,
    pub(crate) states: observe::States,
    pub(crate) repo_url: String,
}

impl Soak {
    /// Notes `what` in the event log (and prints it).
    pub(crate) fn note(&mut self, what: impl Into<String>) {
        let what = what.into();
        println!(
            "[soak {:7.1}s] {what}",
            self.started.elapsed().as_secs_f64()
        );
        self.events.push((Instant::now(), what));
    }

    /// The flags of a manager replica of `shard`.
    pub(crate) fn manager_flags(shard: Option<&str>) -> Vec<String> {
        let image = support::runner_image();
        let mut flags: Vec<String> = [
            "--runner-pod-image",
            image.as_str(),
            "--leader-election",
            "true",
            "--leader-election-lease-duration",
            "6s",
            "--concurrent",
            "4",
            "--source-poll-interval",
            "2s",
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        if let Some(shard) = shard {
            flags.extend(["--shard".to_string(), shard.to_string()]);
        }
        flags
    }

    /// Starts replica `r` (again).
    pub(crate) fn start_replica(&mut self, r: usize) {
        let manager = Manager::start(
            &self.op.controller_kubeconfig,
            &self.replicas[r].identity,
            &Self::manager_flags(self.replicas[r].shard.as_deref()),
        );
        self.replicas[r].logs.push(manager.log.clone());
        self.replicas[r].process = Some(manager);
        self.replicas[r].started_at = Instant::now();
        self.replicas[r].restart_at = None;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_seeded_soak_with_faults_at_random_keeps_every_invariant() {
    let settings = Settings::from_env();
    println!(
        "soak: seed {} for {} minutes, kept in {}",
        settings.seed,
        settings.minutes,
        settings.out.display()
    );
    let mut soak = run::prepare(settings).await;
    let minutes = soak.settings.minutes;
    run::drive(&mut soak, Duration::from_secs_f64(minutes * 60.0)).await;
    let converged = run::settle(&mut soak).await;
    let findings = check::all(&soak, &converged).await;
    let text = report::write(&soak, &converged, &findings);
    println!("{text}");
    let broken: Vec<_> = findings.iter().filter(|f| !f.cases.is_empty()).collect();
    assert!(
        broken.is_empty(),
        "seed {}: invariants broken (report, event log, ledger and logs in {}): {broken:#?}",
        soak.settings.seed,
        soak.settings.out.display()
    );
}
