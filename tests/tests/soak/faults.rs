//! The faults: each injected, noted with the phase of what it struck, and healed after a
//! random while (several may be under way at once).
//!
//! Not made here: a runner's OOM kill (the runner image's Terraform would have to be made to
//! eat memory on demand; `operator_faults.rs` tests it alone), a blackholed runner connection
//! (the containers' network namespace has no packet filter we may change), and the node agent
//! killed (it runs inside the test's own process).

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod, ResourceQuota};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;

use crate::Soak;

/// A fault the soak injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    ApiServerKilled,
    ApiServerPaused,
    EtcdKilled,
    EtcdPaused,
    ControllerManagerKilled,
    Compaction,
    ManagerKilled,
    ManagerTerminated,
    ManagerFrozenPastLease,
    RunnerKilled,
    RunnerFrozen,
    RunnerPodDeleted,
    QuotaZero,
    Cordoned,
    RunnerOomKilled,
}

/// Every fault, for the seed to choose from.
pub(crate) const ALL: [Fault; 15] = [
    Fault::ApiServerKilled,
    Fault::ApiServerPaused,
    Fault::EtcdKilled,
    Fault::EtcdPaused,
    Fault::ControllerManagerKilled,
    Fault::Compaction,
    Fault::ManagerKilled,
    Fault::ManagerTerminated,
    Fault::ManagerFrozenPastLease,
    Fault::RunnerKilled,
    Fault::RunnerFrozen,
    Fault::RunnerPodDeleted,
    Fault::QuotaZero,
    Fault::Cordoned,
    Fault::RunnerOomKilled,
];

impl Fault {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::ApiServerKilled => "kube-apiserver killed",
            Self::ApiServerPaused => "kube-apiserver paused",
            Self::EtcdKilled => "etcd killed",
            Self::EtcdPaused => "etcd paused",
            Self::ControllerManagerKilled => "kube-controller-manager killed",
            Self::Compaction => "etcd compacted (watches expire)",
            Self::ManagerKilled => "manager SIGKILL",
            Self::ManagerTerminated => "manager SIGTERM",
            Self::ManagerFrozenPastLease => "manager SIGSTOP past its Lease",
            Self::RunnerKilled => "runner container SIGKILL",
            Self::RunnerFrozen => "runner container frozen",
            Self::RunnerPodDeleted => "runner Pod deleted",
            Self::QuotaZero => "quota of zero Pods",
            Self::Cordoned => "node cordoned",
            Self::RunnerOomKilled => "runner container OOM-killed",
        }
    }

    /// In which order faults heal: etcd (0) before what needs it (1), then the rest (2).
    fn rank(self) -> u8 {
        match self {
            Self::EtcdKilled | Self::EtcdPaused => 0,
            Self::ApiServerKilled | Self::ApiServerPaused | Self::ControllerManagerKilled => 1,
            _ => 2,
        }
    }

    /// Whether the API server cannot answer while it lasts.
    fn takes_the_api_away(self) -> bool {
        matches!(
            self,
            Self::EtcdKilled | Self::EtcdPaused | Self::ApiServerKilled | Self::ApiServerPaused
        )
    }

    /// Whether healing it takes requests to the API server.
    fn healed_through_the_api(self) -> bool {
        matches!(self, Self::QuotaZero | Self::Cordoned)
    }

    /// Whether only one of this kind may be under way (the same component cannot fail twice).
    fn exclusive(self) -> bool {
        !matches!(
            self,
            Self::RunnerKilled | Self::RunnerPodDeleted | Self::RunnerOomKilled | Self::Compaction
        )
    }
}

/// Of `faults`, those `only` names (all when it names none).
pub(crate) fn allowed(faults: &[Fault], only: &[String]) -> Vec<Fault> {
    faults
        .iter()
        .copied()
        .filter(|f| only.is_empty() || only.iter().any(|o| o == f.name()))
        .collect()
}

/// A fault under way, healed at `until`.
pub(crate) struct Active {
    pub(crate) fault: Fault,
    pub(crate) until: Instant,
    /// What it struck (a runner Pod's uid, a replica's index).
    pub(crate) target: String,
}

impl Soak {
    /// The phase each live object is in (its `Ready` reason), to note what a fault struck;
    /// read with a list per namespace, given up after 3 s (the API may be away).
    async fn phases(&self, only: Option<&str>) -> Vec<String> {
        let mut phases = Vec::new();
        for ns in ["team-a", "team-b"] {
            let api: Api<tfops_kube::Terraform> = Api::namespaced(self.op.admin.clone(), ns);
            let all = ListParams::default();
            let listed = tokio::time::timeout(Duration::from_secs(3), api.list(&all)).await;
            let Ok(Ok(list)) = listed else {
                phases.push(format!("{ns}: unknown (API away)"));
                continue;
            };
            for t in list.items {
                let key = format!("{ns}/{}", t.metadata.name.clone().unwrap_or_default());
                if only.is_some_and(|k| k != key) {
                    continue;
                }
                let status = t.status.unwrap_or_default();
                phases.push(if status.active_run.is_some() {
                    "applying".to_string()
                } else {
                    status
                        .conditions
                        .iter()
                        .find(|c| c.type_ == "Ready")
                        .map_or("new".into(), |c| c.reason.clone())
                });
            }
        }
        phases
    }

