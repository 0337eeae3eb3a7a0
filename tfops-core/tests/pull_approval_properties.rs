//! Property test of approvals given on pull requests, carried across the merge. Random
//! histories of pull requests opened, pushed to, planned, reviewed (by approvers, others and
//! the author; approving, asking for changes or commenting; on the head or an older commit),
//! reviews dismissed, merges in any order, main moving, the state changing by hand, a
//! variable changing in the cluster, direct approvals, faults and reconciles (each by a new
//! driver, as after a restart: nothing is kept between them but the cluster's records). The model below says on its own which contents were approved
//! and by whom; the manager's part (recording the approvals of a merged pull request) is
//! played with the product's [`approving`].
//!
//! Invariants after every reconcile: nothing is applied whose content no approver approved
//! (on a pull request, or directly after seeing it pending), and each approval applies its
//! content at most once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use proptest::prelude::*;
use serde_json::json;
use tfops_core::api::{ObjectKey, annotations};
use tfops_core::ports::PullApproval;
use tfops_core::pulls::{Outcome, PullRequest, Review, ReviewState, approving, plan_pull_request};
use tfops_core::testing::{FakeOp, FakeWorld};

const URL: &str = "https://git.example/team/infra.git";
const AUTHORS: [&str; 2] = ["dave", "alice"];
/// alice and bob are approvers; mallory is not.
const REVIEWERS: [&str; 3] = ["alice", "bob", "mallory"];

#[derive(Debug, Clone)]
enum Action {
    /// A pull request by `AUTHORS[.0]` setting `a` to `.1`.
    Open(usize, u8),
    /// A push to pull request `.0` setting `a` to `.1`.
    Push(usize, u8),
    /// The manager plans pull request `.0` at its head.
    Plan(usize),
    /// Reviewer `.1` (an index into `REVIEWERS`, or the author past its end) reviews pull
    /// request `.0` with state `.2`; on an older commit when `.3`.
    Review(usize, usize, u8, bool),
    /// Reviewer `.1`'s latest review of pull request `.0` is dismissed.
    Dismiss(usize, usize),
    Merge(usize),
    /// Pull request `.0` planned at its head, approved there by reviewer `.1` (as in
    /// `Review`), and merged: the path most histories should reach.
    ReviewedAndMerged(usize, usize),
    /// Another change reaches main: `b` becomes `.0`.
    MainMoves(u8),
    /// Someone changes `b` by hand, state and all.
    ChangeState(u8),
    /// A variable of the object is set to `.0` in the cluster.
    SetVar(u8),
    /// A human approves the plan pending now, after seeing it.
    ApproveDirectly,
    /// A run of the object, as the source poller starts it.
    Reconcile,
    /// A run's runner call fails.
    Fail(FakeOp),
    /// Time passes: retries and intervals come due.
    Advance,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        2 => (0..2usize, 0..3u8).prop_map(|(a, v)| Action::Open(a, v)),
        1 => (0..3usize, 0..3u8).prop_map(|(p, v)| Action::Push(p, v)),
        4 => (0..3usize).prop_map(Action::Plan),
        6 => (0..3usize, 0..4usize, 0..4u8, proptest::bool::weighted(0.2))
            .prop_map(|(p, r, s, old)| Action::Review(p, r, s, old)),
        1 => (0..3usize, 0..3usize).prop_map(|(p, r)| Action::Dismiss(p, r)),
        2 => (0..3usize).prop_map(Action::Merge),
        5 => (0..3usize, 0..4usize).prop_map(|(p, r)| Action::ReviewedAndMerged(p, r)),
        1 => Just(Action::Advance),
        1 => (0..3u8).prop_map(Action::MainMoves),
        1 => (0..3u8).prop_map(Action::ChangeState),
        1 => (0..3u8).prop_map(Action::SetVar),
        1 => Just(Action::ApproveDirectly),
        8 => Just(Action::Reconcile),
        1 => prop_oneof![Just(FakeOp::Apply), Just(FakeOp::Plan), Just(FakeOp::Show)]
            .prop_map(Action::Fail),
    ]
}

/// A pull request as the fake forge holds it.
#[derive(Debug, Clone)]
struct Pull {
    number: u64,
    author: String,
    head: String,
    /// Every head it had, oldest first.
    heads: Vec<String>,
    value: u8,
    reviews: Vec<Review>,
    /// The manager's plan of it: (head planned, digest, summary, changes).
    plan: Option<(String, String, tfops_core::ports::PlanSummary, Changes)>,
    merged: bool,
}

