//! Plans of pull requests, decided purely: which objects a pull request plans, which plans a
//! push or a close makes stale, and what the comment and commit statuses say.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::object;
use proptest::prelude::*;
use serde_json::json;
use tfops_core::api::{ForgeRepository, ObjectKey, TerraformObject};
use tfops_core::ports::PlanSummary;
use tfops_core::pulls::{
    self, AGGREGATE_CONTEXT, CommitState, MARKER, ObjectPlan, Outcome, PlanAction, PlanRef,
    PullRequest, Touched,
};

const URL: &str = "http://127.0.0.1:3000/team/infra.git";

fn repository() -> ForgeRepository {
    ForgeRepository {
        api_url: "http://127.0.0.1:3000/api/v1".into(),
        owner: "team".into(),
        name: "infra".into(),
    }
}

fn pulls_block() -> serde_json::Value {
    json!({"forge": "gitea", "tokenSecretRef": {"name": "forge"}})
}

/// An object of the repository at `path`, planning its pull requests.
fn at(name: &str, path: &str, source: serde_json::Value) -> TerraformObject {
    let mut source_ref =
        json!({"kind": "GitRepository", "url": URL, "pullRequests": pulls_block()});
    for (k, v) in source.as_object().unwrap() {
        source_ref[k] = v.clone();
    }
    object(name, json!({"path": path, "sourceRef": source_ref}))
}

fn pull(number: u64, head: &str, files: &[&str]) -> PullRequest {
    PullRequest {
        number,
        head_sha: head.into(),
        base_ref: "main".into(),
        author: "alice".into(),
        from_fork: false,
        changed_files: files.iter().map(|f| f.to_string()).collect(),
    }
}

fn names(touched: &[Touched]) -> Vec<&str> {
    touched.iter().map(|t| t.key.name.as_str()).collect()
}

#[test]
fn a_pull_request_plans_only_the_objects_whose_files_it_changes() {
    let objects = vec![
        at("net", "envs/net", json!({})),
        at(
            "app",
            "envs/app",
            json!({"watchPaths": ["modules/shared/"]}),
        ),
        at("root", "./", json!({})),
        at("pinned", "envs/net", json!({"ref": {"tag": "v1"}})),
        at("release", "envs/net", json!({"ref": {"branch": "release"}})),
        at(
            "elsewhere",
            "envs/net",
            json!({"url": "http://127.0.0.1:3000/team/other.git"}),
        ),
        object(
            "no-pulls",
            json!({"path": "envs/net", "sourceRef": {"kind": "GitRepository", "url": URL}}),
        ),
    ];
    let repo = repository();
    let t = pulls::touched(&pull(1, "h1", &["envs/net/main.tf"]), &repo, &objects);
    assert_eq!(names(&t), ["net", "root"]);
    assert_eq!(t[0].because, "envs/net/main.tf");
    assert_eq!(t[0].path, "envs/net");

    let t = pulls::touched(
        &pull(2, "h2", &["modules/shared/vpc.tf", "README.md"]),
        &repo,
        &objects,
    );
    assert_eq!(
        names(&t),
        ["app", "root"],
        "a shared module counts through watchPaths"
    );

    let mut into_release = pull(3, "h3", &["envs/net/main.tf"]);
    into_release.base_ref = "release".into();
    assert_eq!(
        names(&pulls::touched(&into_release, &repo, &objects)),
        ["release"]
    );

    let nothing = pulls::touched(&pull(4, "h4", &["docs/x.md"]), &repo, &objects[..2]);
    assert!(nothing.is_empty());
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new("team-a", name)
}

fn plan_ref(name: &str, number: u64, head: &str) -> PlanRef {
    PlanRef {
        key: key(name),
        number,
        head_sha: head.into(),
    }
}

fn touching(names: &[&str]) -> Vec<Touched> {
    names
        .iter()
        .map(|n| Touched {
            key: key(n),
            path: format!("envs/{n}"),
            because: format!("envs/{n}/main.tf"),
        })
        .collect()
}

