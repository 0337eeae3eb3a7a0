//! Argo CD health of a `Terraform` object, from its conditions: what Argo CD's health check
//! (`config/argocd/…/health.lua`) says too.

use serde::Serialize;

use crate::api::TerraformObject;
use crate::conditions::{ConditionStatus, ConditionType, Reason, find};

/// Argo CD's health statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum HealthStatus {
    /// Applied and matching.
    Healthy,
    /// Working, or waiting for dependencies.
    Progressing,
    /// Suspended by the user, or a plan awaits approval.
    Suspended,
    /// Needs attention.
    Degraded,
}

/// A health status and its message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Health {
    /// The status.
    pub status: HealthStatus,
    /// Why.
    pub message: String,
}

/// Argo CD health of an object, as docs/argocd.md's health table says, with a message a person can
/// act on. In order: `spec.suspend`, the `infra.argocd.io/suspend` annotation or reason
/// `Suspended` → Suspended (saying why); `Stalled=True` (a
/// spec that cannot work until edited) → Degraded with its message; no `Ready` → Progressing;
/// being deleted → Progressing ("deleting: …") unless `Ready=False`; a spec generation not yet
/// acted on → Progressing; `Ready=True` → Healthy; `Ready=Unknown` → Suspended when a plan
/// awaits approval (Ready's message, which names the plan and the ways to approve it) or an
/// apply window (reason `ApplyWindowClosed`), else Progressing (an approved plan being
/// applied, reason `TerraformApplying`, among them); `Ready=False` → Degraded
/// (naming the lock holder and the way out when the state lock is held).
///
/// `config/argocd/resource_customizations/infra.argocd.io/Terraform/health.lua` is the same
/// mapping for Argo CD; a test runs both on the same fixtures.
pub fn health(object: &TerraformObject) -> Health {
    let conditions = &object.status.conditions;
    let ready = find(conditions, ConditionType::Ready);
    let message = ready.map(|c| c.message.clone()).unwrap_or_default();
    let h = |status, message: String| Health { status, message };
    let suspension = object.suspension();
    if suspension.is_some() || ready.is_some_and(|c| c.reason == Reason::Suspended.as_str()) {
        let why = suspension.map(|w| format!("{w}; ")).unwrap_or_default();
        return h(
            HealthStatus::Suspended,
            format!("reconciliation is suspended ({why}the resume action resumes it)"),
        );
    }
    if let Some(stalled) =
        find(conditions, ConditionType::Stalled).filter(|c| c.status == ConditionStatus::True)
    {
        return h(HealthStatus::Degraded, stalled.message.clone());
    }
    let Some(ready) = ready else {
        return h(
            HealthStatus::Progressing,
            "waiting for the first reconciliation".into(),
        );
    };
    if object.metadata.deletion_timestamp.is_some() && ready.status != ConditionStatus::False {
        return h(HealthStatus::Progressing, format!("deleting: {message}"));
    }
    if object.status.observed_generation < object.metadata.generation
        && ready.status != ConditionStatus::Unknown
    {
        return h(
            HealthStatus::Progressing,
            "a new generation is being reconciled".into(),
        );
    }
    let pending = &object.status.plan.pending;
    match ready.status {
        ConditionStatus::True => h(HealthStatus::Healthy, message),
        ConditionStatus::False => {
            let lock = &object.status.lock;
            if ready.reason == Reason::LockHeld.as_str() && !lock.pending.is_empty() {
                let holder = if lock.holder.is_empty() {
                    "an unknown holder"
                } else {
                    lock.holder.as_str()
                };
                return h(
                    HealthStatus::Degraded,
                    format!(
                        "{message} (lock {} held by {holder}; the force-unlock action releases it)",
                        lock.pending
                    ),
                );
            }
            h(HealthStatus::Degraded, message)
        }
        // Ready's message names the plan and says how to approve it (the approve action
        // among the ways): one sentence, not repeated.
        ConditionStatus::Unknown
            if ready.reason == Reason::TerraformPlannedWithChanges.as_str()
                && !pending.is_empty() =>
        {
            h(HealthStatus::Suspended, message)
        }
        // Nothing to do until a window opens (or a human forces it): paused, not working.
        ConditionStatus::Unknown if ready.reason == Reason::ApplyWindowClosed.as_str() => h(
            HealthStatus::Suspended,
            format!("waiting for an apply window: {message}"),
        ),
        ConditionStatus::Unknown => h(HealthStatus::Progressing, message),
    }
}