    /// Injects `fault` (unless one of its kind is under way, or it has no target now).
    pub(crate) async fn inject(&mut self, fault: Fault, mid_apply: bool) {
        if fault.exclusive() && self.active.iter().any(|a| a.fault == fault) {
            return;
        }
        let lasting = Duration::from_millis(self.rng.u64(3000..12_000));
        // At most 10 s: a request to an API server whose etcd is away hangs up to a minute, and
        // meanwhile no fault under way would be healed.
        let struck = tokio::time::timeout(Duration::from_secs(10), self.strike(fault, lasting));
        let Ok(Some((target, phases))) = struck.await else {
            return;
        };
        for phase in &phases {
            *self
                .faults
                .entry((fault.name(), phase.clone()))
                .or_default() += 1;
        }
        let tag = if mid_apply { " (aimed mid-apply)" } else { "" };
        self.note(format!(
            "fault: {}{tag} on {target} for {:.1} s; phases {phases:?}",
            fault.name(),
            lasting.as_secs_f64()
        ));
        self.active.push(Active {
            fault,
            until: Instant::now() + lasting,
            target,
        });
    }

    /// Strikes an apply under way, if there is one now, with a fault at random; whether it
    /// did.
    pub(crate) async fn inject_mid_apply(&mut self) -> bool {
        if !self.phases(None).await.iter().any(|p| p == "applying") {
            return false;
        }
        let aimed = [
            Fault::RunnerKilled,
            Fault::ApiServerKilled,
            Fault::EtcdKilled,
            Fault::ManagerKilled,
            Fault::ManagerFrozenPastLease,
            Fault::RunnerFrozen,
            Fault::RunnerOomKilled,
        ];
        let aimed = allowed(&aimed, &self.settings.only);
        if aimed.is_empty() {
            return false;
        }
        let fault = aimed[self.rng.usize(..aimed.len())];
        self.inject(fault, true).await;
        true
    }

    /// Makes `fault` happen: what it struck and the phases it found.
    async fn strike(&mut self, fault: Fault, lasting: Duration) -> Option<(String, Vec<String>)> {
        use Fault::*;
        let component = match fault {
            ApiServerKilled | ApiServerPaused => Some("kube-apiserver"),
            EtcdKilled | EtcdPaused => Some("etcd"),
            ControllerManagerKilled => Some("kube-controller-manager"),
            _ => None,
        };
        match fault {
            ApiServerKilled
            | ApiServerPaused
            | EtcdKilled
            | EtcdPaused
            | ControllerManagerKilled => {
                let phases = self.phases(None).await;
                let name = component?;
                if matches!(fault, ApiServerPaused | EtcdPaused) {
                    self.op.cluster.pause(name);
                } else {
                    self.op.cluster.kill(name);
                }
                Some((name.to_string(), phases))
            }
            Compaction => {
                let phases = self.phases(None).await;
                compact(self.op.cluster.etcd_url()).await.ok()?;
                Some(("etcd".into(), phases))
            }
            ManagerKilled | ManagerTerminated | ManagerFrozenPastLease => {
                self.strike_manager(fault, lasting).await
            }
            RunnerKilled | RunnerFrozen | RunnerPodDeleted | RunnerOomKilled => {
                self.strike_runner(fault).await
            }
            QuotaZero => {
                let ns = if self.rng.bool() { "team-a" } else { "team-b" };
                let quota: ResourceQuota = crate::support::from_json(
                    json!({"metadata": {"name": "soak-zero"}, "spec": {"hard": {"pods": "0"}}}),
                );
                Api::<ResourceQuota>::namespaced(self.op.admin.clone(), ns)
                    .create(&PostParams::default(), &quota)
                    .await
                    .ok()?;
                Some((ns.to_string(), vec![format!("{ns}: all")]))
            }
            Cordoned => {
                cordon(&self.op.admin, true).await.ok()?;
                Some(("node-1".into(), self.phases(None).await))
            }
        }
    }

