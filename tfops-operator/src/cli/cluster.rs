//! The commands for `Terraform` objects in a cluster, with the kubeconfig as kubectl finds it
//! (`--kubeconfig`, else `KUBECONFIG`, else `~/.kube/config`; in a Pod its ServiceAccount).
//! Each edit is the one an Argo CD action makes ([`tfops_kube::actions`]).

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use tfops_core::api::ObjectKey;
use tfops_core::conditions::{self, ConditionStatus, ConditionType};
use tfops_kube::Terraform;
use tfops_kube::actions::Actions;
pub use tfops_kube::actions::Request;

/// How to reach the cluster, as kubectl's flags of the same names.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// The kubeconfig file (default: `KUBECONFIG`, else `~/.kube/config`).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current context).
    #[arg(long)]
    pub context: Option<String>,
    /// The namespace (default: the context's, else `default`).
    #[arg(short = 'n', long)]
    pub namespace: Option<String>,
}

/// A command about one object.
#[derive(Debug, Clone, Args)]
pub struct NameArgs {
    /// The `Terraform` object.
    pub name: String,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `tfops get`.
#[derive(Debug, Clone, Args)]
pub struct GetArgs {
    /// One object (default: all of the namespace).
    pub name: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// How the objects are printed (`json`: as the API returns them).
    #[arg(short = 'o', long, value_enum, default_value_t = super::local::Output::Text)]
    pub output: super::local::Output,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `tfops plan`.
#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// Print the pending plan as Terraform shows it (from its ConfigMaps).
    Show(NameArgs),
}

/// `tfops approve`.
#[derive(Debug, Clone, Args)]
pub struct ApproveArgs {
    /// The `Terraform` object.
    pub name: String,
    /// The plan id (`status.plan.pending`; default: whatever is pending). A stale id is
    /// refused.
    pub plan_id: Option<String>,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `tfops unlock`.
#[derive(Debug, Clone, Args)]
pub struct UnlockArgs {
    /// The `Terraform` object.
    pub name: String,
    /// The lock id (`status.lock.pending`; default: the recorded one).
    pub lock_id: Option<String>,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// `tfops logs`.
#[derive(Debug, Clone, Args)]
pub struct LogsArgs {
    /// The `Terraform` object.
    pub name: String,
    /// Which run: 1 is the newest (as `tfops history` numbers them).
    #[arg(long, default_value_t = 1)]
    pub run: usize,
    /// Follow the run under way (or wait for the next one) and print Terraform's output as
    /// it comes, from the runner Pod's log, until the run's Pod ends.
    #[arg(short = 'f', long, conflicts_with = "run")]
    pub follow: bool,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// A client and the namespace to use.
pub(super) async fn connect(args: &ClusterArgs) -> anyhow::Result<(Actions, String)> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let options = kube::config::KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(|| format!("loading the kubeconfig {}", path.display()))?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .context("loading the kubeconfig")?,
        None => kube::Config::infer()
            .await
            .context("finding a kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config)")?,
    };
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).context("building the Kubernetes client")?;
    Ok((Actions::new(client), namespace))
}

use super::history::age;

/// The table row of an object.
fn row(t: &Terraform, with_namespace: bool) -> Vec<String> {
    let status = t.status.clone().unwrap_or_default();
    let ready = conditions::find(&status.conditions, ConditionType::Ready);
    let dash = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            s.to_string()
        }
    };
    let mut row = Vec::new();
    if with_namespace {
        row.push(t.metadata.namespace.clone().unwrap_or_default());
    }
    row.push(t.metadata.name.clone().unwrap_or_default());
    row.push(match ready.map(|c| c.status) {
        Some(ConditionStatus::True) => "True".into(),
        Some(ConditionStatus::False) => "False".into(),
        Some(ConditionStatus::Unknown) => "Unknown".into(),
        None => "-".into(),
    });
    row.push(dash(ready.map_or("", |c| c.reason.as_str())));
    // The pending plan, or the plan being applied: approved, nothing left to approve.
    row.push(match status.applying() {
        Some(plan) => format!("{plan} (applying)"),
        None => dash(&status.plan.pending),
    });
    row.push(age(status.last_drift_detected_at));
    let suspended = t.spec.suspend
        || t.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(tfops_core::api::annotations::SUSPEND));
    row.push(if suspended { "True" } else { "False" }.into());
    row.push(age(t.metadata.creation_timestamp.as_ref().map(|c| c.0)));
    row
}

