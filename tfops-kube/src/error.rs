//! How Kubernetes API failures become the core's [`PortError`]s: the variant (which decides the
//! condition reason) comes from the HTTP status and the `Status` reason, the text names what
//! was being done.

use tfops_core::ports::PortError;

/// The [`PortError`] for a failed API call made while `doing` (e.g. `"saving plan Secret
/// demo/tfplan-default-web"`).
pub fn port_error(doing: &str, error: kube::Error) -> PortError {
    let text = format!("{doing}: {error}");
    match &error {
        kube::Error::Api(status) => match status.code {
            404 => PortError::NotFound(text),
            401 => PortError::AccessDenied(text),
            // A ResourceQuota refusal is a 403 whose message says so (the quota admission
            // plugin's wording: "exceeded quota: <name>, requested: ...").
            403 if status.message.contains("exceeded quota") => PortError::QuotaExhausted(text),
            403 => PortError::AccessDenied(text),
            400 | 422 => PortError::Invalid(text),
            _ => PortError::Unavailable(text),
        },
        _ => PortError::Unavailable(text),
    }
}

/// Whether `error` is the API server's 404.
pub fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 404)
}

/// Whether `error` is the API server's 409 (a conflict or an existing name).
pub fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 409)
}
