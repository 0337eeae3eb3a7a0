//! What the plan policies found in a plan, as a run records it: the violations
//! (`status.policyViolations`), the warnings (Warning events), and the denials that keep a
//! plan from being applied.

use super::evaluate::{Outcome, evaluate};
use super::load::{PolicyError, compile};
use super::types::{Action, TerraformPolicy};
use crate::api::{PolicyViolation, TerraformObject};

/// What the policies that select an object found in one of its plans.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Findings {
    /// Every violated rule (and every rule that could not be evaluated), `Deny` and `Warn`.
    pub violations: Vec<PolicyViolation>,
    /// One message per `Warn` violation: `policy <name> rule <rule>: <message>`.
    pub warnings: Vec<String>,
}

/// Why the policies could not be evaluated on a plan.
#[derive(Debug, thiserror::Error)]
pub enum FindingsError {
    /// A policy that selects the object does not compile.
    #[error("{0}")]
    Compile(#[source] PolicyError),
    /// The plan's JSON does not parse.
    #[error("plan JSON: {0}")]
    PlanJson(#[source] serde_json::Error),
    /// Evaluation failed as a whole.
    #[error("{0}")]
    Evaluate(#[source] PolicyError),
}

/// Evaluates the policies that select `object` on the plan's `terraform show -json` output.
/// Only those: another object's broken policy does not block this one.
///
/// # Errors
/// [`FindingsError`] when a selecting policy does not compile, the plan is not JSON, or the
/// evaluation fails.
pub fn findings(
    policies: &[TerraformPolicy],
    plan_json: &str,
    object: &TerraformObject,
) -> Result<Findings, FindingsError> {
    let selecting: Vec<&TerraformPolicy> = policies.iter().filter(|p| p.selects(object)).collect();
    if selecting.is_empty() {
        return Ok(Findings::default());
    }
    let compiled = selecting
        .into_iter()
        .map(compile)
        .collect::<Result<Vec<_>, _>>()
        .map_err(FindingsError::Compile)?;
    let plan: serde_json::Value =
        serde_json::from_str(plan_json).map_err(FindingsError::PlanJson)?;
    let verdict = evaluate(&compiled, &plan, object).map_err(FindingsError::Evaluate)?;
    let mut found = Findings::default();
    for r in verdict.violations() {
        let (message, addresses) = match &r.outcome {
            Outcome::Violation { message, addresses } => (message.clone(), addresses.clone()),
            Outcome::Error { message } => {
                (format!("could not be evaluated: {message}"), Vec::new())
            }
            Outcome::Pass | Outcome::NotApplicable => continue,
        };
        let action = match r.action {
            Action::Deny => "Deny",
            Action::Warn => "Warn",
        };
        if r.action == Action::Warn {
            found
                .warnings
                .push(format!("policy {} rule {}: {message}", r.policy, r.rule));
        }
        found.violations.push(PolicyViolation {
            policy: r.policy.clone(),
            rule: r.rule.clone(),
            action: action.to_string(),
            message,
            addresses,
        });
    }
    Ok(found)
}

/// The `Deny` violations, each `policy/rule: message (addresses)`, joined by `; `; `None`
/// when nothing denies the plan.
pub fn denials(violations: &[PolicyViolation]) -> Option<String> {
    let list: Vec<String> = violations
        .iter()
        .filter(|v| v.action == "Deny")
        .map(|v| {
            let at = if v.addresses.is_empty() {
                String::new()
            } else {
                format!(" ({})", v.addresses.join(", "))
            };
            format!("{}/{}: {}{at}", v.policy, v.rule, v.message)
        })
        .collect();
    (!list.is_empty()).then(|| list.join("; "))
}
