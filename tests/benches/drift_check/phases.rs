//! The phases of one drift check, from the manager's log (each step's start and end) and a
//! watch of the runner Pods (created, scheduled, container running, Ready, gone), all on this
//! machine's clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;

/// A span of a drift check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The reconcile annotation written → the manager's first step for it.
    Seen,
    /// → the runner asked for (the source resolved and its archive at hand).
    Source,
    /// → the runner Pod created (seen by a watch).
    PodCreated,
    /// → bound to the node.
    Scheduled,
    /// → its container running.
    Running,
    /// → Ready.
    Ready,
    /// → the runner connected over gRPC with mutual TLS (kept Pod: the whole of it).
    Connected,
    /// The upload of the configuration and `init`.
    Setup,
    /// `plan -refresh-only`.
    Plan,
    /// → the status written and the run recorded (with a Pod per run: until its deletion
    /// is asked for).
    Status,
    /// The Pod's deletion asked → the Pod gone.
    Gone,
}

impl Phase {
    /// Every phase, in the order a run goes through them.
    pub(crate) const ALL_PHASES: [Phase; 11] = [
        Phase::Seen,
        Phase::Source,
        Phase::PodCreated,
        Phase::Scheduled,
        Phase::Running,
        Phase::Ready,
        Phase::Connected,
        Phase::Setup,
        Phase::Plan,
        Phase::Status,
        Phase::Gone,
    ];

    fn label(self) -> &'static str {
        match self {
            Phase::Seen => "request → manager's first step",
            Phase::Source => "source resolved and archived",
            Phase::PodCreated => "runner Pod created",
            Phase::Scheduled => "Pod scheduled",
            Phase::Running => "container running",
            Phase::Ready => "Pod Ready",
            Phase::Connected => "runner connected (gRPC, mTLS)",
            Phase::Setup => "upload + `init`",
            Phase::Plan => "`plan -refresh-only`",
            Phase::Status => "status written, run recorded",
            Phase::Gone => "Pod deleted → gone",
        }
    }
}

/// What a watch of runner Pods saw, when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seen {
    Created,
    Scheduled,
    Running,
    Ready,
    Gone,
}

/// The runner Pods' events so far.
#[derive(Clone, Default)]
pub(crate) struct Pods {
    events: Arc<Mutex<Vec<(Timestamp, String, Seen)>>>,
}

/// Watches the runner Pods of `team-a` from now on.
pub(crate) fn watch_pods(admin: kube::Client) -> Pods {
    let pods = Pods::default();
    let events = pods.events.clone();
    tokio::spawn(async move {
        let api: Api<Pod> = Api::namespaced(admin, "team-a");
        let config = watcher::Config::default().labels("app.kubernetes.io/name=tf-runner");
        let mut stream = std::pin::pin!(watcher(api, config));
        while let Some(event) = stream.next().await {
            let now = Timestamp::now();
            let Ok(event) = event else { continue };
            let mut seen = events.lock().unwrap();
            let mut note = |uid: &str, what: Seen| {
                let known = seen.iter().any(|(_, u, s)| u == uid && *s == what);
                if !known {
                    seen.push((now, uid.to_string(), what));
                }
            };
            match event {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    for what in states(&p) {
                        note(p.metadata.uid.as_deref().unwrap_or_default(), what);
                    }
                }
                watcher::Event::Delete(p) => {
                    note(p.metadata.uid.as_deref().unwrap_or_default(), Seen::Gone);
                }
                _ => {}
            }
        }
    });
    pods
}

/// What a Pod's object says it has reached.
fn states(p: &Pod) -> Vec<Seen> {
    let mut reached = vec![Seen::Created];
    if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
        reached.push(Seen::Scheduled);
    }
    let status = p.status.clone().unwrap_or_default();
    let running = status
        .container_statuses
        .unwrap_or_default()
        .iter()
        .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
    if running {
        reached.push(Seen::Running);
    }
    let ready = status
        .conditions
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if ready {
        reached.push(Seen::Ready);
    }
    reached
}

impl Pods {
    /// The events at or after `t`.
    pub(crate) fn since(&self, t: Timestamp) -> Vec<(Timestamp, Seen)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|(at, _, _)| *at >= t)
            .map(|(at, _, s)| (*at, *s))
            .collect()
    }

    /// Waits (at most `limit`) until every Pod created is gone.
    pub(crate) async fn wait_gone(&self, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            let all_gone = {
                let events = self.events.lock().unwrap();
                events.iter().all(|(_, uid, s)| {
                    *s != Seen::Created
                        || events.iter().any(|(_, u, g)| u == uid && *g == Seen::Gone)
                })
            };
            if all_gone {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// One drift check: how long each phase took, and the whole.
pub(crate) struct Check {
    pub(crate) phases: Vec<(Phase, Duration)>,
    pub(crate) total: Duration,
}

/// A step's start and end in the manager's log, at or after `after`.
fn step(log: &[String], after: Timestamp, name: &str) -> Option<(Timestamp, Option<Timestamp>)> {
    let lines: Vec<(Timestamp, String)> = log
        .iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["object"] == "team-a/checked" && v["step"] == name)
        .filter_map(|v| {
            let at: Timestamp = v["timestamp"].as_str()?.parse().ok()?;
            (at >= after).then(|| (at, v["message"].as_str().unwrap_or_default().to_string()))
        })
        .collect();
    let started = lines.iter().find(|(_, m)| m == "step started")?.0;
    let ended = lines
        .iter()
        .find(|(at, m)| *at >= started && m == "step succeeded")
        .map(|(at, _)| *at);
    Some((started, ended))
}

/// The first step the manager logged for the object at or after `after`.
fn first_step(log: &[String], after: Timestamp) -> Option<Timestamp> {
    log.iter()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["object"] == "team-a/checked" && v["message"] == "step started")
        .filter_map(|v| v["timestamp"].as_str()?.parse::<Timestamp>().ok())
        .find(|at| *at >= after)
}

