//! Outputs, inventory, health checks: what the applied configuration gives, and whether it
//! works.
//!
//! > Outputs, inventory, health checks. Outputs are written to spec.writeOutputsToSecret, the
//! > list of managed resources is recorded in status.inventory, and spec.healthChecks run
//! > against the outputs.

use std::time::Duration;

use super::model::{Outcome, OutputsStep, Step};
use super::run::{Run, Stop};
use crate::api::{TerraformObject, ValidSpec, template_references};
use crate::conditions::{ConditionStatus, ConditionType, Reason};

/// A health check's timeout when its spec gives none (validation gives every check one).
const DEFAULT_HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(20);

/// Reads the outputs and the inventory (writing the outputs Secret, removing one written
/// under another name before), then runs the health checks.
pub(super) fn outputs(run: &mut Run<'_>, valid: &ValidSpec) -> Result<(), Stop> {
    let step = Step::Outputs(outputs_step(run));
    if let (
        Outcome::OutputsRead {
            names,
            inventory,
            written,
        },
        _,
    ) = run.need_phase(step, ConditionType::Output)?
    {
        run.st.available_outputs = names.clone();
        run.st.inventory = inventory.clone();
        let secret = run.s.object.spec.write_outputs_to_secret.as_ref();
        let (stored, message) = match (secret, written) {
            (Some(w), true) => (
                Some(w.name.clone()),
                format!("{} outputs, written to Secret {}", names.len(), w.name),
            ),
            _ => (None, format!("{} outputs available", names.len())),
        };
        run.st.outputs_secret = stored;
        run.set(
            ConditionType::Output,
            ConditionStatus::True,
            Reason::TerraformOutputsWritten,
            message,
        );
    }
    health_checks(run, valid)
}

/// Who writes the outputs Secret, which one, the one it replaces, and what the health checks
/// need back.
fn outputs_step(run: &Run<'_>) -> OutputsStep {
    let secret = run.s.object.spec.write_outputs_to_secret.clone();
    let remove = run
        .start()
        .outputs_secret
        .clone()
        .filter(|old| secret.as_ref().is_none_or(|t| t.name != *old));
    OutputsStep {
        writer: run.writer(),
        secret,
        remove,
        reveal: health_check_references(&run.s.object),
    }
}

/// `spec.healthChecks`, each with its timeout; none: the condition goes.
fn health_checks(run: &mut Run<'_>, valid: &ValidSpec) -> Result<(), Stop> {
    let n = run.s.object.spec.health_checks.len();
    if n == 0 {
        run.remove(ConditionType::HealthCheck);
        return Ok(());
    }
    let timeouts = (0..n)
        .map(|i| {
            let given = valid.health_check_timeouts.get(i).copied();
            given.unwrap_or(DEFAULT_HEALTH_CHECK_TIMEOUT)
        })
        .collect();
    run.need_phase(Step::HealthChecks { timeouts }, ConditionType::HealthCheck)?;
    run.set(
        ConditionType::HealthCheck,
        ConditionStatus::True,
        Reason::HealthChecksSucceeded,
        format!("{n} health checks passed"),
    );
    Ok(())
}

/// The outputs the object's health checks read.
fn health_check_references(object: &TerraformObject) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for check in &object.spec.health_checks {
        let template = check.address.as_deref().or(check.url.as_deref());
        for name in template_references(template.unwrap_or_default()) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}
