//! The operator with its runner Pods as real containers, run by the node agent with podman and
//! runc from the runner image `scripts/build-images` built: an object goes to Ready (its state
//! written by Terraform's kubernetes backend from inside the container, through the in-cluster
//! configuration), and, read from inside the runner container while it applies, the promise
//! of the runner Pod (docs/security.md) holds: UID 65532, no capabilities, seccomp filtering, no privilege escalation, a
//! read-only root, writable `/tmp` and `/home/runner`, the TLS Secret mounted read-only, and no
//! ServiceAccount token but its own Pod's.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use base64::Engine;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use support::operator::{Operator, applying, hungry, memory_limit, ready_with, says, slow};

/// `podman exec` in the container running the Pod with `uid`, as the container's user:
/// (whether it succeeded, its output).
fn exec(uid: &str, script: &str) -> (bool, String) {
    let out = std::process::Command::new("podman")
        .args(["--runtime", "runc", "exec", &format!("tfops-pod-{uid}")])
        .args(["/bin/bash", "-c", script])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// The claims of a JSON Web Token.
fn claims(token: &str) -> Value {
    let payload = token.trim().split('.').nth(1).unwrap();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// The time from the first runner Pod's creation (as this watch saw it) to its Ready condition.
fn time_to_ready(admin: kube::Client) -> tokio::task::JoinHandle<Vec<Duration>> {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(admin, "team-a");
        let config = watcher::Config::default().labels("app.kubernetes.io/name=tf-runner");
        let mut events = std::pin::pin!(watcher(pods, config));
        let mut seen: std::collections::HashMap<String, (Instant, bool)> = Default::default();
        let mut times = Vec::new();
        while let Some(Ok(e)) = events.next().await {
            let (watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = e else {
                continue;
            };
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let entry = seen.entry(uid).or_insert((Instant::now(), false));
            let ready = p
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if ready && !entry.1 {
                entry.1 = true;
                times.push(entry.0.elapsed());
                if !times.is_empty() {
                    return times;
                }
            }
        }
        times
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runner_containers_apply_to_ready_hardened_as_seed_002_promises() {
    let op = Operator::start_in_containers().await;
    let timing = time_to_ready(op.admin.clone());
    // The apply waits until the checks below are done (they take a `podman exec` each).
    op.git.commit("infra", &[("main.tf", &until_told())]);
    op.apply(&op.manifest(
        "boxed",
        json!({"approvePlan": "auto", "writeOutputsToSecret": {"name": "boxed-outputs"}}),
    ));
    applying(&op, "boxed").await;

    // Inside the runner container, while it applies.
    let pods: Api<Pod> = Api::namespaced(op.admin.clone(), "team-a");
    let running = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=tf-runner"))
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .expect("a runner Pod runs the apply");
    let ip = running.status.as_ref().unwrap().pod_ip.clone().unwrap();
    assert!(
        ip.starts_with("10.88."),
        "the runner's Pod IP is on the bridge: {ip}"
    );
    let uid = running.metadata.uid.clone().unwrap();
    let (_, status) = exec(&uid, "cat /proc/1/status");
    for line in [
        "Uid:\t65532\t65532\t65532\t65532",
        "CapEff:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
    ] {
        assert!(
            status.lines().any(|l| l == line),
            "{line:?} not in:\n{status}"
        );
    }
    assert!(!exec(&uid, "touch /written").0, "the root is read-only");
    assert!(exec(&uid, "touch /tmp/x && touch /home/runner/x").0);
    let (ok, tls) = exec(&uid, "cat /run/tfops/tls/tls.key");
    assert!(
        ok && tls.contains("PRIVATE KEY"),
        "the TLS key is readable: {tls}"
    );
    assert!(
        !exec(&uid, "touch /run/tfops/tls/other").0,
        "the TLS mount is read-only"
    );
    // Debian's /var/run is /run: each token file is counted once, by its real path.
    let (_, secrets) = exec(
        &uid,
        "find /var/run/secrets /run/secrets -name token 2>/dev/null | xargs -n1 readlink -f | sort -u",
    );
    assert_eq!(
        secrets.trim(),
        "/run/secrets/kubernetes.io/serviceaccount/token",
        "one token"
    );
    let (_, token) = exec(
        &uid,
        "cat /var/run/secrets/kubernetes.io/serviceaccount/token",
    );
    let k8s = &claims(&token)["kubernetes.io"];
    assert_eq!(k8s["pod"]["name"], json!(running.metadata.name));
    assert_eq!(k8s["serviceaccount"]["name"], "tf-runner");
    std::fs::write(in_container(&uid, "/tmp/checked"), "").unwrap();

    let t = op
        .wait_for("boxed", "applied", 240, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    assert!(t.status.unwrap().binary.unwrap().starts_with("terraform "));
    // Terraform's kubernetes backend wrote the state from inside the container.
    let secrets: Api<Secret> = Api::namespaced(op.admin.clone(), "team-a");
    let state = secrets.get("tfstate-default-boxed").await.unwrap();
    assert!(state.data.unwrap().contains_key("tfstate"));
    let outputs = secrets.get("boxed-outputs").await.unwrap();
    assert_eq!(outputs.data.unwrap()["greeting"].0, b"hello");
    let times = tokio::time::timeout(Duration::from_secs(5), timing)
        .await
        .map(Result::unwrap)
        .unwrap_or_default();
    eprintln!("figure: runner container Pod created -> Ready: {times:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runner_container_oom_killed_mid_apply_converges_with_no_human() {
    let op = Operator::start_in_containers().await;
    // The apply grows without bound as soon as it runs (and so does any retry, in a new Pod).
    op.git.commit("infra", &[("main.tf", &hungry(None))]);
    op.apply(&op.manifest(
        "greedy",
        json!({"approvePlan": "auto", "runner": memory_limit("256Mi")}),
    ));
    let expected = "runner Pod team-a/greedy-tf-runner died: killed (OOMKilled: over its memory limit, exit code 137)";
    op.wait_for("greedy", "reported the OOM kill", 210, move |t| {
        says(t, expected)
    })
    .await;
    // The configuration is made to fit; nobody touches the killed apply's lock.
    op.git.commit("infra", &[("main.tf", &slow(0))]);
    op.wait_for("greedy", "applied again", 240, |t| {
        ready_with(t, "TerraformAppliedSucceed")
    })
    .await;
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(op.admin.clone(), "team-a");
    let released = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .any(|e| {
            e.involved_object.name.as_deref() == Some("greedy")
                && e.reason.as_deref() == Some("LockHolderGone")
        });
    assert!(released, "the dead runner's lock was released, and said so");
    nothing_left(&op).await;

    // The limit cut below what an apply uses while it runs (as an in-place resize does): the
    // container is OOM-killed, and the runtime's own processes in the Pod's cgroup (podman's
    // monitor, its cleanup) must not stay held at that limit.
    op.git.commit("infra", &[("main.tf", &grows_once_cut())]);
    applying(&op, "greedy").await;
    let pods: Api<Pod> = Api::namespaced(op.admin.clone(), "team-a");
    let uid = pods
        .get("greedy-tf-runner")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let waiting = in_container(&uid, "/tmp/waiting");
    let began = Instant::now();
    while !waiting.exists() {
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "the cut resource never ran"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let grow = in_container(&uid, "/tmp/grow");
    let node = op.cluster.node().unwrap();
    assert!(node.set_memory_limit("team-a", "greedy-tf-runner", 1 << 20));
    // Written from the host at once, so the file is not charged to the Pod's memory and the
    // hog is the next to ask for memory.
    std::fs::write(grow, "").unwrap();
    op.wait_for("greedy", "reported the OOM kill of the cut", 90, move |t| {
        says(t, expected)
    })
    .await;
    op.git.commit("infra", &[("main.tf", &slow(0))]);
    // The killed apply's resource never reached the state: the next plan may have nothing to do.
    op.wait_for("greedy", "Ready after the cut", 240, |t| {
        ready_with(t, "TerraformAppliedSucceed") || ready_with(t, "TerraformPlannedNoChanges")
    })
    .await;
    nothing_left(&op).await;
}

/// [`slow`]`(0)` and a resource whose apply says it runs (`/tmp/waiting`), waits for the file
/// `/tmp/grow`, then grows ([`GROW`](support::operator::GROW)). It waits with bash's own
/// `read -t` on a FIFO nobody writes (opened before it says it runs), starting no process:
/// after the limit is cut, a new process would be refused memory in the kernel (a failed
/// fork, not an OOM kill). A retry in a new Pod, which nobody tells to grow, gives up after
/// two minutes and succeeds.
fn grows_once_cut() -> String {
    let script = format!(
        "mkfifo /tmp/never; exec 3<>/tmp/never; : > /tmp/waiting; n=0; until [ -e /tmp/grow ] || [ $n -ge 1200 ]; do read -t 0.1 -u 3 line; n=$((n+1)); done; [ -e /tmp/grow ] || exit 0; {}",
        support::operator::GROW
    );
    format!(
        "{}\nresource \"terraform_data\" \"cut\" {{\n  provisioner \"local-exec\" {{\n    interpreter = [\"/bin/bash\", \"-c\"]\n    command = \"{script}\"\n  }}\n}}\n",
        slow(0)
    )
}

/// [`slow`]`(0)`'s configuration, whose apply waits until the file `/tmp/checked` exists in
/// its container (two minutes at most), so that a test looks inside it while it applies.
fn until_told() -> String {
    let sleeps = "command = \"sleep 0\"";
    assert!(slow(0).contains(sleeps));
    slow(0).replace(
        sleeps,
        "command = \"n=0; while [ ! -e /tmp/checked ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n+1)); done\"",
    )
}

/// `path` inside the container running the Pod with `uid`, as the host reaches it (through its
/// first process's root).
fn in_container(uid: &str, path: &str) -> std::path::PathBuf {
    let out = std::process::Command::new("podman")
        .args(["--runtime", "runc", "inspect", "--format", "{{.State.Pid}}"])
        .arg(format!("tfops-pod-{uid}"))
        .output()
        .unwrap();
    let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && !pid.is_empty(),
        "no container of Pod {uid}"
    );
    std::path::PathBuf::from(format!("/proc/{pid}/root{path}"))
}

/// Once the runner Pods are gone, nothing of them is left on the host: no cgroup, no process
/// (the node agent's [`leftovers`](tfops_testcluster::node::NodeAgent::leftovers)); half a
/// minute for the runtime's monitor to end after its container.
async fn nothing_left(op: &Operator) {
    let pods: Api<Pod> = Api::namespaced(op.admin.clone(), "team-a");
    let began = Instant::now();
    loop {
        let live: std::collections::HashSet<String> = pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|p| p.metadata.uid)
            .collect();
        let left = op.cluster.node().unwrap().leftovers(&live);
        if left.is_empty() {
            return;
        }
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "left on the host: {left:#?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_runner_pod_deleted_mid_apply_stops_politely_and_nothing_is_created_twice() {
    let op = Operator::start_in_containers().await;
    // `terraform_data.x` is created at once; `slow` sleeps in its provisioner.
    op.git.commit("infra", &[("main.tf", &slow(120))]);
    op.apply(&op.manifest("polite", json!({"approvePlan": "auto"})));
    applying(&op, "polite").await;
    let pods: Api<Pod> = Api::namespaced(op.admin.clone(), "team-a");
    let pod = pods.get("polite-tf-runner").await.unwrap();
    let uid = pod.metadata.uid.clone().unwrap();
    // Wait until Terraform has created `x` (its log says so), then delete the Pod as a drain
    // would: the runner gets SIGTERM, Terraform an interrupt and the grace period.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let logs = pods
            .logs("polite-tf-runner", &kube::api::LogParams::default())
            .await
            .unwrap_or_default();
        if logs.contains("terraform_data.x: Creation complete") {
            break;
        }
        assert!(Instant::now() < deadline, "x was never created:\n{logs}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pods.delete("polite-tf-runner", &kube::api::DeleteParams::default())
        .await
        .unwrap();
    let gone = Instant::now();
    while pods
        .get_opt("polite-tf-runner")
        .await
        .unwrap()
        .is_some_and(|p| p.metadata.uid.as_deref() == Some(&uid))
    {
        assert!(
            gone.elapsed() < Duration::from_secs(60),
            "the runner Pod never went"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stopped = op
        .cluster
        .node()
        .unwrap()
        .stopped_by_sigterm("team-a", "polite-tf-runner");
    assert_eq!(stopped, Some(true), "stopped within its grace period");
    // Terraform wrote what it had created before it exited.
    let after_stop = support::state::state_ids(&op, "polite").await;
    let x = after_stop
        .get("terraform_data.x")
        .cloned()
        .expect("the state records x, created before the stop");
    assert!(!x.is_empty());
    // The apply is made quick; the retry converges and x is the same resource.
    op.git.commit("infra", &[("main.tf", &slow(0))]);
    op.wait_for("polite", "applied again", 240, |t| {
        ready_with(t, "TerraformAppliedSucceed")
    })
    .await;
    let last = support::state::state_ids(&op, "polite").await;
    assert_eq!(
        last.get("terraform_data.x"),
        Some(&x),
        "x was not created twice"
    );
    assert!(last.contains_key("terraform_data.slow"));
}

/// A drift check (a reconcile request on an unchanged object) end to end: the time from the
/// request to its run recorded in the history, which finds no drift and applies nothing; and
/// the time the first runner Pod took from creation to Ready.
async fn drift_check(op: &Operator) -> (Duration, Vec<Duration>) {
    let timing = time_to_ready(op.admin.clone());
    op.apply(&op.manifest("checked", json!({"approvePlan": "auto"})));
    op.wait_for("checked", "became Ready", 240, |t| {
        ready_with(t, "TerraformAppliedSucceed")
    })
    .await;
    op.wait_for_runs("checked", 1).await;
    let asked = Instant::now();
    op.terraforms()
        .patch(
            "checked",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                json!({"metadata": {"annotations": {"infra.argocd.io/reconcile": "check-1"}}}),
            ),
        )
        .await
        .unwrap();
    op.wait_for_runs("checked", 2).await;
    let took = asked.elapsed();
    let maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(op.admin.clone(), "team-a");
    let history = maps
        .get(&tfops_kube::history::history_name("checked"))
        .await
        .unwrap();
    let runs: Vec<Value> = serde_json::from_str(&history.data.unwrap()["runs.json"]).unwrap();
    // Newest first: the drift check succeeded, found nothing, applied nothing.
    let check = &runs[0];
    assert_eq!(check["trigger"], "reconcile requested", "{check:#}");
    assert_eq!(check["result"], "Succeeded", "{check:#}");
    assert_eq!(check["applied"], false, "{check:#}");
    assert!(check.get("drifted").is_none(), "{check:#}");
    let ready = tokio::time::timeout(Duration::from_secs(5), timing)
        .await
        .map(Result::unwrap)
        .unwrap_or_default();
    (took, ready)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_drift_check_works_alike_on_container_and_process_runners() {
    let containers = Operator::start_in_containers().await;
    let in_container = drift_check(&containers).await;
    drop(containers);
    let processes = Operator::start().await;
    let in_process = drift_check(&processes).await;
    // Figures for benches/README.md, not assertions (a wall-clock time is never asserted).
    eprintln!(
        "figure: drift check end to end, and runner Pod created -> Ready: container runner {in_container:?}, process runner {in_process:?}"
    );
}
