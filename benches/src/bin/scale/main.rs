//! The scale benchmark: one manager process against the test cluster (real etcd and
//! kube-apiserver, `tfops-testcluster`) holding
//! `--objects` `Terraform` objects, its runner replaced by the instant runner double
//! (`benches::instant_runner`, a benchmark tool) so that the manager's own cost is what shows.
//!
//!     cargo run --release -p benches --bin scale -- --objects 10000 --kube-api-qps 0
//!
//! It measures, and prints as a Markdown row: the time from the manager's start to its first
//! status write (startup with the objects present), from there to every object Ready (each
//! object's first run: plan with a change, policies, apply, outputs), a drift check of every
//! object (the reconcile annotation on all of them, to each handled), the manager's resident
//! memory (peak, and steady after the runs), and its API requests while nothing is due.
//!
//! `scale manager FLAGS…` is the manager itself (`tfops_operator::manager` with the double):
//! the driver starts it as a child so that its memory is its own.

mod commit;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use tfops_kube::Terraform;
use tfops_testcluster::TestCluster;

const NAMESPACE: &str = "scale";
const MANAGER_USER: &str = "tfops-bench-manager";

#[derive(Debug, Parser)]
struct Args {
    /// Objects in the cluster.
    #[arg(long, default_value_t = 1000)]
    objects: usize,
    /// The manager's `--concurrent`.
    #[arg(long, default_value_t = 4)]
    concurrent: u16,
    /// The manager's `--kube-api-qps` (0: no limit).
    #[arg(long, default_value_t = 50.0)]
    kube_api_qps: f32,
    /// The manager's `--kube-api-burst`.
    #[arg(long, default_value_t = 300)]
    kube_api_burst: u32,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 3600)]
    timeout: u64,
    /// A monorepo: each object at its own path of the repository; once all are Ready, a
    /// commit touching one object's path is measured (objects that ran, time to Ready).
    #[arg(long)]
    monorepo: bool,
    /// The manager's `--source-poll-interval` (Go duration).
    #[arg(long, default_value = "2s")]
    source_poll_interval: String,
}

fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut args = std::env::args();
    if args.nth(1).as_deref() == Some("manager") {
        return manager();
    }
    let args = Args::parse();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(drive(args))
}

/// The manager with the instant runner double.
fn manager() -> anyhow::Result<()> {
    let flags = tfops_operator::manager::flags::Flags::parse_from(std::env::args().skip(1));
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            tfops_operator::logs::init(flags.log_format, "info");
            let runner = Arc::new(benches::instant_runner::InstantRunner::new());
            tfops_operator::manager::run_with_runner(flags, Some(runner)).await
        })
}

/// `(VmRSS, VmHWM)` of `pid` in KiB.
fn memory(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn ready(t: &Terraform) -> bool {
    t.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && format!("{:?}", c.status) == "True")
    })
}