#[test]
fn a_push_supersedes_the_plans_of_the_earlier_head_and_a_close_removes_them() {
    let open = vec![(pull(7, "h1", &[]), touching(&["net"]), true)];
    assert_eq!(
        pulls::plans_to_make(&open, &[]),
        [PlanAction::Make(plan_ref("net", 7, "h1"))]
    );
    let stored = vec![plan_ref("net", 7, "h1")];
    assert!(
        pulls::plans_to_make(&open, &stored).is_empty(),
        "planned once"
    );

    let pushed = vec![(pull(7, "h2", &[]), touching(&["net", "app"]), true)];
    assert_eq!(
        pulls::plans_to_make(&pushed, &stored),
        [
            PlanAction::Remove(plan_ref("net", 7, "h1")),
            PlanAction::Make(plan_ref("app", 7, "h2")),
            PlanAction::Make(plan_ref("net", 7, "h2")),
        ]
    );
    // A push that no longer touches `app` removes its plan; closing removes everything.
    let stored = vec![plan_ref("net", 7, "h2"), plan_ref("app", 7, "h2")];
    let reverted = vec![(pull(7, "h3", &[]), touching(&["net"]), true)];
    assert_eq!(
        pulls::plans_to_make(&reverted, &stored),
        [
            PlanAction::Remove(plan_ref("app", 7, "h2")),
            PlanAction::Remove(plan_ref("net", 7, "h2")),
            PlanAction::Make(plan_ref("net", 7, "h3")),
        ]
    );
    assert_eq!(
        pulls::plans_to_make(&[], &stored),
        [
            PlanAction::Remove(plan_ref("app", 7, "h2")),
            PlanAction::Remove(plan_ref("net", 7, "h2")),
        ]
    );
    // An untrusted head is not planned, and a plan of its earlier (asked-for) head goes.
    let untrusted = vec![(pull(7, "h4", &[]), touching(&["net"]), false)];
    assert_eq!(
        pulls::plans_to_make(&untrusted, &[plan_ref("net", 7, "h3")]),
        [PlanAction::Remove(plan_ref("net", 7, "h3"))]
    );
}

fn planned(name: &str, text: &str) -> ObjectPlan {
    ObjectPlan {
        key: key(name),
        path: format!("envs/{name}"),
        outcome: Outcome::Planned {
            summary: PlanSummary {
                add: 1,
                change: 0,
                destroy: 0,
            },
            replaced: vec![],
            warnings: vec![],
            denials: vec![],
            text: text.into(),
        },
    }
}

fn hint(k: &ObjectKey) -> String {
    format!("the whole plan: tfops pr show {}", k.name)
}

#[test]
fn the_comment_says_each_object_once_and_folds_each_plan() {
    let mut denied = planned("db", "  + resource \"x\" \"y\" {}");
    if let Outcome::Planned {
        denials, replaced, ..
    } = &mut denied.outcome
    {
        denials.push("no-public-db/deny: databases must be private".into());
        replaced.push("aws_db_instance.main".into());
    }
    let failed = ObjectPlan {
        key: key("app"),
        path: "envs/app".into(),
        outcome: Outcome::Failed {
            reason: "TFExecPlanFailed".into(),
            message: "Error: Reference to undeclared input variable\n  on main.tf line 2".into(),
        },
    };
    let plans = vec![
        planned(
            "net",
            "Terraform will perform the following actions:\n  + a",
        ),
        denied,
        failed,
    ];
    let c = pulls::comment("0123456789abcdef0123", &plans, 60_000, hint);
    assert!(c.starts_with(MARKER), "{c}");
    assert!(
        c.contains("Planned at `0123456789ab`, the pull request's head"),
        "{c}"
    );
    assert!(
        c.contains("- ✅ **team-a/net** (`envs/net`): `+1 ~0 -0`\n"),
        "{c}"
    );
    assert!(
        c.contains("- ❌ **team-a/db** (`envs/db`): `+1 ~0 -0`, **denied by policy**: `no-public-db/deny: databases must be private`, **replaces** `aws_db_instance.main`"),
        "{c}"
    );
    assert!(
        c.contains("- ❌ **team-a/app** (`envs/app`): plan failed (`TFExecPlanFailed`): `Error: Reference to undeclared input variable on main.tf line 2`"),
        "{c}"
    );
    assert!(
        c.contains(
            "<details><summary>Plan of team-a/net</summary>\n\n```text\nTerraform will perform"
        ),
        "{c}"
    );
    assert_eq!(
        c.matches("<details>").count(),
        2,
        "no fold for a failed plan"
    );

    let nothing = pulls::comment("h", &[], 60_000, hint);
    assert!(nothing.contains("nothing to plan"), "{nothing}");
    assert!(pulls::closed(true).starts_with(MARKER));
}

