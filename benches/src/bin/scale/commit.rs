//! `--monorepo`: one commit touching one object's path, and what it costs the manager.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::api::Api;
use tfops_kube::Terraform;
use tfops_testcluster::TestCluster;

use super::{ready, requests, watch_until};
/// The directory of object `i` in a monorepo.
pub(super) fn path_of(i: usize) -> String {
    format!("envs/stack-{i:05}-x")
}

/// What one commit touching one object's path cost.
pub(super) struct CommitFigures {
    /// From the commit to the touched object Ready at it.
    pub(super) touched_ready: Duration,
    /// From the commit to every object having it as `lastAttemptedRevision`.
    pub(super) all_seen: Duration,
    /// Objects whose `lastRunAt` moved: runs made (each one starts a runner Pod; a look at a
    /// revision that changed nothing of the object's does not move it).
    pub(super) ran: usize,
    /// The manager's API requests meanwhile.
    pub(super) requests: usize,
}

/// Commits a change under the middle object's path and waits until every object saw it.
pub(super) async fn one_commit(
    cluster: &TestCluster,
    git: &tests::git::GitDaemon,
    api: &Api<Terraform>,
    n: usize,
    deadline: Instant,
) -> anyhow::Result<CommitFigures> {
    let before: BTreeMap<String, Option<jiff::Timestamp>> = api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .map(|t| {
            let ran = t.status.as_ref().and_then(|s| s.last_run_at);
            (t.metadata.name.unwrap_or_default(), ran)
        })
        .collect();
    let touched = n / 2;
    let name = format!("stack-{touched:05}-x");
    let from = cluster.audit().len();
    let committed = Instant::now();
    let commit = git.commit(
        "infra",
        &[(
            format!("{}/main.tf", path_of(touched)).as_str(),
            "resource \"terraform_data\" \"x\" {\n  input = \"changed\"\n}\n",
        )],
    );
    let seen = |t: &Terraform| {
        t.status.as_ref().is_some_and(|s| {
            s.last_attempted_revision
                .as_deref()
                .is_some_and(|r| r.ends_with(&commit))
        })
    };
    let touched_done = {
        let (name, commit) = (name.clone(), commit.clone());
        move |t: &Terraform| {
            t.metadata.name.as_deref() != Some(name.as_str())
                || (ready(t)
                    && t.status.as_ref().is_some_and(|s| {
                        s.last_applied_revision
                            .as_deref()
                            .is_some_and(|r| r.ends_with(&commit))
                    }))
        }
    };
    let (_, touched_at) = watch_until(api, n, deadline, touched_done).await?;
    let (_, all_at) = watch_until(api, n, deadline, seen).await?;
    // The touched object's history and status are written after its Ready: let them land.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = api.list(&Default::default()).await?.items;
    let ran = after
        .iter()
        .filter(|t| {
            let name = t.metadata.name.clone().unwrap_or_default();
            let now = t.status.as_ref().and_then(|s| s.last_run_at);
            before.get(&name).copied().flatten() != now
        })
        .count();
    let requests = requests(cluster, from);
    eprintln!("scale: one commit: requests {requests:?}");
    Ok(CommitFigures {
        touched_ready: touched_at - committed,
        all_seen: all_at - committed,
        ran,
        requests: requests.values().sum(),
    })
}
