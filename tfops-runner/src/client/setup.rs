//! The setup request a controller sends for an object: its backend (tfops' kubernetes one, a
//! custom block, none, or a state handed over), inputs and each command's timeout.

use std::collections::BTreeMap;

use tfops_core::api::{FileLocation, TerraformObject};
use tfops_core::ports::{PortError, SetupRequest};

use crate::proto;

/// The setup request a controller sends for an object (backend from its spec).
pub fn setup_request(request: &SetupRequest) -> Result<proto::SetupRequest, PortError> {
    let o: &TerraformObject = &request.object;
    let backend = match &o.spec.backend_config {
        Some(b) if b.disable => proto::backend::Kind::None(true),
        Some(b) if b.custom_configuration.is_some() => {
            proto::backend::Kind::Custom(b.custom_configuration.clone().unwrap_or_default())
        }
        other => proto::backend::Kind::Kubernetes(proto::KubernetesBackend {
            secret_suffix: o.state_secret_suffix(),
            namespace: o.metadata.namespace.clone(),
            in_cluster_config: true,
            labels: other
                .as_ref()
                .map(|b| b.labels.clone().into_iter().collect())
                .unwrap_or_default(),
        }),
    };
    let vars_json = serde_json::to_string(&request.inputs.vars)
        .map_err(|e| PortError::Invalid(e.to_string()))?;
    Ok(proto::SetupRequest {
        archive_sha256: request.artifact.sha256.clone(),
        namespace: o.metadata.namespace.clone(),
        name: o.metadata.name.clone(),
        path: o.spec.path.clone(),
        workspace: o.spec.workspace.clone(),
        backend: Some(proto::Backend {
            kind: Some(backend),
        }),
        vars_json,
        files: request
            .inputs
            .files
            .iter()
            .map(|f| proto::FileMapping {
                location: match f.location {
                    FileLocation::Workspace => proto::file_mapping::Location::Workspace as i32,
                    FileLocation::Home => proto::file_mapping::Location::Home as i32,
                },
                path: f.path.clone(),
                content: f.content.clone(),
            })
            .collect(),
        cli_config: request.inputs.cli_config.clone().unwrap_or_default(),
        env: BTreeMap::new().into_iter().collect(),
        binary: match o.spec.runner.binary {
            tfops_core::api::Binary::Auto => String::new(),
            tfops_core::api::Binary::Terraform => "terraform".into(),
            tfops_core::api::Binary::Tofu => "tofu".into(),
        },
        uid: o.metadata.uid.clone(),
        // Set by the session, which knows the controller's default.
        command_timeout_seconds: 0,
    })
}

/// Each command's timeout for `request`: the object's `spec.timeout`, else `default`.
pub(super) fn command_timeout(
    request: &SetupRequest,
    default: std::time::Duration,
) -> std::time::Duration {
    request
        .object
        .spec
        .timeout
        .as_deref()
        .and_then(|t| tfops_core::duration::parse(t).ok())
        .filter(|t| !t.is_zero())
        .unwrap_or(default)
}

/// Whether `object` keeps its state in tfops' kubernetes backend (no `spec.backendConfig` of
/// its own), the state [`crate::client::Session::hand_state`] can hand over.
pub fn uses_tfops_backend(object: &TerraformObject) -> bool {
    !object
        .spec
        .backend_config
        .as_ref()
        .is_some_and(|b| b.disable || b.custom_configuration.is_some())
}

/// `setup` with tfops' kubernetes backend replaced by `state`, handed over.
pub(super) fn hand_over(setup: &mut proto::SetupRequest, state: Vec<u8>) {
    if let Some(backend) = setup
        .backend
        .as_mut()
        .filter(|b| matches!(b.kind, Some(proto::backend::Kind::Kubernetes(_))))
    {
        backend.kind = Some(proto::backend::Kind::Handed(proto::HandedState {
            state_gzip: state,
        }));
    }
}