fn span(from: Option<Timestamp>, to: Option<Timestamp>) -> Option<Duration> {
    let (from, to) = (from?, to?);
    (to >= from).then(|| Duration::from_nanos(to.duration_since(from).as_nanos() as u64))
}

impl Check {
    /// The phases of the check asked at `asked` and recorded at `recorded`, from the manager's
    /// `log` and the Pod events seen since.
    pub(crate) fn from_records(
        asked: Timestamp,
        recorded: Timestamp,
        log: &[String],
        pods: &[(Timestamp, Seen)],
        cleanup: bool,
    ) -> Self {
        let pod = |what: Seen| pods.iter().find(|(_, s)| *s == what).map(|(at, _)| *at);
        let first = first_step(log, asked);
        let runner = step(log, asked, "StartRunner");
        let setup = step(log, asked, "Setup");
        // A drift check's plan is the `DetectDrift` step (`plan -refresh-only`).
        let plan = step(log, asked, "DetectDrift").or_else(|| step(log, asked, "Plan"));
        let clean = step(log, asked, "Cleanup").map(|(s, _)| s);
        let runner_asked = runner.map(|(s, _)| s);
        let connected = runner.and_then(|(_, e)| e);
        let mut phases = vec![
            (Phase::Seen, span(Some(asked), first)),
            (Phase::Source, span(first, runner_asked)),
        ];
        if cleanup {
            phases.extend([
                (Phase::PodCreated, span(runner_asked, pod(Seen::Created))),
                (
                    Phase::Scheduled,
                    span(pod(Seen::Created), pod(Seen::Scheduled)),
                ),
                (
                    Phase::Running,
                    span(pod(Seen::Scheduled), pod(Seen::Running)),
                ),
                (Phase::Ready, span(pod(Seen::Running), pod(Seen::Ready))),
                (Phase::Connected, span(pod(Seen::Ready), connected)),
            ]);
        } else {
            phases.push((Phase::Connected, span(runner_asked, connected)));
        }
        let planned = plan.and_then(|(_, e)| e);
        phases.extend([
            (
                Phase::Setup,
                span(setup.map(|(s, _)| s), setup.and_then(|(_, e)| e)),
            ),
            (Phase::Plan, span(plan.map(|(s, _)| s), planned)),
            (
                Phase::Status,
                span(planned, if cleanup { clean } else { Some(recorded) }),
            ),
        ]);
        if cleanup {
            phases.push((Phase::Gone, span(clean, pod(Seen::Gone))));
        }
        Self {
            phases: phases
                .into_iter()
                .filter_map(|(p, d)| d.map(|d| (p, d)))
                .collect(),
            total: span(Some(asked), Some(recorded)).unwrap_or_default(),
        }
    }
}

/// The median, fastest and slowest of `values`, in milliseconds.
pub(crate) fn spread(mut values: Vec<Duration>) -> Option<(f64, f64, f64)> {
    if values.is_empty() {
        return None;
    }
    values.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    Some((
        ms(values[values.len() / 2]),
        ms(values[0]),
        ms(values[values.len() - 1]),
    ))
}

fn cell(values: Vec<Duration>) -> String {
    spread(values).map_or("-".into(), |(m, lo, hi)| {
        format!("{m:.0} ms ({lo:.0}–{hi:.0})")
    })
}

fn of(checks: &[Check], phase: Phase) -> Vec<Duration> {
    checks
        .iter()
        .filter_map(|c| c.phases.iter().find(|(p, _)| *p == phase).map(|(_, d)| *d))
        .collect()
}

/// Prints the phases of both kinds of check and the floor, as Markdown.
pub(crate) fn print(fresh: &[Check], kept: &[Check], floor: &crate::floor::Floor) {
    println!("\n| phase | a Pod per run | the Pod kept |\n| --- | ---: | ---: |");
    for phase in Phase::ALL_PHASES {
        println!(
            "| {} | {} | {} |",
            phase.label(),
            cell(of(fresh, phase)),
            cell(of(kept, phase))
        );
    }
    let totals = |c: &[Check]| c.iter().map(|c| c.total).collect::<Vec<_>>();
    println!(
        "| **request → run recorded** | **{}** | **{}** |",
        cell(totals(fresh)),
        cell(totals(kept))
    );
    let median = |v: Vec<Duration>| spread(v).map_or(0.0, |(m, _, _)| m);
    let (podman, direct) = (median(floor.podman.clone()), median(floor.direct.clone()));
    let in_cluster = median(floor.direct_kubernetes.clone());
    println!("\n| floor | median |\n| --- | ---: |");
    println!("| `podman run --rm` of the runner image | {podman:.0} ms |");
    println!("| `terraform init` + `plan -refresh-only`, direct, local state | {direct:.0} ms |");
    println!(
        "| the same, state in the cluster (kubernetes backend, as the runner's) | {in_cluster:.0} ms |"
    );
    let (fresh, kept) = (median(totals(fresh)), median(totals(kept)));
    println!(
        "\nratios: a Pod per run {:.2}× its floor (podman + direct), {:.2}× with the state in the cluster; the Pod kept {:.2}× the direct commands, {:.2}× with the state in the cluster",
        fresh / (podman + direct),
        fresh / (podman + in_cluster),
        kept / direct,
        kept / in_cluster
    );
}
