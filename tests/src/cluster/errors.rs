//! API errors as the real server sends them: a `Status` object whose `reason` and `code`
//! client libraries branch on (kube-rs' `ErrorResponse`, client-go's `errors.IsNotFound`).

use serde_json::{Value, json};

/// A failed request, turned into a `Status` body by the handlers.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// The HTTP status.
    pub code: u16,
    /// The `Status` reason (`NotFound`, `AlreadyExists`, `Conflict`, `Invalid`, `Forbidden`,
    /// `Unauthorized`, `BadRequest`, `MethodNotAllowed`, `UnsupportedMediaType`).
    pub reason: &'static str,
    /// The message.
    pub message: String,
    /// `details.name`, `details.kind` (the resource), `details.group`.
    pub details: Option<(String, String, String)>,
}

impl ApiError {
    /// An error about one object, with `details` naming it.
    fn about(
        code: u16,
        reason: &'static str,
        message: String,
        resource: &str,
        group: &str,
        name: &str,
    ) -> Self {
        Self {
            code,
            reason,
            message,
            details: Some((name.into(), resource.into(), group.into())),
        }
    }

    /// 404: `secrets "x" not found`.
    pub fn not_found(resource: &str, group: &str, name: &str) -> Self {
        let message = format!("{} \"{name}\" not found", qualified(resource, group));
        Self::about(404, "NotFound", message, resource, group, name)
    }

    /// 409: `secrets "x" already exists`.
    pub fn already_exists(resource: &str, group: &str, name: &str) -> Self {
        let message = format!("{} \"{name}\" already exists", qualified(resource, group));
        Self::about(409, "AlreadyExists", message, resource, group, name)
    }

    /// 409 for a stale `resourceVersion`, with the real server's wording.
    pub fn conflict(resource: &str, group: &str, name: &str) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
            qualified(resource, group)
        );
        Self::about(409, "Conflict", message, resource, group, name)
    }

    /// 422 for a change that cannot be made to the object.
    pub fn invalid(resource: &str, group: &str, name: &str, message: String) -> Self {
        Self::about(422, "Invalid", message, resource, group, name)
    }

    /// 400 for a body that cannot be used.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            code: 400,
            reason: "BadRequest",
            message: message.into(),
            details: None,
        }
    }

    /// 401 without a valid bearer token.
    pub fn unauthorized() -> Self {
        Self {
            code: 401,
            reason: "Unauthorized",
            message: "Unauthorized".into(),
            details: None,
        }
    }

    /// 404 for a path that names no resource.
    pub fn no_route(path: &str) -> Self {
        Self {
            code: 404,
            reason: "NotFound",
            message: format!("the server could not find the requested resource ({path})"),
            details: None,
        }
    }

    /// 415 for a body in a media type the server does not read.
    pub fn unsupported_media_type(media_type: &str) -> Self {
        Self {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!(
                "the body of the request was in an unknown format - accepted media types include: application/json (not yet {media_type} on this loopback server)"
            ),
            details: None,
        }
    }

    /// 405 for a verb the resource does not support.
    pub fn method_not_allowed(method: &str) -> Self {
        Self {
            code: 405,
            reason: "MethodNotAllowed",
            message: format!(
                "the server does not allow this method on the requested resource ({method})"
            ),
            details: None,
        }
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some((name, kind, group)) = &self.details {
            let mut details = json!({"name": name, "kind": kind});
            if !group.is_empty() {
                details["group"] = Value::String(group.clone());
            }
            status["details"] = details;
        }
        status
    }
}

/// `secrets` or `terraforms.infra.argocd.io`, as messages name a resource.
fn qualified(resource: &str, group: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}