struct Model {
    world: FakeWorld,
    key: ObjectKey,
    pulls: Vec<Pull>,
    /// `b` on main.
    main_b: u8,
    counter: u64,
    /// The model's own account of what was approved and not applied since: contents approved
    /// on merged pull requests (one entry per pull request), and the content a human approved
    /// directly.
    approved_on_pulls: Vec<(u64, Changes)>,
    approved_directly: Option<Changes>,
    /// How many applies approvals on pull requests made (the test's reach).
    applied_from_pulls: usize,
}

impl Model {
    fn new(rt: &tokio::runtime::Runtime) -> Self {
        let w = FakeWorld::new(start_time());
        let mut model = Self {
            world: w.clone(),
            key: ObjectKey {
                namespace: String::new(),
                name: String::new(),
            },
            pulls: Vec::new(),
            main_b: 0,
            counter: 0,
            approved_on_pulls: Vec::new(),
            approved_directly: None,
            applied_from_pulls: 0,
        };
        let sha = model.sha();
        w.publish(URL, "main", &sha, &resources(0, 0));
        let pulls = json!({"forge": "gitea", "tokenSecretRef": {"name": "forge"},
            "approvers": {"users": ["alice", "bob"]}});
        model.key = w.create(object(
            "app",
            json!({"approvePlan": "auto", "sourceRef": {"url": URL, "pullRequests": pulls}}),
        ));
        rt.block_on(w.reconcile(&model.key)).unwrap();
        assert_eq!(w.applies(&model.key), 1);
        w.edit(&model.key, |s| s.approve_plan.clear());
        rt.block_on(w.reconcile(&model.key)).unwrap();
        model
    }

    fn sha(&mut self) -> String {
        self.counter += 1;
        format!("{:040x}", self.counter)
    }

    /// The model's rule: the approvers (alice, bob) other than the author whose latest
    /// approving-or-asking review approves `head` and is neither dismissed nor stale.
    fn approvers_of(pull: &Pull, head: &str) -> Vec<String> {
        let mut who = Vec::new();
        for reviewer in ["alice", "bob"] {
            if reviewer == pull.author {
                continue;
            }
            let latest = pull
                .reviews
                .iter()
                .rev()
                .find(|r| r.reviewer == reviewer && r.state != ReviewState::Other);
            if let Some(r) = latest
                && r.state == ReviewState::Approved
                && !r.dismissed
                && !r.stale
                && r.commit == head
            {
                who.push(reviewer.to_string());
            }
        }
        who
    }

