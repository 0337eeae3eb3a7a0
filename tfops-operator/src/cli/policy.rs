//! `tfops policy`: `TerraformPolicy` rules evaluated and tested offline.

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;

/// `tfops policy`.
#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Evaluate policies against a plan's JSON (`terraform show -json PLAN`) and print the
    /// verdict of every rule; exits 1 when a Deny rule is violated.
    Eval {
        /// A file of `TerraformPolicy` documents; repeat for several.
        #[arg(long, required = true)]
        policy: Vec<PathBuf>,
        /// The plan's JSON.
        #[arg(long)]
        plan: PathBuf,
        /// The `Terraform` object the plan is for (default: one in each policy's namespace).
        #[arg(long)]
        object: Option<PathBuf>,
    },
    /// Run the `*.test.yaml` cases of a directory against its policies (see docs/policies.md).
    Test {
        /// The directory.
        dir: PathBuf,
    },
}

/// Runs `tfops policy`.
///
/// # Errors
/// Files that cannot be read or parsed, a rule that does not compile.
pub fn run(command: PolicyCommand) -> anyhow::Result<bool> {
    match command {
        PolicyCommand::Eval {
            policy,
            plan,
            object,
        } => eval(policy, &plan, object),
        PolicyCommand::Test { dir } => test(&dir),
    }
}

fn test(dir: &std::path::Path) -> anyhow::Result<bool> {
    let checked = crate::policy_test::run(dir)?;
    let mut rows = vec![vec![
        "CASE".to_string(),
        "RULE".into(),
        "EXPECTED".into(),
        "GOT".into(),
        "OK".into(),
    ]];
    for c in &checked {
        rows.push(vec![
            c.case.clone(),
            c.rule.clone(),
            c.expected.to_string(),
            c.got.to_string(),
            if c.ok() { "ok" } else { "FAIL" }.into(),
        ]);
    }
    for line in crate::local::output::render_table(&rows) {
        println!("{line}");
    }
    let failed = checked.iter().filter(|c| !c.ok()).count();
    println!("\n{} passed, {failed} failed", checked.len() - failed);
    Ok(failed == 0 && !checked.is_empty())
}

fn eval(
    policies: Vec<PathBuf>,
    plan_path: &std::path::Path,
    object: Option<PathBuf>,
) -> anyhow::Result<bool> {
    use crate::local::manifest;
    use tfops_core::policy::{Action, Outcome, Verdict, compile, evaluate};
    let read = manifest::read(&[policies, object.into_iter().collect()].concat())?;
    let compiled = read
        .policies
        .iter()
        .map(compile)
        .collect::<Result<Vec<_>, _>>()?;
    let text = std::fs::read_to_string(plan_path)
        .with_context(|| format!("reading {}", plan_path.display()))?;
    let plan: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON", plan_path.display()))?;
    // Without an object, each policy is evaluated as for an object of its own namespace.
    let mut verdict = Verdict::default();
    for p in &compiled {
        let object = match read.objects.first() {
            Some(m) => m.object(),
            None => crate::policy_test::object_in(&p.namespace),
        };
        verdict
            .results
            .extend(evaluate(std::slice::from_ref(p), &plan, &object)?.results);
    }
    let mut rows = vec![vec![
        "POLICY".to_string(),
        "RULE".into(),
        "ACTION".into(),
        "RESULT".into(),
    ]];
    for r in &verdict.results {
        let action = if r.action == Action::Deny {
            "Deny"
        } else {
            "Warn"
        };
        let result = match &r.outcome {
            Outcome::Pass => "pass".to_string(),
            Outcome::NotApplicable => "not applicable".to_string(),
            Outcome::Violation { message, addresses } if addresses.is_empty() => {
                format!("VIOLATED: {message}")
            }
            Outcome::Violation { message, addresses } => {
                format!("VIOLATED: {message} ({})", addresses.join(", "))
            }
            Outcome::Error { message } => format!("ERROR: {message}"),
        };
        rows.push(vec![
            r.policy.clone(),
            r.rule.clone(),
            action.into(),
            result,
        ]);
    }
    for line in crate::local::output::render_table(&rows) {
        println!("{line}");
    }
    Ok(!verdict.denied())
}
