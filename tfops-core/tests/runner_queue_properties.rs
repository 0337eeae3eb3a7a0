//! Properties of the queue for runner Pods: the jittered wait stays within its backoff, the
//! queue puts the longest waiter first, and, driving the real decision and driver over the
//! fakes with a quota modelled here, a waiter starts a Pod only in its turn, counts no failure,
//! keeps its wait's start, and every object ends Ready once room comes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use proptest::prelude::*;
use serde_json::json;
use tfops_core::Timestamp;
use tfops_core::api::ObjectKey;
use tfops_core::conditions::{self, ConditionStatus, ConditionType};
use tfops_core::ports::PortError;
use tfops_core::reconcile::queue::{self, Waiter};
use tfops_core::reconcile::{Place, RunnerQueue, Slot, StepKind};
use tfops_core::testing::{FakeOp, FakeWorld};

fn at(ms: i64) -> Timestamp {
    Timestamp::from_millisecond(ms).unwrap()
}

fn waiters() -> impl Strategy<Value = Vec<Waiter>> {
    // Few distinct times, so that equal times (broken by name) are common.
    proptest::collection::btree_map("[a-e]{1,2}", 0i64..5, 0..8).prop_map(|m| {
        m.into_iter()
            .map(|(name, t)| Waiter {
                key: ObjectKey::new("team-a", name),
                since: at(1_800_000_000_000 + t * 1000),
            })
            .collect()
    })
}

proptest! {
    #[test]
    fn the_jittered_wait_stays_within_its_backoff_and_is_the_same_when_asked_again(
        seed in "[a-z0-9/-]{0,40}",
        last in 0i64..4_000_000_000_000,
        retry in 0u64..3_600_000,
        interval in 0u64..86_400_000,
        waited in 0u64..200_000_000,
    ) {
        let (retry, interval) = (Duration::from_millis(retry), Duration::from_millis(interval));
        let backoff = queue::backoff(retry, interval, Duration::from_millis(waited));
        prop_assert!(backoff >= retry && backoff <= interval.max(retry));
        let wait = queue::jitter(&seed, at(last), backoff);
        prop_assert!(wait <= backoff, "{wait:?} > {backoff:?}");
        prop_assert!(wait >= Duration::from_secs(1).min(backoff));
        prop_assert_eq!(wait, queue::jitter(&seed, at(last), backoff));
    }

    #[test]
    fn the_queue_puts_the_longest_waiter_first_whatever_order_it_is_read_in(
        mut ws in waiters(),
        shuffle in any::<u64>(),
    ) {
        let mut read = ws.clone();
        // A rotation and a reversal: another order of reading the same objects.
        if !read.is_empty() {
            let n = read.len();
            read.rotate_left((shuffle as usize) % n);
        }
        if shuffle % 2 == 0 {
            read.reverse();
        }
        queue::order(&mut ws);
        queue::order(&mut read);
        prop_assert_eq!(&ws, &read);
        for w in &ws {
            // The model: one more than those who started earlier, or at the same time with a
            // smaller name.
            let ahead = ws
                .iter()
                .filter(|o| o.since < w.since || (o.since == w.since && o.key < w.key))
                .count();
            let place = queue::place(&ws, &w.key);
            prop_assert_eq!(place, Place { position: ahead + 1, of: ws.len() });
        }
        if let Some(first) = ws.first() {
            prop_assert!(ws.iter().all(|o| o.since >= first.since));
        }
        let newcomer = queue::place(&ws, &ObjectKey::new("team-a", "zz"));
        prop_assert_eq!(newcomer, Place { position: ws.len() + 1, of: ws.len() + 1 });
    }

    #[test]
    fn a_turn_is_given_to_the_first_places_only_and_never_twice_under_the_same_quotas(
        position in 1usize..10,
        waiting in any::<bool>(),
        free in proptest::option::of(0u64..6),
        refused_here in any::<bool>(),
    ) {
        let place = Place { position, of: position + 2 };
        let got = queue::slot(place, waiting, free, refused_here, |f| format!("room for {f}"));
        let p = position as u64;
        let want = match free {
            Some(f) if p > f => Slot::Full { why: format!("room for {f}") },
            _ if refused_here => Slot::Unknown,
            Some(_) => Slot::Free,
            None if waiting && position == 1 => Slot::Free,
            None => Slot::Unknown,
        };
        prop_assert_eq!(got, want);
    }
}

/// One step of a namespace's life with a quota of `slots` Pods.
#[derive(Debug, Clone)]
enum Action {
    /// Reconcile object `i`; `known`: the caller sees the quotas (else it knows nothing).
    Reconcile(usize, bool),
    /// Time passes (seconds).
    Advance(u64),
    /// Pods of something else now hold this much of the quota.
    Others(u64),
    /// Object `i`'s spec changes (a new generation).
    Edit(usize),
}

fn action(objects: usize, slots: u64) -> impl Strategy<Value = Action> {
    prop_oneof![
        8 => (0..objects, proptest::bool::weighted(0.8)).prop_map(|(i, k)| Action::Reconcile(i, k)),
        3 => proptest::sample::select(&[1u64, 5, 16, 60, 700][..]).prop_map(Action::Advance),
        2 => (0..=slots + 1).prop_map(Action::Others),
        1 => (0..objects).prop_map(Action::Edit),
    ]
}