/// Watches the objects until `done` holds for `want` of them; returns when the first had
/// any status and when the last satisfied `done`.
async fn watch_until(
    api: &Api<Terraform>,
    want: usize,
    deadline: Instant,
    done: impl Fn(&Terraform) -> bool,
) -> anyhow::Result<(Instant, Instant)> {
    let mut stream = watcher(api.clone(), watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut finished = std::collections::BTreeSet::new();
    let mut first_status = None;
    let mut last_seen: Option<Terraform> = None;
    while finished.len() < want {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let Ok(event) = tokio::time::timeout(remaining, stream.next()).await else {
            let status = last_seen
                .and_then(|t| t.status)
                .map(|s| serde_json::to_string(&s.conditions).unwrap_or_default());
            bail!(
                "{} of {want} done at the deadline; one that is not: {status:?}",
                finished.len()
            );
        };
        let event = event.context("the watch ended")??;
        let objects = match event {
            watcher::Event::Apply(t) | watcher::Event::InitApply(t) => vec![t],
            _ => Vec::new(),
        };
        for t in objects {
            if first_status.is_none() && t.status.as_ref().is_some_and(|s| !s.conditions.is_empty())
            {
                first_status = Some(Instant::now());
            }
            let name = t.metadata.name.clone().unwrap_or_default();
            if done(&t) {
                finished.insert(name);
            } else {
                finished.remove(&name);
                last_seen = Some(t);
            }
        }
    }
    Ok((first_status.unwrap_or_else(Instant::now), Instant::now()))
}

async fn drive(args: Args) -> anyhow::Result<()> {
    if args.objects == 0 {
        bail!("--objects must be at least 1");
    }
    let cluster = TestCluster::start().await?;
    let dir = tempfile::tempdir()?;
    let admin_config = dir.path().join("admin");
    std::fs::write(&admin_config, cluster.kubeconfig())?;
    let manager_config = dir.path().join("manager");
    std::fs::write(
        &manager_config,
        cluster.kubeconfig_for_user(MANAGER_USER, Some("system:masters"))?,
    )?;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::from_yaml(&cluster.kubeconfig())?,
        &Default::default(),
    )
    .await?;
    let client = kube::Client::try_from(config)?;
    for ns in [NAMESPACE, "tfops-system"] {
        let mut n = Namespace::default();
        n.metadata.name = Some(ns.into());
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &n)
            .await?;
    }
    // The API server serves a new resource only once its CRD is Established: objects created
    // before that are refused with 404.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &tfops_kube::crd()?)
        .await?;
    let established = kube::runtime::wait::await_condition(
        crds,
        "terraforms.infra.argocd.io",
        kube::runtime::wait::conditions::is_crd_established(),
    );
    tokio::time::timeout(Duration::from_secs(60), established)
        .await
        .context("the Terraform CRD was not Established within 60 s")??;
    // Every object on one repository of a real `git daemon`, as teams share a modules repo;
    // with --monorepo each object has a directory of its own there.
    let git = tests::git::GitDaemon::start();
    let config = "resource \"terraform_data\" \"x\" {\n  input = \"hello\"\n}\n";
    let files: Vec<(String, &str)> = if args.monorepo {
        (0..args.objects)
            .map(|i| (format!("{}/main.tf", commit::path_of(i)), config))
            .collect()
    } else {
        vec![("main.tf".to_string(), config)]
    };
    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), *c)).collect();
    git.commit("infra", &files);
    let url = git.url("infra");
    let api: Api<Terraform> = Api::namespaced(client.clone(), NAMESPACE);
    let created = Instant::now();
    let n = args.objects;
    let monorepo = args.monorepo;
    futures::stream::iter(0..n)
        .map(|i| {
            let (api, url) = (api.clone(), url.clone());
            async move {
                let path = if monorepo { commit::path_of(i) } else { String::new() };
                let body: Terraform = serde_json::from_value(json!({
                    "apiVersion": "infra.argocd.io/v1alpha1", "kind": "Terraform",
                    "metadata": {"name": format!("stack-{i:05}-x"), "labels": {"team": format!("t{}", i % 20)}},
                    "spec": {
                        "interval": "1h",
                        "approvePlan": "auto",
                        "sourceRef": {"kind": "GitRepository", "url": url},
                        "path": path,
                        "vars": [{"name": "region", "value": "eu-west-1"}, {"name": "index", "value": i}],
                    },
                }))?;
                api.create(&PostParams::default(), &body).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<()>>>()?;
    eprintln!(
        "scale: {n} objects created in {:.1} s",
        created.elapsed().as_secs_f64()
    );

    let git_cache = dir.path().join("git-cache");
    let spawn = || -> anyhow::Result<std::process::Child> {
        Command::new(std::env::current_exe()?)
            .arg("manager")
            .args(["--runner-pod-image", "bench/none:0"])
            .args(["--namespace", "tfops-system", "--identity", "bench-manager"])
            .args([
                "--metrics-addr",
                "127.0.0.1:0",
                "--health-addr",
                "127.0.0.1:0",
            ])
            // A quick takeover by the restarted manager (the killed one's Lease lapses).
            .args(["--leader-election", "false"])
            .args(["--concurrent", &args.concurrent.to_string()])
            .args(["--kube-api-qps", &args.kube_api_qps.to_string()])
            .args(["--kube-api-burst", &args.kube_api_burst.to_string()])
            .args(["--source-poll-interval", &args.source_poll_interval])
            .env("KUBECONFIG", &manager_config)
            .env("TFOPS_GIT_CACHE", &git_cache)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(match std::env::var_os("SCALE_MANAGER_LOG") {
                Some(path) => Stdio::from(std::fs::File::create(path)?),
                None => Stdio::null(),
            })
            .spawn()
            .context("starting the manager")
    };
    let started = Instant::now();
    let mut child = spawn()?;
    let pid = child.id();
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sample = |pid: u32, peak: Arc<std::sync::atomic::AtomicU64>| {
        tokio::spawn(async move {
            while let Some((_, hwm)) = memory(pid) {
                peak.fetch_max(hwm, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let sampler = sample(pid, peak.clone());
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let mut outcome = measure(&cluster, &api, n, started, deadline).await;
    if args.monorepo
        && let Ok(figures) = &mut outcome
    {
        match commit::one_commit(&cluster, &git, &api, n, deadline).await {
            Ok(commit) => figures.commit = Some(commit),
            Err(e) => outcome = Err(e),
        }
    }
    let (rss, _) = memory(pid).unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    sampler.abort();
    let figures = outcome?;
    let peak = peak.load(std::sync::atomic::Ordering::Relaxed);
    // A restart with every object Ready: how long until each was reconciled once (nothing
    // is due, so each reconcile is one GET), and the memory of a manager that only caches.
    let from = cluster.audit().len();
    let restarted = Instant::now();
    let mut child = spawn()?;
    let pid = child.id();
    let mut first = None;
    let all = loop {
        let seen = reconciled(&cluster, from);
        if first.is_none() && !seen.is_empty() {
            first = Some(restarted.elapsed());
        }
        if seen.len() >= n {
            break restarted.elapsed();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!(
                "after the restart only {} of {n} were reconciled",
                seen.len()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (cached_rss, _) = memory(pid).unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    println!(
        "| objects | restart → first reconcile | → all reconciled | RSS, all Ready and cached |"
    );
    println!("| ---: | ---: | ---: | ---: |");
    println!(
        "| {n} | {:.2} s | {:.2} s | {:.1} MiB |",
        first.unwrap_or_default().as_secs_f64(),
        all.as_secs_f64(),
        mib(cached_rss)
    );
    println!(
        "| objects | --concurrent | QPS/burst | start → first status | → all Ready | runs/s | drift check of all | checks/s | RSS steady | RSS peak | requests idle 10 s |"
    );
    println!("| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    println!(
        "| {n} | {} | {}/{} | {:.2} s | {:.1} s | {:.0} | {:.1} s | {:.0} | {:.1} MiB | {:.1} MiB | {} |",
        args.concurrent,
        args.kube_api_qps,
        args.kube_api_burst,
        figures.startup.as_secs_f64(),
        figures.all_ready.as_secs_f64(),
        n as f64 / figures.all_ready.as_secs_f64(),
        figures.drift.as_secs_f64(),
        n as f64 / figures.drift.as_secs_f64(),
        mib(rss),
        mib(peak),
        figures.idle_requests
    );
    if let Some(c) = &figures.commit {
        println!(
            "| objects | poll interval | commit → touched object Ready | → every object saw it | objects that ran | manager requests |"
        );
        println!("| ---: | --- | ---: | ---: | ---: | ---: |");
        println!(
            "| {n} | {} | {:.2} s | {:.2} s | {} | {} |",
            args.source_poll_interval,
            c.touched_ready.as_secs_f64(),
            c.all_seen.as_secs_f64(),
            c.ran,
            c.requests
        );
    }
    for (what, count) in &figures.per_run {
        eprintln!("scale: first runs made {count} × {what}");
    }
    Ok(())
}

struct Figures {
    commit: Option<commit::CommitFigures>,
    startup: Duration,
    all_ready: Duration,
    drift: Duration,
    idle_requests: usize,
    per_run: BTreeMap<String, usize>,
}

/// The objects the manager read one by one (a reconcile's first request) since audit entry
/// `from`.
fn reconciled(cluster: &TestCluster, from: usize) -> std::collections::BTreeSet<String> {
    cluster
        .audit()
        .into_iter()
        .skip(from)
        .filter(|a| a.user == MANAGER_USER && a.method == "GET" && !a.query.contains("watch"))
        .filter_map(|a| {
            let (_, name) = a.path.rsplit_once("/terraforms/")?;
            (!name.contains('/')).then(|| name.to_string())
        })
        .collect()
}

/// The manager's requests from audit entry `from` on, by verb and resource.
fn requests(cluster: &TestCluster, from: usize) -> BTreeMap<String, usize> {
    let mut counted = BTreeMap::new();
    for a in cluster.audit().into_iter().skip(from) {
        if a.user == MANAGER_USER {
            *counted.entry(a.kind()).or_default() += 1;
        }
    }
    counted
}

async fn measure(
    cluster: &TestCluster,
    api: &Api<Terraform>,
    n: usize,
    started: Instant,
    deadline: Instant,
) -> anyhow::Result<Figures> {
    let (first, last) = watch_until(api, n, deadline, ready).await?;
    let startup = first - started;
    let all_ready = last - first;
    eprintln!(
        "scale: first status {:.2} s after start, all {n} Ready {:.1} s later",
        startup.as_secs_f64(),
        all_ready.as_secs_f64()
    );
    if let Some(one) = api.get_opt("stack-00000-x").await? {
        let whole = serde_json::to_vec(&one)?.len();
        let managed = serde_json::to_vec(&one.metadata.managed_fields)?.len();
        eprintln!(
            "scale: one Ready object is {whole} bytes of JSON, {managed} of them managedFields"
        );
    }
    let per_run = requests(cluster, 0)
        .into_iter()
        .map(|(k, v)| (k, v / n.max(1)))
        .filter(|(_, v)| *v > 0)
        .collect();
    // A drift check of every object: the reconcile annotation on each, then each handled.
    let token = format!("bench-{}", jiff::Timestamp::now().as_millisecond());
    let asked = Instant::now();
    let names: Vec<String> = (0..n).map(|i| format!("stack-{i:05}-x")).collect();
    futures::stream::iter(names)
        .map(|name| {
            let (api, token) = (api.clone(), token.clone());
            async move {
                let patch = json!({"metadata": {"annotations": {tfops_core::api::annotations::RECONCILE: token}}});
                api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<()>>>()?;
    let handled = |t: &Terraform| {
        t.status
            .as_ref()
            .and_then(|s| s.last_handled_reconcile_at.as_deref())
            == Some(token.as_str())
    };
    let (_, checked) = watch_until(api, n, deadline, handled).await?;
    let drift = checked - asked;
    // Nothing due: what the manager asks of the API server in 10 s.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let from = cluster.audit().len();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle_requests = requests(cluster, from).values().sum();
    if idle_requests > 10 {
        eprintln!("scale: idle requests {:?}", requests(cluster, from));
    }
    Ok(Figures {
        commit: None,
        startup,
        all_ready,
        drift,
        idle_requests,
        per_run,
    })
}