    fn apply(
        &mut self,
        action: &Action,
        rt: &tokio::runtime::Runtime,
    ) -> Result<(), TestCaseError> {
        let w = self.world.clone();
        match action.clone() {
            Action::Open(author, value) => {
                if self.pulls.iter().filter(|p| !p.merged).count() < 3 {
                    let head = self.sha();
                    w.commit(&head, &resources(value, self.main_b));
                    self.pulls.push(Pull {
                        number: self.pulls.len() as u64 + 1,
                        author: AUTHORS[author].into(),
                        head: head.clone(),
                        heads: vec![head],
                        value,
                        reviews: Vec::new(),
                        plan: None,
                        merged: false,
                    });
                }
            }
            Action::Push(p, value) => {
                let head = self.sha();
                let main_b = self.main_b;
                if let Some(pull) = self.pulls.get_mut(p).filter(|p| !p.merged) {
                    w.commit(&head, &resources(value, main_b));
                    pull.head = head.clone();
                    pull.heads.push(head);
                    pull.value = value;
                    // As the forge does: reviews of older commits become stale.
                    for r in &mut pull.reviews {
                        r.stale = true;
                    }
                }
            }
            Action::Plan(p) => {
                let Some(pull) = self.pulls.get(p).filter(|p| !p.merged).cloned() else {
                    return Ok(());
                };
                let object = w.object(&self.key).unwrap();
                let request = PullRequest {
                    number: pull.number,
                    head_sha: pull.head.clone(),
                    base_ref: "main".into(),
                    author: pull.author.clone(),
                    from_fork: false,
                    changed_files: vec!["main.tf".into()],
                };
                let made = rt.block_on(plan_pull_request(&w.ports(), &object, &request));
                let plan = match made.plan.outcome {
                    Outcome::Planned { summary, .. } if !made.digest.is_empty() => Some((
                        pull.head.clone(),
                        made.digest,
                        summary,
                        changes_of(&made.json),
                    )),
                    _ => None,
                };
                self.pulls[p].plan = plan;
            }
            Action::Review(p, r, state, old) => {
                let Some(pull) = self.pulls.get_mut(p).filter(|p| !p.merged) else {
                    return Ok(());
                };
                let reviewer = REVIEWERS
                    .get(r)
                    .map_or(pull.author.clone(), |r| r.to_string());
                let commit = if old && pull.heads.len() > 1 {
                    pull.heads[pull.heads.len() - 2].clone()
                } else {
                    pull.head.clone()
                };
                let state = match state {
                    0 | 1 => ReviewState::Approved,
                    2 => ReviewState::RequestChanges,
                    _ => ReviewState::Other,
                };
                pull.reviews.push(Review {
                    reviewer,
                    state,
                    stale: commit != pull.head,
                    commit,
                    dismissed: false,
                });
            }
            Action::Dismiss(p, r) => {
                if let Some(pull) = self.pulls.get_mut(p)
                    && let Some(review) = pull
                        .reviews
                        .iter_mut()
                        .rev()
                        .find(|x| x.reviewer == REVIEWERS[r])
                {
                    review.dismissed = true;
                }
            }
            Action::Merge(p) => self.merge(p),
            Action::ReviewedAndMerged(p, r) => {
                for step in [
                    Action::Plan(p),
                    Action::Review(p, r, 0, false),
                    Action::Merge(p),
                ] {
                    self.apply(&step, rt)?;
                }
            }
            Action::MainMoves(b) => {
                self.main_b = b;
                let sha = self.sha();
                let a = self.main_a();
                w.publish(URL, "main", &sha, &resources(a, b));
            }
            Action::ChangeState(b) => {
                let mut l = w.lock();
                let infra = l.infra.entry(self.key.clone()).or_default();
                infra.real.insert("terraform_data.b".into(), b.to_string());
                infra.state.insert("terraform_data.b".into(), b.to_string());
            }
            Action::SetVar(v) => w.edit(&self.key, |s| {
                s.vars = vec![serde_json::from_value(json!({"name": "n", "value": v})).unwrap()];
            }),
            Action::ApproveDirectly => {
                let o = w.object(&self.key).unwrap();
                let pending = o.status.plan.pending.clone();
                if !pending.is_empty() {
                    let stored = w
                        .lock()
                        .plans
                        .get(&(self.key.clone(), o.spec.workspace.clone()))
                        .cloned();
                    self.approved_directly = stored.map(|s| changes_of(&s.shown.json));
                    let token = self.sha();
                    w.annotate(
                        &self.key,
                        annotations::APPROVE,
                        &format!("{pending}@{token}"),
                    );
                }
            }
            Action::Reconcile => return self.reconcile(rt),
            Action::Advance => w.advance(std::time::Duration::from_secs(900)),
            Action::Fail(op) => w.fail_next(
                op,
                tfops_core::ports::PortError::Terraform("injected".into()),
            ),
        }
        Ok(())
    }

    /// `a` on main: the value of the last merged pull request (0 before any).
    fn main_a(&self) -> u8 {
        self.pulls
            .iter()
            .rev()
            .find(|p| p.merged)
            .map_or(0, |p| p.value)
    }

    /// Merges pull request `p`: main gets its `a` (and keeps its own `b`); the manager records
    /// the approvals of its plan, when that plan is of the head merged.
    fn merge(&mut self, p: usize) {
        let Some(pull) = self.pulls.get(p).filter(|p| !p.merged).cloned() else {
            return;
        };
        self.pulls[p].merged = true;
        let sha = self.sha();
        self.world
            .publish(URL, "main", &sha, &resources(pull.value, self.main_b));
        let Some((head, digest, summary, changes)) = pull.plan.clone() else {
            return;
        };
        if head == pull.head {
            let reviewers = approving(&pull.reviews, &pull.author, &head, |login| {
                matches!(login, "alice" | "bob")
            });
            if !reviewers.is_empty() {
                self.world
                    .lock()
                    .pull_approvals
                    .entry(self.key.clone())
                    .or_default()
                    .push(PullApproval {
                        number: pull.number,
                        head_sha: head.clone(),
                        digest,
                        summary,
                        reviewers,
                    });
            }
            if !Self::approvers_of(&pull, &head).is_empty() {
                self.approved_on_pulls.push((pull.number, changes));
            }
        }
    }

