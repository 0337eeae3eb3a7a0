//! The test forge: a real Gitea of the pinned version, its users and tokens made by its own
//! command line, repositories made through its API and filled with `git push`, and nothing
//! left running once it is dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tfops_testcluster::gitea::{GITEA_VERSION, Gitea};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_starts_serves_its_api_takes_pushes_and_stops() {
    let gitea = Gitea::start().await.unwrap();
    let version = gitea
        .call(&gitea.admin, reqwest::Method::GET, "/version", None)
        .await
        .unwrap();
    assert_eq!(version["version"], GITEA_VERSION);
    let me = gitea
        .call(&gitea.reviewer, reqwest::Method::GET, "/user", None)
        .await
        .unwrap();
    assert_eq!(
        (me["login"].as_str(), me["is_admin"].as_bool()),
        (Some("reviewer"), Some(false))
    );

    gitea.create_repo("infra").await.unwrap();
    let first = gitea
        .push(
            &gitea.admin,
            "infra",
            "main",
            &[("envs/a/main.tf", "# a\n")],
            "first",
        )
        .await
        .unwrap();
    let branch = gitea
        .call(
            &gitea.admin,
            reqwest::Method::GET,
            "/repos/tfops-admin/infra/branches/main",
            None,
        )
        .await
        .unwrap();
    assert_eq!(branch["commit"]["id"], first.as_str());

    // A collaborator with write permission pushes a branch of their own.
    gitea
        .add_collaborator("infra", &gitea.reviewer, "write")
        .await
        .unwrap();
    let feature = gitea
        .push(
            &gitea.reviewer,
            "infra",
            "feature",
            &[("envs/a/main.tf", "# b\n")],
            "change a",
        )
        .await
        .unwrap();
    assert_ne!(feature, first);
    let permission = gitea
        .call(
            &gitea.admin,
            reqwest::Method::GET,
            "/repos/tfops-admin/infra/collaborators/reviewer/permission",
            None,
        )
        .await
        .unwrap();
    assert_eq!(permission["permission"], "write");

    let pid = gitea_pid(&gitea);
    drop(gitea);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "gitea {pid} still runs"
    );
}

/// The pid of the fixture's `gitea web` (the process listening on its port).
fn gitea_pid(gitea: &Gitea) -> u32 {
    gitea.pid()
}