/// What a pull request controls (resource addresses, Terraform's error text) stays inside code
/// spans it cannot close, and long lists are cut.
#[test]
fn text_from_the_pull_request_cannot_escape_its_summary_line() {
    let mut hostile = planned("net", "x");
    if let Outcome::Planned { replaced, .. } = &mut hostile.outcome {
        replaced.push("a` <!-- hidden".into());
        replaced.extend((0..14).map(|i| format!("r{i}")));
    }
    let failed = ObjectPlan {
        key: key("app"),
        path: "envs/app".into(),
        outcome: Outcome::Failed {
            reason: "TFExecPlanFailed".into(),
            message: "Error: ``x`` [click](http://evil) <!--\n- ✅ fake line".into(),
        },
    };
    let c = pulls::comment("h", &[hostile, failed], 60_000, hint);
    assert!(c.contains("**replaces** ``a` <!-- hidden``, `r0`"), "{c}");
    assert!(c.contains("`r8`, and 5 more"), "{c}");
    assert!(
        c.contains("plan failed (`TFExecPlanFailed`): ```Error: ``x`` [click](http://evil) <!-- - ✅ fake line```"),
        "{c}"
    );
    assert_eq!(c.matches("\n- ").count(), 2, "one line per object: {c}");
}

#[test]
fn a_plan_holding_backticks_cannot_close_its_fence() {
    let c = pulls::comment("h", &[planned("net", "a ``` b ```` c")], 60_000, hint);
    assert!(c.contains("`````text\na ``` b ```` c\n`````"), "{c}");
}

#[test]
fn statuses_name_each_object_and_sum_them_up() {
    let s = pulls::statuses(&[planned("net", "x")]);
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].context, "tfops/team-a/net");
    assert_eq!(
        (s[0].state, s[0].description.as_str()),
        (CommitState::Success, "+1 ~0 -0")
    );
    assert_eq!(s[1].context, AGGREGATE_CONTEXT);
    assert_eq!(s[1].state, CommitState::Success);

    let planning = ObjectPlan {
        key: key("app"),
        path: "envs/app".into(),
        outcome: Outcome::Planning,
    };
    let s = pulls::statuses(&[planned("net", "x"), planning.clone()]);
    assert_eq!(s[2].state, CommitState::Pending);
    let failed = ObjectPlan {
        outcome: Outcome::Failed {
            reason: "TFExecPlanFailed".into(),
            message: "x".repeat(500),
        },
        ..planning
    };
    let s = pulls::statuses(&[planned("net", "x"), failed]);
    assert_eq!(s[1].state, CommitState::Failure);
    assert_eq!(
        s[1].description.chars().count(),
        140,
        "cut to what forges keep"
    );
    assert_eq!(
        (s[2].state, s[2].description.as_str()),
        (CommitState::Failure, "1 of 2 objects failed or denied")
    );
    let none = pulls::statuses(&[]);
    assert_eq!(none.len(), 1);
    assert_eq!(none[0].state, CommitState::Success);
}