    fn reconcile(&mut self, rt: &tokio::runtime::Runtime) -> Result<(), TestCaseError> {
        let w = self.world.clone();
        let before = w.object(&self.key).unwrap();
        let calls_before = w.lock().calls.len();
        let real_before = w
            .lock()
            .infra
            .get(&self.key)
            .map(|i| i.real.clone())
            .unwrap_or_default();
        let seen = w.polled_revision(&before);
        rt.block_on(w.reconcile_polled(&self.key, Default::default(), seen))
            .map_err(|e| TestCaseError::fail(format!("driver: {e}")))?;
        let real = || {
            w.lock()
                .infra
                .get(&self.key)
                .map(|i| i.real.clone())
                .unwrap_or_default()
        };
        let applied = w.lock().calls[calls_before..]
            .iter()
            .any(|c| c.op == FakeOp::Apply && c.object == self.key);
        if applied {
            let o = w.object(&self.key).unwrap();
            let content = w
                .lock()
                .plans
                .get(&(self.key.clone(), o.spec.workspace.clone()))
                .map(|p| changes_of(&p.shown.json));
            let Some(content) = content else {
                return Err(TestCaseError::fail("an apply with no stored plan"));
            };
            let direct = self.approved_directly.as_ref() == Some(&content);
            let on_pull = self
                .approved_on_pulls
                .iter()
                .position(|(_, c)| *c == content);
            if !direct && on_pull.is_none() {
                return Err(TestCaseError::fail(format!(
                    "applied content no approver approved (or approved once and applied again): \
                     {content:?}; approved on pull requests {:?}, directly {:?}, status {:?}",
                    self.approved_on_pulls, self.approved_directly, before.status.plan
                )));
            }
            // An approval is used once it changed something (a failed apply may be retried
            // with it).
            if real() != real_before {
                if direct {
                    self.approved_directly = None;
                } else if let Some(i) = on_pull {
                    self.approved_on_pulls.remove(i);
                    self.applied_from_pulls += 1;
                }
            }
        }
        // A direct approval is of the plan pending when it was given.
        let o = w.object(&self.key).unwrap();
        let pending = w
            .lock()
            .plans
            .get(&(self.key.clone(), o.spec.workspace.clone()))
            .filter(|_| !o.status.plan.pending.is_empty())
            .map(|p| changes_of(&p.shown.json));
        if self.approved_directly.is_some() && pending != self.approved_directly {
            self.approved_directly = None;
        }
        Ok(())
    }
}

fn resources(a: u8, b: u8) -> Vec<(&'static str, &'static str)> {
    const VALUES: [&str; 3] = ["0", "1", "2"];
    vec![
        ("terraform_data.a", VALUES[usize::from(a) % 3]),
        ("terraform_data.b", VALUES[usize::from(b) % 3]),
    ]
}

/// The property, over random histories; the histories must reach the path under test (an
/// apply an approval on a pull request made) often enough to mean something.
#[test]
fn only_approved_content_is_applied_and_each_approval_once() {
    use proptest::test_runner::{Config, TestRunner};
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut runner = TestRunner::new(Config {
        cases: 256,
        max_shrink_iters: 2000,
        ..Config::default()
    });
    let reached = std::cell::Cell::new(0usize);
    let result = runner.run(&proptest::collection::vec(action(), 1..60), |actions| {
        let mut model = Model::new(&rt);
        for a in &actions {
            model.apply(a, &rt)?;
        }
        reached.set(reached.get() + model.applied_from_pulls);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        reached.get() >= 10,
        "only {} applies from approvals on pull requests in 256 histories",
        reached.get()
    );
}

/// The property test can fail: a manager that counted any approving review would apply what
/// the model says nobody approved.
#[test]
fn an_approval_of_a_non_approver_applies_nothing() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut model = Model::new(&rt);
    for a in [
        Action::Open(0, 1),
        Action::Plan(0),
        Action::Review(0, 2, 0, false),
        Action::Merge(0),
        Action::Reconcile,
    ] {
        model.apply(&a, &rt).unwrap();
    }
    assert_eq!(model.world.applies(&model.key), 1);
    // mallory's approval recorded as if it counted: the model catches the apply.
    let mut model = Model::new(&rt);
    for a in [
        Action::Open(0, 1),
        Action::Plan(0),
        Action::Review(0, 2, 0, false),
    ] {
        model.apply(&a, &rt).unwrap();
    }
    let pull = model.pulls[0].clone();
    let (head, digest, summary, _) = pull.plan.clone().unwrap();
    model.pulls[0].merged = true;
    let sha = model.sha();
    model.world.publish(URL, "main", &sha, &resources(1, 0));
    model.world.lock().pull_approvals.insert(
        model.key.clone(),
        vec![PullApproval {
            number: 1,
            head_sha: head,
            digest,
            summary,
            reviewers: vec!["mallory".into()],
        }],
    );
    assert!(model.apply(&Action::Reconcile, &rt).is_err());
}
