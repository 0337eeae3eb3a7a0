//! The invariants, judged from outside at the end: from the ledger (what Terraform really
//! did), the approvals the soak's users gave, the state Secrets' versions, the managers' logs
//! and exits, and the cluster once everything settled. Each must have no case.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use tfops_kube::Terraform;

use crate::ledger::{Entry, Kind};
use crate::run::Converged;
use crate::{Soak, workload};

/// One invariant and its cases (none: kept).
#[derive(Debug)]
pub(crate) struct Finding {
    pub(crate) name: &'static str,
    pub(crate) cases: Vec<String>,
}

/// Every invariant, in the report's order.
pub(crate) async fn all(soak: &Soak, converged: &Converged) -> Vec<Finding> {
    let entries = soak.ledger.entries();
    let (twice, _) = applied_twice(soak, &entries);
    vec![
        Finding {
            name: "an apply of content no one approved",
            cases: unapproved(soak, &entries),
        },
        Finding {
            name: "an approved plan applied twice",
            cases: twice,
        },
        Finding {
            name: "a create or destroy run as another identity than the object's applier",
            cases: wrong_identity(soak, &entries),
        },
        Finding {
            name: "two applies of one object overlapping",
            cases: overlapping(&entries),
        },
        Finding {
            name: "a state that went backwards (serial down, lineage changed)",
            cases: backwards(soak),
        },
        Finding {
            name: "an object not converged within the bound (an approved, current plan never applied among them)",
            cases: not_converged(converged),
        },
        Finding {
            name: "two managers acting on one shard at once",
            cases: two_leaders(soak),
        },
        Finding {
            name: "a crash we did not cause",
            cases: soak
                .replicas
                .iter()
                .flat_map(|r| {
                    r.crashes
                        .iter()
                        .map(move |c| format!("{}: {c}", r.identity))
                })
                .collect(),
        },
        Finding {
            name: "a lock, finalizer, Pod, container, process or cgroup left behind",
            cases: left_behind(soak).await,
        },
        Finding {
            name: "status writes that never stop (30 s)",
            cases: restless(soak).await,
        },
    ]
}

/// The `<namespace>/<name>` of an owner `<namespace>/<name>#<n>`.
fn key_of(owner: &str) -> &str {
    owner.split('#').next().unwrap_or(owner)
}

fn unapproved(soak: &Soak, entries: &[Entry]) -> Vec<String> {
    let manual: Vec<String> = soak
        .world
        .objects
        .iter()
        .filter(|o| o.manual)
        .map(workload::Object::key)
        .collect();
    entries
        .iter()
        .filter(|e| e.kind == Kind::Start && manual.iter().any(|k| k == key_of(&e.owner)))
        .filter(|e| {
            !soak
                .world
                .changes
                .iter()
                .any(|c| c.approval && c.owner == e.owner && c.content == e.content && c.at < e.at)
        })
        .map(|e| format!("{} {} at {:.1} s", e.owner, e.content, since(soak, e.at)))
        .collect()
}

/// Creates and destroys the ledger saw run as another identity than the object's: its apply
/// identity (`spec.runner.apply`) where it has one, else its runner's.
fn wrong_identity(soak: &Soak, entries: &[Entry]) -> Vec<String> {
    entries
        .iter()
        .filter(|e| e.kind != Kind::Done)
        .filter_map(|e| {
            let object = soak
                .world
                .objects
                .iter()
                .find(|o| o.key() == key_of(&e.owner))?;
            let wanted = object.applier();
            (e.identity != wanted).then(|| {
                format!(
                    "{} {} {:?} as {} (not {wanted}) at {:.1} s",
                    e.owner,
                    e.content,
                    e.kind,
                    e.identity,
                    since(soak, e.at)
                )
            })
        })
        .collect()
}

fn since(soak: &Soak, at: Instant) -> f64 {
    at.saturating_duration_since(soak.started).as_secs_f64()
}