proptest! {
    /// Applying the actions to what is stored leaves exactly the plans of the open, plannable
    /// pull requests at their current heads: nothing made twice, nothing wanted removed.
    #[test]
    fn stored_plans_become_exactly_the_current_heads(
        prs in proptest::collection::vec((0u64..4, 0u8..3, proptest::collection::btree_set(0u8..4, 0..4), any::<bool>()), 0..4),
        stored in proptest::collection::vec((0u8..4, 0u64..4, 0u8..3), 0..8),
    ) {
        let mut seen = std::collections::BTreeSet::new();
        let open: Vec<_> = prs
            .into_iter()
            .filter(|(n, ..)| seen.insert(*n))
            .map(|(n, head, objects, allowed)| {
                let names: Vec<String> = objects.iter().map(|o| format!("o{o}")).collect();
                let refs: Vec<&str> = names.iter().map(String::as_str).collect();
                (pull(n, &format!("h{head}"), &[]), touching(&refs), allowed)
            })
            .collect();
        let stored: Vec<PlanRef> = stored
            .into_iter()
            .map(|(o, n, h)| plan_ref(&format!("o{o}"), n, &format!("h{h}")))
            .collect();
        let actions = pulls::plans_to_make(&open, &stored);
        let mut after: std::collections::BTreeSet<PlanRef> = stored.iter().cloned().collect();
        for a in &actions {
            match a {
                PlanAction::Make(p) => {
                    prop_assert!(!stored.contains(p), "made again: {p:?}");
                    after.insert(p.clone());
                }
                PlanAction::Remove(p) => {
                    after.remove(p);
                }
            }
        }
        let wanted: std::collections::BTreeSet<PlanRef> = open
            .iter()
            .filter(|(_, _, allowed)| *allowed)
            .flat_map(|(p, t, _)| t.iter().map(|t| plan_ref(&t.key.name, p.number, &p.head_sha)))
            .collect();
        prop_assert_eq!(after, wanted);
    }

    /// Every summary line stays, the comment keeps within its budget when they fit, a plan is
    /// shown whole or left out, and a plan is left out only when every longer one is too.
    #[test]
    fn the_comment_keeps_its_budget_and_leaves_the_longest_plans_out_first(
        sizes in proptest::collection::vec(1usize..3_000, 1..8),
        budget in 1_500usize..12_000,
    ) {
        let plans: Vec<ObjectPlan> = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| planned(&format!("o{i}"), &format!("{i}:{}", "x".repeat(*n))))
            .collect();
        let c = pulls::comment("h", &plans, budget, hint);
        let bare = pulls::comment("h", &plans, 0, hint);
        for i in 0..plans.len() {
            prop_assert!(c.contains(&format!("**team-a/o{i}** (`envs/o{i}`)")), "summary {i} lost");
        }
        if bare.len() <= budget {
            prop_assert!(c.len() <= budget, "{} > {budget}", c.len());
        }
        let shown: Vec<bool> = sizes
            .iter()
            .enumerate()
            .map(|(i, n)| c.contains(&format!("{i}:{}\n", "x".repeat(*n))))
            .collect();
        for (i, n) in sizes.iter().enumerate() {
            if !shown[i] {
                let pointer = hint(&key(&format!("o{i}")));
                prop_assert!(c.contains(&pointer), "no pointer for o{}", i);
                for (j, m) in sizes.iter().enumerate() {
                    prop_assert!(!(shown[j] && m > n), "o{j} ({m}) shown though o{i} ({n}) was left out");
                }
            }
        }
    }
}

mod trust {
    use super::*;
    use std::collections::BTreeSet;
    use tfops_core::pulls::{PullComment, Trust, trust};

    const HEAD: &str = "abcdef0123456789abcdef0123456789abcdef01";

    fn by(author: &str, fork: bool) -> PullRequest {
        PullRequest {
            author: author.into(),
            from_fork: fork,
            ..pull(3, HEAD, &[])
        }
    }