struct Sim {
    w: FakeWorld,
    keys: Vec<ObjectKey>,
    slots: u64,
    others: u64,
    /// When each waiting object started waiting, as first seen.
    entered: BTreeMap<ObjectKey, Timestamp>,
}

impl Sim {
    fn new(objects: usize, slots: u64) -> Self {
        let w = world();
        let spec = json!({"approvePlan": "auto", "remediation": {"retries": 0}});
        let keys = (0..objects)
            .map(|i| w.create(object(&format!("o{i}"), spec.clone())))
            .collect();
        Self {
            w,
            keys,
            slots,
            others: 0,
            entered: BTreeMap::new(),
        }
    }

    /// The queue as a controller that sees every object and the quota would give it.
    fn queue_of(&self, key: &ObjectKey, known: bool) -> RunnerQueue {
        if !known {
            return RunnerQueue::default();
        }
        let waiting: Vec<(Timestamp, ObjectKey)> = self
            .keys
            .iter()
            .filter_map(|k| {
                let o = self.w.object(k)?;
                queue::waiting_since(&o.status).map(|s| (s, k.clone()))
            })
            .collect();
        let me = waiting.iter().find(|(_, k)| k == key).cloned();
        let position = match &me {
            Some(mine) => 1 + waiting.iter().filter(|w| *w < mine).count(),
            None => waiting.len() + 1,
        };
        let of = waiting.len() + usize::from(me.is_none());
        let free = self.slots.saturating_sub(self.others);
        let slot = if position as u64 <= free {
            Slot::Free
        } else {
            Slot::Full {
                why: "no room".into(),
            }
        };
        RunnerQueue {
            place: Some(Place { position, of }),
            slot,
        }
    }

    fn reconcile(
        &mut self,
        i: usize,
        known: bool,
        rt: &tokio::runtime::Runtime,
    ) -> Result<(), TestCaseError> {
        let key = self.keys[i].clone();
        let q = self.queue_of(&key, known);
        // The quota itself: no Pod while others hold all of it.
        if self.others >= self.slots {
            self.w
                .fail_always(FakeOp::Start, PortError::QuotaExhausted("no room".into()));
        } else {
            self.w.heal(FakeOp::Start);
        }
        let before = self.w.object(&key).unwrap();
        let was_waiting = queue::waiting_since(&before.status).is_some();
        let sessions = self.w.lock().sessions;
        let report = rt
            .block_on(self.w.reconcile_queued(&key, q.clone()))
            .unwrap()
            .unwrap();
        let started = self.w.lock().sessions > sessions;
        let tried = report
            .records
            .iter()
            .any(|r| r.step == StepKind::StartRunner);
        if let Slot::Full { .. } = q.slot {
            prop_assert!(!tried, "tried a Pod while told there is no room: {:?}", q);
        }
        if q.slot == Slot::Free && was_waiting {
            prop_assert!(
                started,
                "its turn came and no Pod started: {:?}",
                report.records
            );
        }
        let after = self.w.object(&key).unwrap();
        prop_assert_eq!(after.status.reconciliation_failures, 0);
        prop_assert!(conditions::find(&after.status.conditions, ConditionType::Stalled).is_none());
        let ready = conditions::find(&after.status.conditions, ConditionType::Ready).unwrap();
        match queue::waiting_since(&after.status) {
            Some(since) => {
                prop_assert_eq!(ready.status, ConditionStatus::Unknown);
                let first = *self.entered.entry(key.clone()).or_insert(since);
                prop_assert_eq!(since, first, "the wait's start moved");
                let wait = report.requeue_after.unwrap();
                prop_assert!(wait <= Duration::from_secs(600), "{wait:?}");
            }
            None => {
                self.entered.remove(&key);
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, max_shrink_iters: 1000, ..ProptestConfig::default() })]

    #[test]
    fn waiters_start_only_in_their_turn_and_all_end_ready_once_room_comes(
        (objects, slots, actions) in (1usize..6, 1u64..3).prop_flat_map(|(o, s)| {
            (Just(o), Just(s), proptest::collection::vec(action(o, s), 1..60))
        }),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let mut sim = Sim::new(objects, slots);
        for a in &actions {
            match a {
                Action::Reconcile(i, known) => sim.reconcile(*i, *known, &rt)?,
                Action::Advance(s) => sim.w.advance(Duration::from_secs(*s)),
                Action::Others(n) => sim.others = *n,
                Action::Edit(i) => {
                    let retry = format!("{}s", 15 + actions.len());
                    sim.w.edit(&sim.keys[*i], |s| s.retry_interval = retry);
                }
            }
        }
        // Room comes and stays. Each round reconciles every object (in index order, not the
        // queue's), within the interval: only the queue's turns can start runs, and at least
        // the head's comes each round.
        sim.others = 0;
        for _ in 0..objects {
            sim.w.advance(Duration::from_secs(1));
            for i in 0..objects {
                sim.reconcile(i, true, &rt)?;
            }
        }
        for key in &sim.keys {
            let o = sim.w.object(key).unwrap();
            let ready = conditions::find(&o.status.conditions, ConditionType::Ready).unwrap();
            prop_assert_eq!(ready.status, ConditionStatus::True, "{:?}", ready);
        }
    }
}
