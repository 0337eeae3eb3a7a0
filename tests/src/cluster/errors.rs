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
    /// `details.name`, `details.kind` (the resource; the kind for `Invalid`), `details.group`.
    pub details: Option<Box<(String, String, String)>>,
    /// `details.causes`: the field errors of an `Invalid` error.
    pub causes: Vec<FieldError>,
}

/// What is wrong with one field, as `field.Error` says it in the real server.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueForbidden`,
    /// `FieldValueNotSupported`, `FieldValueTypeInvalid`, `FieldValueDuplicate`.
    pub reason: &'static str,
    /// The field path (`metadata.name`, `spec.values[0].x`).
    pub field: String,
    /// The message without the field (`Invalid value: "x": detail`).
    pub message: String,
}

/// A JSON value as the real server prints it in a field error: strings quoted, numbers and
/// booleans bare, objects and lists in Go's `%#v`-like short form.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        Value::Null => "\"null\"".into(),
        other => other.to_string(),
    }
}

impl FieldError {
    /// `field: Invalid value: <value>: detail`.
    pub fn invalid(field: impl Into<String>, value: &Value, detail: impl AsRef<str>) -> Self {
        Self {
            reason: "FieldValueInvalid",
            field: field.into(),
            message: format!("Invalid value: {}: {}", shown(value), detail.as_ref()),
        }
    }

    /// `field: Invalid value: "string": field in body must be of type integer: "string"`.
    pub fn type_invalid(field: impl Into<String>, value: &Value, detail: impl AsRef<str>) -> Self {
        Self {
            reason: "FieldValueTypeInvalid",
            field: field.into(),
            message: format!("Invalid value: {}: {}", shown(value), detail.as_ref()),
        }
    }

    /// `field: Required value`.
    pub fn required(field: impl Into<String>) -> Self {
        Self {
            reason: "FieldValueRequired",
            field: field.into(),
            message: "Required value".into(),
        }
    }

    /// `field: Forbidden: detail`.
    pub fn forbidden(field: impl Into<String>, detail: impl AsRef<str>) -> Self {
        Self {
            reason: "FieldValueForbidden",
            field: field.into(),
            message: format!("Forbidden: {}", detail.as_ref()),
        }
    }

    /// `field: Unsupported value: "x": supported values: "a", "b"`.
    pub fn not_supported(field: impl Into<String>, value: &Value, supported: &[Value]) -> Self {
        let list: Vec<String> = supported.iter().map(shown).collect();
        Self {
            reason: "FieldValueNotSupported",
            field: field.into(),
            message: format!(
                "Unsupported value: {}: supported values: {}",
                shown(value),
                list.join(", ")
            ),
        }
    }

    /// `field: Duplicate value: <value>`.
    pub fn duplicate(field: impl Into<String>, value: &Value) -> Self {
        Self {
            reason: "FieldValueDuplicate",
            field: field.into(),
            message: format!("Duplicate value: {}", shown(value)),
        }
    }

    fn text(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
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
            details: Some(Box::new((name.into(), resource.into(), group.into()))),
            causes: Vec::new(),
        }
    }

    /// 422 `Invalid` with field errors: `Secret "x" is invalid: metadata.name: ...` (several
    /// errors in brackets), `details.kind` the kind, `details.causes` one per error.
    pub fn invalid_fields(kind: &str, group: &str, name: &str, errors: Vec<FieldError>) -> Self {
        let texts: Vec<String> = errors.iter().map(FieldError::text).collect();
        let joined = if texts.len() == 1 {
            texts[0].clone()
        } else {
            format!("[{}]", texts.join(", "))
        };
        let message = format!("{} \"{name}\" is invalid: {joined}", qualified(kind, group));
        let mut e = Self::about(422, "Invalid", message, kind, group, name);
        e.causes = errors;
        e
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

    /// 409 for a delete precondition (`uid`, `resourceVersion`) that does not hold, worded as
    /// the real server's storage layer words it (`key` is the object's etcd key).
    pub fn precondition_failed(
        resource: &str,
        group: &str,
        name: &str,
        key: &str,
        why: String,
    ) -> Self {
        let message = format!(
            "Operation cannot be fulfilled on {} \"{name}\": StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: {why}",
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
            causes: Vec::new(),
        }
    }

    /// 401 without a valid bearer token.
    pub fn unauthorized() -> Self {
        Self {
            code: 401,
            reason: "Unauthorized",
            message: "Unauthorized".into(),
            details: None,
            causes: Vec::new(),
        }
    }

    /// 403 `Forbidden`: `secrets "x" is forbidden: why`.
    pub fn forbidden(resource: &str, group: &str, name: &str, why: impl AsRef<str>) -> Self {
        let message = if name.is_empty() {
            format!(
                "{} is forbidden: {}",
                qualified(resource, group),
                why.as_ref()
            )
        } else {
            format!(
                "{} \"{name}\" is forbidden: {}",
                qualified(resource, group),
                why.as_ref()
            )
        };
        Self::about(403, "Forbidden", message, resource, group, name)
    }

    /// 410 `Expired`: a `continue` token or watch `resourceVersion` older than the store keeps.
    pub fn expired(message: impl Into<String>) -> Self {
        Self {
            code: 410,
            reason: "Expired",
            message: message.into(),
            details: None,
            causes: Vec::new(),
        }
    }

    /// 404 for a path that names no resource.
    pub fn no_route(path: &str) -> Self {
        Self {
            code: 404,
            reason: "NotFound",
            message: format!("the server could not find the requested resource ({path})"),
            details: None,
            causes: Vec::new(),
        }
    }

    /// 415 for a body in a media type the server does not read.
    pub fn unsupported_media_type(media_type: &str) -> Self {
        Self {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/vnd.kubernetes.protobuf (not {media_type})"
            ),
            details: None,
            causes: Vec::new(),
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
            causes: Vec::new(),
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
        if let Some(d) = &self.details {
            let (name, kind, group) = &**d;
            let mut details = json!({"name": name, "kind": kind});
            if !group.is_empty() {
                details["group"] = Value::String(group.clone());
            }
            if !self.causes.is_empty() {
                details["causes"] = Value::Array(
                    self.causes
                        .iter()
                        .map(
                            |c| json!({"reason": c.reason, "message": c.message, "field": c.field}),
                        )
                        .collect(),
                );
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