    fn writers(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn said(author: &str, body: &str) -> PullComment {
        PullComment {
            author: author.into(),
            body: body.into(),
        }
    }

    #[test]
    fn collaborators_are_trusted_by_default_and_a_list_replaces_them() {
        let w = writers(&["alice", "bob"]);
        assert_eq!(
            trust(&by("alice", false), &[], &w, &[]),
            Trust::Author("alice".into())
        );
        let t = trust(&by("mallory", false), &[], &w, &[]);
        assert!(!t.allows());
        let Trust::Untrusted(why) = t else {
            unreachable!()
        };
        assert!(
            why.starts_with("not planned: mallory has no write permission"),
            "{why}"
        );
        assert!(
            why.contains(&format!("`/tfops plan {HEAD}`")),
            "says how: {why}"
        );
        // With a list, only the list: a writer not on it is not trusted.
        let list = vec!["carol".to_string()];
        assert!(!trust(&by("alice", false), &list, &w, &[]).allows());
        assert!(trust(&by("carol", false), &list, &w, &[]).allows());
    }

    #[test]
    fn a_forks_author_is_trusted_only_when_listed() {
        let w = writers(&["alice"]);
        let t = trust(&by("alice", true), &[], &w, &[]);
        let Trust::Untrusted(why) = t else {
            panic!("{t:?}")
        };
        assert!(
            why.contains("from a fork and is not in trustedAuthors"),
            "{why}"
        );
        assert!(trust(&by("alice", true), &["alice".into()], &w, &[]).allows());
    }

    #[test]
    fn a_trusted_user_plans_an_untrusted_head_by_naming_it() {
        let w = writers(&["alice", "mallory"]);
        let pr = by("eve", false);
        let asked = |c: &[PullComment]| trust(&pr, &[], &w, c);
        assert_eq!(
            asked(&[said("alice", &format!("Read it.\n/tfops plan {HEAD}"))]),
            Trust::AskedBy("alice".into())
        );
        assert_eq!(
            asked(&[said(
                "alice",
                &format!("/tfops plan {}", HEAD.to_uppercase())
            )]),
            Trust::AskedBy("alice".into())
        );
        let other = "1234567890abcdef1234567890abcdef12345678";
        for (who, body) in [
            ("alice", "/tfops plan".to_string()), // no head named
            // A prefix, however long: a commit can be made to start with it.
            ("alice", format!("/tfops plan {}", &HEAD[..12])),
            ("alice", format!("/tfops plan {}", &HEAD[..39])),
            ("alice", format!("/tfops plan {other}")), // another head (an earlier push)
            ("alice", format!("/tfops plan {HEAD} please")), // not the command alone
            ("alice", format!("please /tfops plan {HEAD}")), // not at the line's start
            ("eve", format!("/tfops plan {HEAD}")),    // the author vouching for themselves
            ("stranger", format!("/tfops plan {HEAD}")), // someone untrusted
        ] {
            assert!(!asked(&[said(who, &body)]).allows(), "{who}: {body}");
        }
        // The author, even with write permission, cannot vouch for themselves either way:
        // they are trusted as the author.
        let w = writers(&["eve"]);
        assert_eq!(trust(&pr, &[], &w, &[]), Trust::Author("eve".into()));
    }

    proptest! {
        /// A comment naming anything but the whole head (a prefix included) never plans it,
        /// whoever wrote it.
        #[test]
        fn a_command_for_another_head_never_counts(
            sha in "[0-9a-f]{1,40}",
            who in prop::sample::select(vec!["alice", "bob", "eve"]),
        ) {
            prop_assume!(sha != HEAD);
            let t = trust(&by("eve", false), &[], &writers(&["alice"]), &[said(who, &format!("/tfops plan {sha}"))]);
            prop_assert!(!t.allows(), "{t:?}");
        }
    }
}
