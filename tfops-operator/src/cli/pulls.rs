//! `tfops pr`: the plans the open pull requests make of an object, as stored in the cluster
//! (one per pull request, at its newest planned head).

use clap::Args;
use tfops_core::api::ObjectKey;
use tfops_core::pulls::Outcome;

use super::cluster::{ClusterArgs, connect};

/// `tfops pr`.
#[derive(Debug, Clone, Args)]
pub struct PullArgs {
    /// The `Terraform` object.
    pub name: String,
    /// Print the whole plan of this pull request (its number) instead of the list.
    #[arg(long, value_name = "NUMBER")]
    pub show: Option<u64>,
    /// The cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Lists the object's pull-request plans, or prints one whole.
///
/// # Errors
/// The cluster's; `--show` of a pull request with no plan of the object.
pub async fn run(args: PullArgs) -> anyhow::Result<bool> {
    let (actions, namespace) = connect(&args.cluster).await?;
    let key = ObjectKey::new(&namespace, &args.name);
    let plans = actions.pull_request_plans(&key).await?;
    if let Some(number) = args.show {
        let Some(plan) = plans.iter().find(|p| p.plan_ref.number == number) else {
            anyhow::bail!("{key} has no plan of pull request #{number}");
        };
        match &plan.plan.outcome {
            Outcome::Planned { text, .. } => print!("{text}"),
            other => println!("{}", said(other)),
        }
        return Ok(true);
    }
    if plans.is_empty() {
        println!("{key}: no open pull request plans it");
        return Ok(true);
    }
    println!("{:<6} {:<12} RESULT", "PR", "HEAD");
    for plan in &plans {
        let head: String = plan.plan_ref.head_sha.chars().take(12).collect();
        println!(
            "#{:<5} {head:<12} {}",
            plan.plan_ref.number,
            said(&plan.plan.outcome)
        );
    }
    Ok(true)
}

/// One line for an outcome.
fn said(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Planning => "planning".into(),
        Outcome::NotPlanned { why } => why.clone(),
        Outcome::Failed { reason, message } => format!("failed ({reason}): {message}"),
        Outcome::Planned {
            summary,
            replaced,
            warnings,
            denials,
            ..
        } => {
            let mut line = summary.to_string();
            if !replaced.is_empty() {
                line.push_str(&format!(", replaces {}", replaced.join(", ")));
            }
            if !denials.is_empty() {
                line.push_str(&format!(", denied by policy: {}", denials.join("; ")));
            }
            if !warnings.is_empty() {
                line.push_str(&format!(", policy warnings: {}", warnings.join("; ")));
            }
            line
        }
    }
}
