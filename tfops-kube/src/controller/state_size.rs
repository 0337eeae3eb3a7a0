//! After an apply by OpenTofu into the default kubernetes backend, a Warning event when the
//! state nears what one Secret holds.

use tfops_core::api::TerraformObject;
use tfops_core::conditions::Reason;
use tfops_core::naming;
use tfops_core::ports::{Event, EventType};
use tfops_core::reconcile::{RunReport, StepKind};

use super::Context;
use crate::KubeStateAdmin;
use crate::state::SECRET_LIMIT;

/// After an apply by OpenTofu into the default kubernetes backend, a Warning event when the
/// state nears what one Secret holds: OpenTofu's backend cannot split state over Secrets, so
/// an apply past the limit could not save it.
pub(super) async fn warn_of_state_size(
    ctx: &Context,
    object: &TerraformObject,
    report: &RunReport,
) {
    if !state_size_matters(object, report) {
        return;
    }
    let suffix = object.state_secret_suffix();
    let key = object.key();
    let stored = match KubeStateAdmin::new(ctx.client.clone())
        .stored_bytes(&key, &object.spec.workspace, &suffix)
        .await
    {
        Ok(stored) => stored,
        Err(error) => {
            tracing::warn!(object = %key, %error, "the state's size could not be read");
            return;
        }
    };
    if near_secret_limit(stored) {
        let event = Event {
            event_type: EventType::Warning,
            reason: Reason::StateNearSizeLimit,
            message: format!(
                "the state Secret {} holds {} KiB of the 1024 KiB a Secret allows, and OpenTofu's kubernetes backend cannot split state: move this state to another backend or split the configuration",
                naming::state_secret_name(&object.spec.workspace, &suffix),
                stored / 1024
            ),
        };
        ctx.sink.emit(&key, event).await;
    }
}

/// Whether the run applied with OpenTofu into the default kubernetes backend (whose state
/// cannot grow past one Secret).
fn state_size_matters(object: &TerraformObject, report: &RunReport) -> bool {
    let applied = report
        .records
        .iter()
        .any(|r| r.step == StepKind::Apply && r.result.is_ok());
    let tofu = report
        .status
        .binary
        .as_deref()
        .is_some_and(|b| b.starts_with("tofu"));
    let default_backend = object
        .spec
        .backend_config
        .as_ref()
        .is_none_or(|b| !b.disable && b.custom_configuration.is_none());
    applied && tofu && default_backend
}

/// Whether `stored` bytes of state are past 80% of a Secret's 1 MiB.
fn near_secret_limit(stored: usize) -> bool {
    stored * 10 >= SECRET_LIMIT * 8
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use tfops_core::reconcile::Record;

    fn object(backend: serde_json::Value) -> TerraformObject {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db", "namespace": "ns", "generation": 1},
            "spec": {"sourceRef": {"kind": "GitRepository", "url": "https://g/x"}, "backendConfig": backend},
        }))
        .unwrap()
    }

    fn report(binary: &str, applied: bool) -> RunReport {
        let status = tfops_core::api::TerraformStatus {
            binary: Some(binary.into()),
            ..Default::default()
        };
        let records = if applied {
            vec![Record {
                step: StepKind::Apply,
                at: jiff::Timestamp::UNIX_EPOCH,
                result: Ok(tfops_core::reconcile::Outcome::Applied),
            }]
        } else {
            Vec::new()
        };
        RunReport {
            records,
            requeue_after: None,
            status,
            output_tail: String::new(),
        }
    }

    #[test]
    fn only_opentofu_applies_into_the_kubernetes_backend_are_checked_near_the_limit() {
        let default = object(serde_json::Value::Null);
        assert!(state_size_matters(&default, &report("tofu 1.10.6", true)));
        assert!(!state_size_matters(
            &default,
            &report("terraform 1.11.4", true)
        ));
        assert!(!state_size_matters(&default, &report("tofu 1.10.6", false)));
        let custom = object(serde_json::json!({"customConfiguration": "terraform {}"}));
        assert!(!state_size_matters(&custom, &report("tofu 1.10.6", true)));
        assert!(!near_secret_limit(800 * 1024));
        assert!(near_secret_limit(840 * 1024));
    }
}
