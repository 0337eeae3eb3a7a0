//! What a TLS refusal between the controller and a runner means, in words.
//!
//! A refusal is only told deep in an error's source chain: the runner refuses the controller's
//! client certificate after the handshake looks done to the controller (TLS 1.3), so the first
//! call fails with tonic's "transport error" and the alert the runner sent sits four causes
//! down, inside an `io::Error`; the controller's own refusal of the runner's certificate sits
//! under the connect error. [`tls_refusal`] finds either and says who refused what and why.

use rustls::{AlertDescription, CertificateError};

/// Who refused whose certificate and why ("the runner refused the controller's certificate:
/// expired or not yet valid"), if a TLS refusal is anywhere in `e`'s source chain.
#[must_use]
pub fn tls_refusal(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(tls) = as_rustls(err) {
            return describe(&tls);
        }
        cur = err.source();
    }
    None
}

/// The rustls error `err` is, or carries inside an `io::Error` (whose `source` skips it).
///
/// An alert received on an HTTP/2 connection reaches us as text only: h2 keeps an I/O error's
/// kind and message, not the error, so rustls's "received fatal alert: CertificateExpired" is
/// read back into the alert it names.
fn as_rustls(err: &(dyn std::error::Error + 'static)) -> Option<rustls::Error> {
    if let Some(tls) = err.downcast_ref::<rustls::Error>() {
        return Some(tls.clone());
    }
    let io = err.downcast_ref::<std::io::Error>()?;
    let inner = io.get_ref()?;
    if let Some(tls) = inner.downcast_ref::<rustls::Error>() {
        return Some(tls.clone());
    }
    let name = inner.to_string();
    let name = name.strip_prefix("received fatal alert: ")?;
    (0..=u8::MAX)
        .map(AlertDescription::from)
        .find(|a| format!("{a:?}") == name)
        .map(rustls::Error::AlertReceived)
}

fn describe(e: &rustls::Error) -> Option<String> {
    match e {
        rustls::Error::AlertReceived(alert) => Some(format!(
            "the runner refused the controller's certificate: {} (TLS alert {alert:?})",
            alert_reason(*alert)
        )),
        rustls::Error::InvalidCertificate(cert) => Some(format!(
            "the controller refused the runner's certificate: {}",
            certificate_reason(cert)
        )),
        rustls::Error::NoCertificatesPresented => {
            Some("the runner presented no certificate".to_string())
        }
        _ => None,
    }
}

/// The reason an alert stands for, as rustls and other TLS stacks send it for a refused
/// certificate (RFC 8446 §6.2: `certificate_expired` covers "not currently valid").
fn alert_reason(alert: AlertDescription) -> String {
    match alert {
        AlertDescription::CertificateExpired => "expired or not yet valid".into(),
        AlertDescription::UnknownCA => "issued by a CA the runner does not trust".into(),
        AlertDescription::DecryptError => {
            "its signature does not verify with the runner's CA (issued by another CA?)".into()
        }
        AlertDescription::UnsupportedCertificate => {
            "not usable for client authentication (key usage)".into()
        }
        AlertDescription::CertificateRequired | AlertDescription::NoCertificate => {
            "none was presented".into()
        }
        AlertDescription::CertificateRevoked => "revoked".into(),
        AlertDescription::BadCertificate => "malformed or not acceptable".into(),
        AlertDescription::AccessDenied => "access denied".into(),
        other => format!("{other:?}"),
    }
}

fn certificate_reason(e: &CertificateError) -> String {
    match e {
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => "expired".into(),
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            "not yet valid".into()
        }
        CertificateError::UnknownIssuer => "issued by a CA the controller does not trust".into(),
        CertificateError::BadSignature => {
            "its signature does not verify with the controller's CA (issued by another CA?)".into()
        }
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            "issued for another name (another namespace's runner?)".into()
        }
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            "not usable for server authentication (key usage)".into()
        }
        CertificateError::Revoked => "revoked".into(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alert_inside_an_io_error_is_found_and_named() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(AlertDescription::CertificateExpired),
        );
        let text = tls_refusal(&io).unwrap_or_default();
        assert_eq!(
            text,
            "the runner refused the controller's certificate: expired or not yet valid \
             (TLS alert CertificateExpired)"
        );
    }

    #[test]
    fn an_alert_that_h2_kept_as_text_is_read_back() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "received fatal alert: UnknownCA".to_string(),
        );
        assert_eq!(
            tls_refusal(&io).as_deref(),
            Some(
                "the runner refused the controller's certificate: issued by a CA the runner \
                 does not trust (TLS alert UnknownCA)"
            )
        );
    }

    #[test]
    fn the_controllers_own_refusal_names_the_reason() {
        let e = rustls::Error::InvalidCertificate(CertificateError::NotValidForName);
        assert_eq!(
            tls_refusal(&e).as_deref(),
            Some(
                "the controller refused the runner's certificate: issued for another name \
                 (another namespace's runner?)"
            )
        );
    }

    #[test]
    fn an_error_without_a_refusal_says_nothing() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(tls_refusal(&io), None);
    }
}
