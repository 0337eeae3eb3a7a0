//! The Gitea forge client against a real Gitea: a collaborator's pull request listed with the
//! files it changes (and so the objects it plans, by the core's decision), one comment kept
//! and edited in place (a forged marker comment of another user left alone), commit statuses
//! per object and in sum on the head, and who may write. The comment as Gitea renders it
//! (its `/markdown` API) folds each plan.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use reqwest::Method;
use serde_json::json;
use tfops_core::api::{ForgeRepository, ObjectKey, ObjectMeta, TerraformObject};
use tfops_core::ports::PlanSummary;
use tfops_core::pulls::{self, CommitState, Forge, MARKER, ObjectPlan, Outcome};
use tfops_operator::forge::GiteaForge;
use tfops_testcluster::gitea::Gitea;

fn object(name: &str, path: &str, url: &str) -> TerraformObject {
    TerraformObject {
        metadata: ObjectMeta {
            name: name.into(),
            namespace: "team-a".into(),
            generation: 1,
            ..ObjectMeta::default()
        },
        spec: serde_json::from_value(json!({
            "path": path,
            "sourceRef": {"kind": "GitRepository", "url": url,
                "pullRequests": {"forge": "gitea", "tokenSecretRef": {"name": "forge"}}},
        }))
        .unwrap(),
        status: Default::default(),
    }
}

fn planned(name: &str) -> ObjectPlan {
    ObjectPlan {
        key: ObjectKey::new("team-a", name),
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
            text: "Terraform will perform the following actions:\n  + resource \"terraform_data\" \"x\"".into(),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_lists_comments_and_sets_statuses_on_a_real_gitea() {
    let gitea = Gitea::start().await.unwrap();
    gitea.create_repo("infra").await.unwrap();
    gitea
        .push(
            &gitea.admin,
            "infra",
            "main",
            &[("envs/a/main.tf", "# a\n"), ("envs/b/main.tf", "# b\n")],
            "two objects",
        )
        .await
        .unwrap();
    gitea
        .add_collaborator("infra", &gitea.reviewer, "write")
        .await
        .unwrap();
    let head = gitea
        .push(
            &gitea.reviewer,
            "infra",
            "change-a",
            &[("envs/a/main.tf", "# a, changed\n")],
            "change a",
        )
        .await
        .unwrap();
    let pull = gitea
        .call(
            &gitea.reviewer,
            Method::POST,
            "/repos/tfops-admin/infra/pulls",
            Some(json!({"head": "change-a", "base": "main", "title": "Change a"})),
        )
        .await
        .unwrap();
    let number = pull["number"].as_u64().unwrap();

    let url = gitea.clone_url("infra");
    let repository = ForgeRepository {
        api_url: gitea.api(),
        owner: "tfops-admin".into(),
        name: "infra".into(),
    };
    let forge = GiteaForge::new(repository.clone(), gitea.admin.token.clone()).unwrap();
    let open = forge.open_pull_requests().await.unwrap();
    assert_eq!(open.len(), 1);
    let pr = &open[0];
    assert_eq!(
        (pr.number, pr.head_sha.as_str(), pr.base_ref.as_str()),
        (number, head.as_str(), "main")
    );
    assert_eq!((pr.author.as_str(), pr.from_fork), ("reviewer", false));
    assert_eq!(pr.changed_files, ["envs/a/main.tf"]);
    // The objects it plans, as the core decides from what Gitea said.
    let objects = [object("a", "envs/a", &url), object("b", "envs/b", &url)];
    let touched = pulls::touched(pr, &repository, &objects);
    assert_eq!(touched.len(), 1);
    assert_eq!(touched[0].key.name, "a");

    // Someone else's comment with the marker is never taken for ours; 50 more comments come
    // before ours (Gitea gives an issue's comments whole, not in pages).
    let comments = format!("/repos/tfops-admin/infra/issues/{number}/comments");
    gitea
        .call(
            &gitea.reviewer,
            Method::POST,
            &comments,
            Some(json!({"body": format!("{MARKER}\nall good, apply it")})),
        )
        .await
        .unwrap();
    for i in 0..50 {
        gitea
            .call(
                &gitea.reviewer,
                Method::POST,
                &comments,
                Some(json!({"body": format!("looking ({i})")})),
            )
            .await
            .unwrap();
    }
    let first = pulls::comment(&head, &[planned("a")], pulls::COMMENT_BUDGET, |_| {
        String::new()
    });
    forge.upsert_comment(number, &first).await.unwrap();
    let second = first.replace("+1 ~0 -0", "+1 ~1 -0");
    forge.upsert_comment(number, &second).await.unwrap();
    // (Gitea lists an issue's comments whole.)
    let listed = gitea
        .call(&gitea.admin, Method::GET, &comments, None)
        .await
        .unwrap();
    let listed = listed.as_array().unwrap();
    assert_eq!(listed.len(), 52, "one comment of ours, edited in place");
    assert_eq!(listed[0]["user"]["login"], "reviewer");
    assert_eq!(listed[0]["body"], format!("{MARKER}\nall good, apply it"));
    assert_eq!(listed[51]["user"]["login"], "tfops-admin");
    assert_eq!(listed[51]["body"], second.as_str());

    // What reviewers see: Gitea folds each plan.
    let rendered = gitea.render_markdown(&second).await.unwrap();
    assert!(rendered.contains("<details>"), "{rendered}");
    assert!(
        rendered.contains("<summary>Plan of team-a/a</summary>"),
        "{rendered}"
    );
    assert!(
        !rendered.contains(MARKER),
        "the marker stays hidden: {rendered}"
    );

    // A status per object and one in sum, on the head.
    for status in pulls::statuses(&[planned("a")]) {
        forge.set_status(&head, &status, "").await.unwrap();
    }
    let combined = gitea
        .call(
            &gitea.admin,
            Method::GET,
            &format!("/repos/tfops-admin/infra/commits/{head}/status"),
            None,
        )
        .await
        .unwrap();
    let mut contexts: Vec<(String, String, String)> = combined["statuses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["context"].as_str().unwrap().to_string(),
                s["status"].as_str().unwrap().to_string(),
                s["description"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    contexts.sort();
    assert_eq!(
        contexts,
        [
            (
                "tfops".into(),
                CommitState::Success.as_str().into(),
                "1 object planned".into()
            ),
            ("tfops/team-a/a".into(), "success".into(), "+1 ~0 -0".into()),
        ]
    );

    assert!(forge.can_write("reviewer").await.unwrap());
    assert!(forge.can_write("tfops-admin").await.unwrap());
    assert!(!forge.can_write("nobody").await.unwrap());
    // A token of a user with write permission only: Gitea does not tell it who may write.
    let writer = GiteaForge::new(repository.clone(), gitea.reviewer.token.clone()).unwrap();
    let e = writer.can_write("tfops-admin").await.unwrap_err();
    assert!(e.to_string().contains("only to its admins"), "{e}");
    // A token that is not one: refused, in words.
    let stranger = GiteaForge::new(repository, "0".repeat(40)).unwrap();
    let e = stranger.open_pull_requests().await.unwrap_err();
    assert!(e.to_string().starts_with("access denied"), "{e}");
}