    async fn strike_manager(
        &mut self,
        fault: Fault,
        lasting: Duration,
    ) -> Option<(String, Vec<String>)> {
        let r = self.rng.usize(..self.replicas.len());
        let replica = &mut self.replicas[r];
        if replica.frozen_until.is_some() {
            return None;
        }
        let pid = Pid::from_raw(replica.process.as_ref()?.child.id() as i32);
        match fault {
            Fault::ManagerKilled => {
                // Dropping the process kills it (SIGKILL); it is started again at once.
                replica.process = None;
            }
            Fault::ManagerTerminated => {
                replica.caused_exits += 1;
                let _ = kill(pid, Signal::SIGTERM);
            }
            _ => {
                // Past the Lease's 6 s, so that the other replica takes over meanwhile.
                let _ = kill(pid, Signal::SIGSTOP);
                replica.frozen_until = Some(Instant::now() + lasting.max(Duration::from_secs(9)));
            }
        }
        let phases = self.phases(None).await;
        Some((self.replicas[r].identity.clone(), phases))
    }

    async fn strike_runner(&mut self, fault: Fault) -> Option<(String, Vec<String>)> {
        let mut running = Vec::new();
        for ns in ["team-a", "team-b"] {
            let pods: Api<Pod> = Api::namespaced(self.op.admin.clone(), ns);
            let listed = pods
                .list(&ListParams::default().labels("app.kubernetes.io/name=tf-runner"))
                .await
                .ok()?;
            running.extend(
                listed.items.into_iter().filter(|p| {
                    p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                }),
            );
        }
        if running.is_empty() {
            return None;
        }
        let pod = running.swap_remove(self.rng.usize(..running.len()));
        let (ns, name) = (pod.metadata.namespace?, pod.metadata.name?);
        let uid = pod.metadata.uid?;
        let object = name.trim_end_matches("-tf-runner").to_string();
        let phases = self.phases(Some(&format!("{ns}/{object}"))).await;
        let container = format!("tfops-pod-{uid}");
        match fault {
            Fault::RunnerKilled => podman(&["kill", "--signal", "KILL", &container]),
            Fault::RunnerFrozen => podman(&["pause", &container]),
            // Its memory limit cut below what it uses, as an in-place resize would: the
            // kernel's OOM killer ends it, and the node agent reports `OOMKilled`.
            Fault::RunnerOomKilled => self
                .op
                .cluster
                .node()
                .is_some_and(|node| node.set_memory_limit(&ns, &name, 1 << 20)),
            _ => Api::<Pod>::namespaced(self.op.admin.clone(), &ns)
                .delete(&name, &DeleteParams::default())
                .await
                .is_ok(),
        }
        .then_some((format!("{ns}/{name} {uid}"), phases))
    }

    /// Heals every fault whose time has come.
    pub(crate) async fn heal_due(&mut self) {
        let now = Instant::now();
        let due: Vec<Active> = {
            let (mut due, kept): (Vec<Active>, Vec<Active>) = std::mem::take(&mut self.active)
                .into_iter()
                .partition(|a| a.until <= now);
            // The API server and the controller manager start only with etcd there: an etcd
            // fault still under way ends with theirs.
            let (etcd, kept): (Vec<Active>, Vec<Active>) =
                if due.iter().any(|a| a.fault.rank() == 1) {
                    kept.into_iter().partition(|a| a.fault.rank() == 0)
                } else {
                    (Vec::new(), kept)
                };
            due.extend(etcd);
            // A fault healed through the API (a quota, a cordon) waits while the API server
            // or etcd is still down: its heal would wait on them, and they heal later.
            let api_down = kept.iter().any(|a| a.fault.takes_the_api_away());
            let (due, waiting): (Vec<Active>, Vec<Active>) = due
                .into_iter()
                .partition(|a| !(api_down && a.fault.healed_through_the_api()));
            self.active = kept.into_iter().chain(waiting).collect();
            due
        };
        self.heal_in_order(due).await;
        let frozen: Vec<usize> = (0..self.replicas.len())
            .filter(|r| self.replicas[*r].frozen_until.is_some_and(|t| t <= now))
            .collect();
        for r in frozen {
            self.thaw(r);
        }
    }

    /// Heals every fault under way (the faults stop).
    pub(crate) async fn heal_all(&mut self) {
        let all = std::mem::take(&mut self.active);
        self.heal_in_order(all).await;
        for r in 0..self.replicas.len() {
            if self.replicas[r].frozen_until.is_some() {
                self.thaw(r);
            }
            self.replicas[r].restart_at = None;
        }
        self.tend_replicas();
    }

    /// Heals `faults`, etcd's first, then the components that need it.
    async fn heal_in_order(&mut self, mut faults: Vec<Active>) {
        faults.sort_by_key(|a| a.fault.rank());
        for a in faults {
            self.heal(a).await;
        }
    }

    fn thaw(&mut self, r: usize) {
        self.replicas[r].frozen_until = None;
        if let Some(p) = &self.replicas[r].process {
            let _ = kill(Pid::from_raw(p.child.id() as i32), Signal::SIGCONT);
        }
        let who = self.replicas[r].identity.clone();
        self.note(format!("healed: {who} continued (SIGCONT)"));
    }

