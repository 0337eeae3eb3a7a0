//! The cluster's certificates: one CA that signs the API server's serving certificate and every
//! client certificate (a user is a certificate: CN the name, O the group, as kube-apiserver's
//! `--client-ca-file` authenticator reads them), and the ServiceAccount signing key.
//!
//! A certificate carries at most one group: rcgen keeps one value per attribute type of a
//! distinguished name (a second `O` replaces the first), so more groups would be lost silently.

use std::net::{IpAddr, Ipv4Addr};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Why a certificate or key could not be made.
#[derive(Debug, thiserror::Error)]
#[error("making the cluster's certificates: {0}")]
pub struct PkiError(#[from] rcgen::Error);

/// A certificate and its private key, PEM.
#[derive(Debug, Clone)]
pub struct CertKey {
    /// The certificate, PEM.
    pub cert_pem: String,
    /// Its private key (PKCS#8), PEM.
    pub key_pem: String,
}

/// The cluster's CA.
pub struct Ca {
    /// The CA's certificate, PEM (what clients trust, and what `--client-ca-file` names).
    pub cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca").finish_non_exhaustive()
    }
}

impl Ca {
    /// A fresh self-signed CA.
    ///
    /// # Errors
    /// [`PkiError`].
    pub fn new() -> Result<Self, PkiError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params
            .distinguished_name
            .push(DnType::CommonName, "tfops test cluster CA");
        let cert = params.self_signed(&key)?;
        Ok(Self {
            cert_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        })
    }

    /// The API server's serving certificate: valid for loopback, `localhost` and the names and
    /// addresses (`service_ips`: the Service IP, the container network's gateway) by which a Pod reaches `kubernetes.default`.
    ///
    /// # Errors
    /// [`PkiError`].
    pub fn serving(&self, service_ips: &[Ipv4Addr]) -> Result<CertKey, PkiError> {
        let names = [
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ];
        let mut params = CertificateParams::new(names.map(String::from).to_vec())?;
        for ip in std::iter::once(&Ipv4Addr::LOCALHOST).chain(service_ips) {
            params
                .subject_alt_names
                .push(SanType::IpAddress(IpAddr::from(*ip)));
        }
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate for `user`, in `group` when given (`system:masters` makes an
    /// admin); the server adds `system:authenticated`.
    ///
    /// # Errors
    /// [`PkiError`].
    pub fn client(&self, user: &str, group: Option<&str>) -> Result<CertKey, PkiError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        if let Some(group) = group {
            params
                .distinguished_name
                .push(DnType::OrganizationName, group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Result<CertKey, PkiError> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(CertKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A fresh ECDSA P-256 key: the ServiceAccount token signing key, PEM (PKCS#8), and its public
/// half, PEM (what `--service-account-key-file` names: kube-apiserver reads no public key out of
/// a PKCS#8 private key file).
///
/// # Errors
/// [`PkiError`].
pub fn signing_key() -> Result<(String, String), PkiError> {
    let key = KeyPair::generate()?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn client_certificates_carry_the_user_and_groups_in_the_subject() {
        let ca = Ca::new().unwrap();
        let c = ca.client("alice", Some("team-a")).unwrap();
        assert!(c.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(c.key_pem.contains("PRIVATE KEY"));
        let der = rustls_pemfile_free_der(&c.cert_pem);
        // The names are in the DER as UTF8/printable strings: enough to see they went in.
        for needle in [&b"alice"[..], b"team-a"] {
            assert!(der.windows(needle.len()).any(|w| w == needle));
        }
    }

    fn rustls_pemfile_free_der(pem: &str) -> Vec<u8> {
        use base64::Engine;
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        base64::engine::general_purpose::STANDARD
            .decode(body)
            .unwrap()
    }
}
