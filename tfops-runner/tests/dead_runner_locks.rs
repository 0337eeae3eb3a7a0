//! A live runner's state lock is never broken. A model of runner Pods over time, written here
//! without the implementation: objects in two namespaces with the same names (so the same Pod
//! names), some sharing one state (a custom backend), Pods that start only once the previous
//! Pod of their name ended (as the API server allows), one command at a time per Pod, commands
//! that take the lock and end normally (releasing it) or die with their Pod (leaving it), Pods
//! with a host name of their own (containers) or sharing the machine's (processes), and locks
//! taken by hosts outside the cluster. Whenever a runner finds its object's state locked, the
//! implementation's judgement (the runner: [`held_by_own_host`] with its [`own_host`]; the
//! controller: [`held_by_own_runner`]) may release the lock only if the model says that the
//! holding command is no longer running.
//!
//! [`own_host`]: tfops_runner::server::own_host
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use proptest::prelude::*;
use tfops_core::naming::{held_by_own_runner, runner_host, runner_pod_name};
use tfops_runner::server::held_by_own_host;

/// An object: (namespace, name).
const OBJECTS: [(&str, &str); 4] = [("a", "app"), ("b", "app"), ("a", "web"), ("b", "web")];

#[derive(Debug, Clone)]
enum Step {
    /// The object's runner Pod starts (if none of its name is alive).
    Start(usize),
    /// The Pod dies (OOM, node loss, deletion): its command with it.
    Kill(usize),
    /// The Pod runs a command on its object's state: if the state is free it takes the lock
    /// and keeps running; if locked, it asks whether the holder is gone.
    Command(usize),
    /// The Pod's command ends normally, releasing the lock it holds.
    Finish(usize),
    /// A host outside the cluster takes the lock of the object's state, if free.
    Outsider(usize),
}

fn step() -> impl Strategy<Value = Step> {
    let o = 0..OBJECTS.len();
    prop_oneof![
        o.clone().prop_map(Step::Start),
        o.clone().prop_map(Step::Kill),
        o.clone().prop_map(Step::Command),
        o.clone().prop_map(Step::Finish),
        o.prop_map(Step::Outsider),
    ]
}

/// Who holds a state's lock, in the model's terms.
#[derive(Debug, Clone, PartialEq)]
enum Holder {
    /// A command of a Pod incarnation: (object, incarnation, command number).
    Command(usize, u32, u32),
    Outsider,
}

#[derive(Debug, Default)]
struct Model {
    /// Per object: its live Pod's incarnation and the command it runs (if any).
    live: BTreeMap<usize, (u32, Option<u32>)>,
    incarnations: BTreeMap<usize, u32>,
    commands: u32,
    /// Per state: the lock's holder and Terraform's `Who` for it.
    locks: BTreeMap<usize, (Holder, String)>,
}

impl Model {
    fn alive(&self, h: &Holder) -> bool {
        match h {
            Holder::Command(o, inc, cmd) => self.live.get(o) == Some(&(*inc, Some(*cmd))),
            // Nothing can tell whether an outside host still runs.
            Holder::Outsider => true,
        }
    }
}

/// The host name a Pod of object `o` has: its own (`spec.hostname`) in a container, the
/// machine's when processes share it.
fn host(o: usize, containers: bool) -> String {
    let (ns, name) = OBJECTS[o];
    if containers {
        runner_host(ns, &runner_pod_name(name))
    } else {
        "vm".into()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_live_runners_lock_is_never_broken(
        steps in proptest::collection::vec(step(), 1..60),
        shared in proptest::collection::vec(0usize..2, OBJECTS.len()),
        containers in any::<bool>(),
    ) {
        // Which state each object uses: its own, or (a custom backend) one of two shared.
        let state_of = |o: usize| if shared[o] == 0 { 100 + o } else { shared[o] };
        let mut m = Model::default();
        for s in steps {
            match s {
                Step::Start(o) => {
                    if !m.live.contains_key(&o) {
                        let inc = m.incarnations.entry(o).or_default();
                        *inc += 1;
                        m.live.insert(o, (*inc, None));
                    }
                }
                Step::Kill(o) => {
                    m.live.remove(&o);
                }
                Step::Finish(o) => {
                    if let Some((inc, Some(cmd))) = m.live.get(&o).copied() {
                        m.live.insert(o, (inc, None));
                        let st = state_of(o);
                        if m.locks.get(&st).is_some_and(|(h, _)| *h == Holder::Command(o, inc, cmd)) {
                            m.locks.remove(&st);
                        }
                    }
                }
                Step::Outsider(o) => {
                    m.locks.entry(state_of(o)).or_insert((Holder::Outsider, "ci@laptop".into()));
                }
                Step::Command(o) => {
                    let Some((inc, None)) = m.live.get(&o).copied() else { continue };
                    m.commands += 1;
                    let cmd = m.commands;
                    let st = state_of(o);
                    match m.locks.get(&st).cloned() {
                        None => {
                            let who = format!("runner@{}", host(o, containers));
                            m.locks.insert(st, (Holder::Command(o, inc, cmd), who));
                            m.live.insert(o, (inc, Some(cmd)));
                        }
                        Some((holder, who)) => {
                            // The runner's judgement, then the controller's.
                            let own_host = containers.then(|| host(o, true));
                            let gone = held_by_own_host(&who, own_host.as_deref());
                            let (ns, name) = OBJECTS[o];
                            let release = gone && held_by_own_runner(ns, name, &who);
                            if release {
                                prop_assert!(
                                    !m.alive(&holder),
                                    "broke the lock of a live holder {holder:?} ({who}) for {ns}/{name}"
                                );
                                m.locks.remove(&st);
                            }
                            // The finding command ends either way (it retries later).
                        }
                    }
                }
            }
        }
    }
}

/// The model's cases above include the one that matters; here it is by hand: a lock left by a
/// killed runner container is released by the next Pod of that name, in containers only.
#[test]
fn a_killed_runners_lock_is_released_by_the_next_pod_of_its_name() {
    let own = runner_host("a", &runner_pod_name("app"));
    let who = format!("runner@{own}");
    assert!(held_by_own_host(&who, Some(&own)));
    assert!(held_by_own_runner("a", "app", &who));
    // The same Pod name in another namespace is another host.
    assert!(!held_by_own_runner("b", "app", &who));
    // Processes sharing the machine's host name prove nothing.
    assert!(!held_by_own_host("runner@vm", None));
}