    async fn heal(&mut self, a: Active) {
        use Fault::*;
        let healed = match a.fault {
            ApiServerKilled | EtcdKilled | ControllerManagerKilled => {
                // Three tries: a component started while another just came back may not find
                // it serving yet (etcd's first seconds).
                let mut started = Err(String::new());
                for _ in 0..3 {
                    started = self
                        .op
                        .cluster
                        .start_again(&a.target)
                        .await
                        .map_err(|e| e.to_string());
                    if started.is_ok() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                started
            }
            ApiServerPaused | EtcdPaused => {
                self.op.cluster.resume(&a.target);
                Ok(())
            }
            RunnerFrozen => {
                let uid = a.target.rsplit(' ').next().unwrap_or_default();
                podman(&["unpause", &format!("tfops-pod-{uid}")]);
                Ok(())
            }
            QuotaZero => {
                let quotas = Api::<ResourceQuota>::namespaced(self.op.admin.clone(), &a.target);
                heal_api(|| {
                    let quotas = quotas.clone();
                    async move {
                        quotas
                            .delete("soak-zero", &DeleteParams::default())
                            .await
                            .map(|_| ())
                    }
                })
                .await
            }
            Cordoned => {
                let admin = self.op.admin.clone();
                heal_api(|| {
                    let admin = admin.clone();
                    async move { cordon(&admin, false).await }
                })
                .await
            }
            _ => Ok(()),
        };
        match healed {
            Ok(()) => self.note(format!("healed: {} on {}", a.fault.name(), a.target)),
            Err(e) => panic!("could not heal {} on {}: {e}", a.fault.name(), a.target),
        }
    }

    /// Starts replicas that are down: those the soak killed or stopped, and notes as a crash
    /// any that ended without the soak causing it.
    pub(crate) fn tend_replicas(&mut self) {
        for r in 0..self.replicas.len() {
            let exited = match &mut self.replicas[r].process {
                Some(p) => p.child.try_wait().ok().flatten(),
                None => None,
            };
            if let Some(status) = exited {
                let replica = &mut self.replicas[r];
                let lost_lease = replica.logs.last().is_some_and(|log| {
                    let log = log.lock().unwrap();
                    // Its last error (a backtrace may follow it).
                    log.iter()
                        .rev()
                        .take(200)
                        .any(|l| l.starts_with("Error: lost the leader Lease"))
                });
                if replica.caused_exits > 0 {
                    replica.caused_exits -= 1;
                } else if lost_lease {
                    replica.lease_losses += 1;
                } else {
                    replica.crashes.push(format!("{status}"));
                }
                replica.process = None;
                // Ended within 10 s of its start: back off 5 s (a kubelet would, longer).
                if replica.started_at.elapsed() < Duration::from_secs(10) {
                    replica.restart_at = Some(Instant::now() + Duration::from_secs(5));
                }
            }
            let due = self.replicas[r]
                .restart_at
                .is_none_or(|at| Instant::now() >= at);
            if self.replicas[r].process.is_none() && due {
                self.start_replica(r);
                let who = self.replicas[r].identity.clone();
                self.note(format!("{who} started again"));
            }
        }
    }
}

/// Retries an API call that heals a fault while other faults may keep the API away.
async fn heal_api<F, Fut>(call: F) -> Result<(), String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), kube::Error>>,
{
    let began = Instant::now();
    loop {
        let answer = tokio::time::timeout(Duration::from_secs(5), call()).await;
        let Ok(answer) = answer else {
            if began.elapsed() > Duration::from_secs(120) {
                return Err("no answer for 120 s".into());
            }
            continue;
        };
        match answer {
            Ok(()) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(e) if began.elapsed() > Duration::from_secs(120) => return Err(e.to_string()),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

async fn cordon(admin: &kube::Client, on: bool) -> Result<(), kube::Error> {
    Api::<Node>::all(admin.clone())
        .patch(
            "node-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": on}})),
        )
        .await
        .map(|_| ())
}

fn podman(args: &[&str]) -> bool {
    std::process::Command::new("podman")
        .args(["--runtime", "runc"])
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Compacts etcd at its current revision (physically): every watch from an older
/// resourceVersion expires.
async fn compact(etcd_url: &str) -> Result<(), String> {
    let client = reqwest::Client::new();
    let range: serde_json::Value = client
        .post(format!("{etcd_url}/v3/kv/range"))
        .json(&json!({"key": "AA=="}))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    let revision = range["header"]["revision"]
        .as_str()
        .ok_or_else(|| format!("no revision in {range}"))?;
    client
        .post(format!("{etcd_url}/v3/kv/compaction"))
        .json(&json!({"revision": revision, "physical": true}))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .error_for_status()
        .map_err(|e| e.to_string())?;
    Ok(())
}