/// `tfops get`: a table like `kubectl get tf`, with the pending plan and the last drift.
///
/// # Errors
/// The cluster's.
pub async fn get(args: GetArgs) -> anyhow::Result<bool> {
    let (actions, namespace) = connect(&args.cluster).await?;
    let objects = match &args.name {
        Some(name) => vec![actions.get(&ObjectKey::new(&namespace, name)).await?],
        None => {
            let ns = (!args.all_namespaces).then_some(namespace.as_str());
            actions.list(ns).await?
        }
    };
    if args.output == super::local::Output::Json {
        println!("{}", serde_json::to_string_pretty(&objects)?);
        return Ok(true);
    }
    if objects.is_empty() {
        eprintln!("No Terraform objects found in {namespace}.");
        return Ok(true);
    }
    let mut header = vec![
        "NAME",
        "READY",
        "REASON",
        "PENDING PLAN",
        "LAST DRIFT",
        "SUSPENDED",
        "AGE",
    ];
    if args.all_namespaces {
        header.insert(0, "NAMESPACE");
    }
    let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    rows.extend(objects.iter().map(|t| row(t, args.all_namespaces)));
    for line in crate::local::output::render_table(&rows) {
        println!("{line}");
    }
    Ok(true)
}

/// `tfops plan show`.
///
/// # Errors
/// The cluster's; no pending plan.
pub async fn plan_show(args: NameArgs) -> anyhow::Result<bool> {
    let (actions, namespace) = connect(&args.cluster).await?;
    let key = ObjectKey::new(&namespace, &args.name);
    let (id, text) = actions.readable_plan(&key).await?;
    eprintln!("plan {id} of {key}:");
    print!("{text}");
    Ok(true)
}

/// `tfops approve`.
///
/// # Errors
/// The cluster's; no pending plan; a stale id.
pub async fn approve(args: ApproveArgs) -> anyhow::Result<bool> {
    let (actions, namespace) = connect(&args.cluster).await?;
    let key = ObjectKey::new(&namespace, &args.name);
    let approved = actions.approve(&key, args.plan_id.as_deref()).await?;
    println!(
        "approved plan {} of {key}: it is applied on the run starting now, only if it still does what was reviewed",
        approved.plan_id
    );
    Ok(true)
}

/// `tfops replan|reconcile|suspend|resume|cancel`.
///
/// # Errors
/// The cluster's.
pub async fn request(args: NameArgs, request: Request) -> anyhow::Result<bool> {
    let (actions, namespace) = connect(&args.cluster).await?;
    let key = ObjectKey::new(&namespace, &args.name);
    actions.request(&key, request).await?;
    let done = match request {
        Request::Reconcile => "a run was requested",
        Request::Replan => "a fresh plan was requested",
        Request::Suspend => "suspended: no runs until `tfops resume`",
        Request::Resume => "resumed",
        Request::Cancel => {
            "the run under way (if any) is asked to stop: a plan ends, an apply is interrupted as Ctrl-C does; see `tfops get`"
        }
    };
    println!("{key}: {done}");
    Ok(true)
}

/// `tfops unlock`: shows the holder, then asks for the release.
///
/// # Errors
/// The cluster's; no recorded lock; another lock id.
pub async fn unlock(args: UnlockArgs) -> anyhow::Result<bool> {
    let (actions, namespace) = connect(&args.cluster).await?;
    let key = ObjectKey::new(&namespace, &args.name);
    let unlocking = actions.force_unlock(&key, args.lock_id.as_deref()).await?;
    let holder = if unlocking.holder.is_empty() {
        "(holder not recorded)"
    } else {
        unlocking.holder.as_str()
    };
    println!("{key}: the state lock {} is held by {holder}", unlocking.id);
    println!("{key}: it is released on the run starting now (terraform force-unlock)");
    Ok(true)
}

/// `tfops history`: the last runs, newest first.
///
/// # Errors
/// The cluster's.
pub async fn history(args: NameArgs) -> anyhow::Result<bool> {
    let (actions, namespace) = connect(&args.cluster).await?;
    let key = ObjectKey::new(&namespace, &args.name);
    super::history::print_runs(&key.to_string(), &actions.history(&key).await?);
    Ok(true)
}

/// `tfops logs`: the kept output of one run, or with `-f` the output of the run under way.
///
/// # Errors
/// The cluster's; a run number past the history.
pub async fn logs(args: LogsArgs) -> anyhow::Result<bool> {
    let (actions, namespace) = connect(&args.cluster).await?;
    let key = ObjectKey::new(&namespace, &args.name);
    if args.follow {
        if !actions.run_in_progress(&key).await? {
            eprintln!("{key}: no run under way; waiting for the next one (Ctrl-C to stop)");
            actions.wait_for_run(&key).await?;
        }
        let mut command = String::new();
        actions
            .follow_output(&key, |out| {
                if out.command != command {
                    println!("{}", out.command);
                    command.clone_from(&out.command);
                }
                println!("    {}", out.line);
            })
            .await?;
        eprintln!(
            "{key}: the run's runner Pod has ended; `tfops history {}` shows the result",
            args.name
        );
        return Ok(true);
    }
    super::history::print_output(&key.to_string(), &actions.history(&key).await?, args.run)?;
    Ok(true)
}