/// Creates of a content already created for the same object: a violation when the state had
/// recorded the first create before the second began; otherwise an unknown outcome (killed
/// between the create and the state write: Terraform's own limit), returned second.
pub(crate) fn applied_twice(soak: &Soak, entries: &[Entry]) -> (Vec<String>, Vec<String>) {
    let states = soak.states.seen();
    let mut first: BTreeMap<(String, String), Instant> = BTreeMap::new();
    let (mut twice, mut unknown) = (Vec::new(), Vec::new());
    for e in entries.iter().filter(|e| e.kind == Kind::Start) {
        let key = (e.owner.clone(), e.content.clone());
        let Some(before) = first.get(&key) else {
            first.insert(key, e.at);
            continue;
        };
        let resource = format!("{} {}", e.owner, e.content);
        let recorded = states
            .iter()
            .any(|s| s.at > *before && s.at < e.at && s.contents.contains(&resource));
        let case = format!("{resource} again at {:.1} s", since(soak, e.at));
        if recorded {
            twice.push(case);
        } else {
            unknown.push(case);
        }
    }
    (twice, unknown)
}

fn overlapping(entries: &[Entry]) -> Vec<String> {
    let mut cases = Vec::new();
    for (i, done) in entries.iter().enumerate() {
        if done.kind != Kind::Done {
            continue;
        }
        // The create this `done` ends: the latest start of that content before it.
        let Some(start) = entries[..i]
            .iter()
            .rev()
            .find(|s| s.kind == Kind::Start && s.owner == done.owner && s.content == done.content)
        else {
            continue;
        };
        if let Some(other) = entries[..i].iter().find(|s| {
            s.kind == Kind::Start && s.owner == done.owner && s.at > start.at && s.at < done.at
        }) {
            cases.push(format!(
                "{}: {} began while {} ran",
                done.owner, other.content, done.content
            ));
        }
    }
    cases
}

fn backwards(soak: &Soak) -> Vec<String> {
    let mut last: BTreeMap<String, (String, u64)> = BTreeMap::new();
    let mut cases = Vec::new();
    for s in soak.states.seen() {
        if let Some((lineage, serial)) = last.get(&s.uid) {
            if *lineage != s.lineage {
                cases.push(format!(
                    "{}: lineage {lineage} became {}",
                    s.secret, s.lineage
                ));
            } else if s.serial < *serial {
                cases.push(format!("{}: serial {serial} became {}", s.secret, s.serial));
            }
        }
        last.insert(s.uid.clone(), (s.lineage.clone(), s.serial));
    }
    cases
}

fn not_converged(converged: &Converged) -> Vec<String> {
    converged
        .at
        .iter()
        .filter(|(_, at)| at.is_none())
        .map(|(k, _)| format!("{k} not converged within {:?}", crate::run::CONVERGE_WITHIN))
        .collect()
}

/// One manager process as its log tells: when it began to lead, and when it finished a step
/// that did something (on which object).
struct Leader {
    who: String,
    shard: Option<String>,
    led_at: jiff::Timestamp,
    acted: Vec<(jiff::Timestamp, String)>,
}

/// The steps whose work is the manager's own requests to the API server. The others are a
/// look at the source, or the runner's work (its identity, its Pod): an old leader's runner
/// command started before the hand-over may end after it.
const WRITES: [&str; 7] = [
    "AddFinalizer",
    "StartRunner",
    "StartApplyRunner",
    "Cleanup",
    "DeletePlansAndOutputs",
    "DeleteState",
    "RemoveFinalizer",
];

fn leaders(soak: &Soak) -> Vec<Leader> {
    let mut leaders = Vec::new();
    for r in &soak.replicas {
        for (n, log) in r.logs.iter().enumerate() {
            let mut led_at = None;
            let mut acted = Vec::new();
            for line in log.lock().unwrap().iter() {
                let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                    continue;
                };
                let Some(at) = v["timestamp"].as_str().and_then(|t| t.parse().ok()) else {
                    continue;
                };
                let step = v["step"].as_str().unwrap_or_default();
                let object = || v["object"].as_str().unwrap_or_default().to_string();
                match v["message"].as_str() {
                    Some("leading") => led_at = led_at.or(Some(at)),
                    // A write of the manager's own to the API server that went through (the
                    // fence makes one refused after its authority a "step failed").
                    Some("step succeeded") if WRITES.contains(&step) => acted.push((at, object())),
                    // An apply begins only after the status recording it was written: that
                    // write is the manager's act. (Its end is the runner's: an apply started
                    // before a hand-over runs on, and the new leader attaches to it.)
                    Some("step started") if step == "Apply" => acted.push((at, object())),
                    _ => {}
                }
            }
            if let Some(led_at) = led_at {
                leaders.push(Leader {
                    who: format!("{} (process {n})", r.identity),
                    shard: r.shard.clone(),
                    led_at,
                    acted,
                });
            }
        }
    }
    leaders
}

