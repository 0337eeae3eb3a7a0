//! Outputs, inventory, health checks: what the applied configuration gives, and whether it
//! works.
//!
//! > Outputs, inventory, health checks. Outputs are written to spec.writeOutputsToSecret, the
//! > list of managed resources is recorded in status.inventory, and spec.healthChecks run
//! > against the outputs.
//!
//! The outputs Terraform does not mark sensitive can also go to a ConfigMap
//! (spec.writeOutputsToConfigMap); one that selects a sensitive output fails the step, and
//! nothing is written.

use std::time::Duration;

use super::model::{Outcome, OutputsStep, Step};
use super::run::{Run, Stop};
use crate::api::{TerraformObject, ValidSpec, template_references};
use crate::conditions::{ConditionStatus, ConditionType, Reason};

/// A health check's timeout when its spec gives none (validation gives every check one).
const DEFAULT_HEALTH_CHECK_TIMEOUT: Duration = Duration::from_secs(20);

/// Reads the outputs and the inventory (writing the outputs Secret and ConfigMap, removing
/// those written under other names before), then runs the health checks.
pub(super) fn outputs(run: &mut Run<'_>, valid: &ValidSpec) -> Result<(), Stop> {
    let step = Step::Outputs(outputs_step(run));
    if let (
        Outcome::OutputsRead {
            names,
            inventory,
            written,
            config_map_written,
        },
        _,
    ) = run.need_phase(step, ConditionType::Output)?
    {
        run.st.available_outputs = names.clone();
        run.st.inventory = inventory.clone();
        let spec = &run.s.object.spec;
        let secret = spec
            .write_outputs_to_secret
            .as_ref()
            .filter(|_| *written)
            .map(|w| w.name.clone());
        let config_map = spec
            .write_outputs_to_config_map
            .as_ref()
            .filter(|_| *config_map_written)
            .map(|w| w.name.clone());
        let places: Vec<String> = [
            secret.as_ref().map(|n| format!("Secret {n}")),
            config_map.as_ref().map(|n| format!("ConfigMap {n}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        let message = if places.is_empty() {
            format!("{} outputs available", names.len())
        } else {
            format!(
                "{} outputs, written to {}",
                names.len(),
                places.join(" and ")
            )
        };
        run.st.outputs_secret = secret;
        run.st.outputs_config_map = config_map;
        run.set(
            ConditionType::Output,
            ConditionStatus::True,
            Reason::TerraformOutputsWritten,
            message,
        );
    }
    health_checks(run, valid)
}

/// Who writes the outputs Secret and ConfigMap, which ones, the ones they replace, and what
/// the health checks need back.
fn outputs_step(run: &Run<'_>) -> OutputsStep {
    let spec = &run.s.object.spec;
    let start = run.start();
    let secret = spec.write_outputs_to_secret.clone();
    let remove = start
        .outputs_secret
        .clone()
        .filter(|old| secret.as_ref().is_none_or(|t| t.name != *old));
    let config_map = spec.write_outputs_to_config_map.clone();
    let remove_config_map = start
        .outputs_config_map
        .clone()
        .filter(|old| config_map.as_ref().is_none_or(|t| t.name != *old));
    OutputsStep {
        writer: run.writer(),
        secret,
        remove,
        config_map,
        remove_config_map,
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