/// A manager process that finished a step that did something after the process that took the
/// leadership of its shard over from it had done so: two leaders of one shard at once.
fn two_leaders(soak: &Soak) -> Vec<String> {
    let leaders = leaders(soak);
    let mut cases = Vec::new();
    for old in &leaders {
        for new in leaders
            .iter()
            .filter(|l| l.shard == old.shard && l.led_at > old.led_at)
        {
            let Some(began) = new.acted.iter().map(|a| a.0).min() else {
                continue;
            };
            if let Some((at, object)) = old.acted.iter().find(|a| a.0 > began) {
                cases.push(format!(
                    "{} acted on {object} at {at}, after {} (leading since {}) began at {began}",
                    old.who, new.who, new.led_at
                ));
            }
        }
    }
    cases
}

async fn left_behind(soak: &Soak) -> Vec<String> {
    let mut cases = Vec::new();
    // Runner Pods are deleted after each run (`alwaysCleanup`); a minute for the last ones.
    let began = Instant::now();
    let mut pods = Vec::new();
    while began.elapsed() < Duration::from_secs(60) {
        pods.clear();
        for ns in ["team-a", "team-b"] {
            let listed = listed::<Pod>(soak, ns).await;
            pods.extend(listed.into_iter().map(|p| {
                (
                    format!("{ns}/{}", p.metadata.name.unwrap_or_default()),
                    p.metadata.uid.unwrap_or_default(),
                )
            }));
        }
        if pods.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    cases.extend(pods.iter().map(|(p, _)| format!("Pod {p}")));
    // The node agent's containers of this process (podman's label names its PID namespace and
    // PID), but for those of Pods still listed.
    let pid_ns = std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let label = format!(
        "label=io.tfops.node-agent.pid={pid_ns}:{}",
        std::process::id()
    );
    let containers = std::process::Command::new("podman")
        .args(["ps", "-a", "--filter", &label, "--format", "{{.Names}}"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for name in containers.lines() {
        let uid = name.trim_start_matches("tfops-pod-");
        if !pods.iter().any(|(_, u)| u == uid) {
            cases.push(format!("container {name}"));
        }
    }
    // What the Pods the node ran left on the host: cgroups, processes (podman's monitor and
    // its cleanup end a moment after the container; half a minute for them).
    let live: std::collections::HashSet<String> = pods.iter().map(|(_, u)| u.clone()).collect();
    if let Some(node) = soak.op.cluster.node() {
        let began = Instant::now();
        let mut left = node.leftovers(&live);
        while !left.is_empty() && began.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(500)).await;
            left = node.leftovers(&live);
        }
        cases.extend(left);
    }
    for ns in ["team-a", "team-b"] {
        let leases = listed::<Lease>(soak, ns).await;
        for l in leases {
            let held = l
                .spec
                .and_then(|s| s.holder_identity)
                .is_some_and(|h| !h.is_empty());
            if held {
                cases.push(format!(
                    "Lease {ns}/{} held",
                    l.metadata.name.unwrap_or_default()
                ));
            }
        }
        let objects = listed::<Terraform>(soak, ns).await;
        for t in objects
            .iter()
            .filter(|t| t.metadata.deletion_timestamp.is_some())
        {
            cases.push(format!(
                "{ns}/{} deleted but kept by {:?}",
                t.metadata.name.clone().unwrap_or_default(),
                t.metadata.finalizers
            ));
        }
    }
    cases
}

async fn restless(soak: &Soak) -> Vec<String> {
    let versions = || async {
        let mut v = BTreeMap::new();
        for ns in ["team-a", "team-b"] {
            let listed = listed::<Terraform>(soak, ns).await;
            for t in listed {
                v.insert(
                    format!("{ns}/{}", t.metadata.name.unwrap_or_default()),
                    t.metadata.resource_version.unwrap_or_default(),
                );
            }
        }
        v
    };
    let before = versions().await;
    // The quiet the invariant asks for is a length of time itself.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let after = versions().await;
    before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}: resourceVersion {v} → {:?}", after.get(k)))
        .collect()
}

/// Every `K` in namespace `ns` (none when the API refuses).
async fn listed<K>(soak: &Soak, ns: &str) -> Vec<K>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Api::<K>::namespaced(soak.op.admin.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}
