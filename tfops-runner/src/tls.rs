//! Mutual TLS between the controller and its runners.
//!
//! The controller owns a certificate authority ([`Pki`]). It issues a server certificate per
//! namespace, stored in that namespace's `terraform-runner.tls` Secret as `ca.crt`, `tls.crt`
//! and `tls.key` ([`RunnerSecret`]); **the CA's private key never leaves the controller**. The
//! controller connects with its own client certificate from the same CA, and checks the
//! runner's certificate against the name [`runner_server_name`] of the namespace, whatever the
//! Pod's IP.
//!
//! Rotation: the CA is renewed a look-ahead before it expires, and the previous CA stays
//! trusted (in `ca.crt` and in the controller's roots) until it expires. New runners get
//! server certificates of the new CA; the controller keeps presenting a client certificate of
//! the previous CA until that CA is gone, so runners started before and after the switch all
//! accept it and no run fails with an unknown authority.

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// rcgen refused the parameters or failed to sign.
    #[error("generating a certificate")]
    Generate(#[from] rcgen::Error),
    /// A saved CA is unusable (its key does not parse, or does not match its certificate).
    #[error("the saved CA is unusable: {0}")]
    Saved(String),
}

/// The name the runner's server certificate carries for `namespace`; the controller verifies
/// it while dialling the Pod by IP.
pub fn runner_server_name(namespace: &str) -> String {
    format!("tf-runner.{namespace}.tfops")
}

/// A certificate and its key, in PEM.
#[derive(Clone)]
pub struct Pem {
    /// The certificate.
    pub cert: String,
    /// The private key (never logged).
    pub key: String,
    /// When it expires.
    pub not_after: SystemTime,
}

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pem")
            .field("not_after", &self.not_after)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// One certificate authority.
pub struct CertificateAuthority {
    params: CertificateParams,
    key: KeyPair,
    cert_pem: String,
    not_after: SystemTime,
}

fn validity(params: &mut CertificateParams, now: SystemTime, valid_for: Duration) -> SystemTime {
    // Tolerate clocks a little behind ours.
    let not_before = now.checked_sub(Duration::from_secs(300)).unwrap_or(now);
    let not_after = now + valid_for;
    params.not_before = time::OffsetDateTime::from(not_before);
    params.not_after = time::OffsetDateTime::from(not_after);
    not_after
}

fn ca_params() -> Result<CertificateParams, TlsError> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "tfops controller CA");
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    Ok(params)
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl CertificateAuthority {
    /// A new CA valid from `now` for `valid_for`.
    ///
    /// # Errors
    /// [`TlsError::Generate`].
    pub fn generate(now: SystemTime, valid_for: Duration) -> Result<Self, TlsError> {
        let key = KeyPair::generate()?;
        let mut params = ca_params()?;
        let not_after = validity(&mut params, now, valid_for);
        let cert_pem = params.self_signed(&key)?.pem();
        Ok(Self {
            params,
            key,
            cert_pem,
            not_after,
        })
    }

    /// What to keep to use this CA again after a restart (the controller keeps it in a Secret
    /// of its own namespace; it holds the CA key and never goes to a runner).
    pub fn save(&self) -> SavedCa {
        SavedCa {
            cert: self.cert_pem.clone(),
            key: self.key.serialize_pem(),
            not_before: unix(SystemTime::from(self.params.not_before)),
            not_after: unix(self.not_after),
        }
    }

    /// The CA `saved` describes: its certificate is used as is, and new certificates are
    /// signed with its key under the same name.
    ///
    /// # Errors
    /// [`TlsError::Saved`] when the key does not parse or is not the certificate's key.
    pub fn load(saved: &SavedCa) -> Result<Self, TlsError> {
        let key = KeyPair::from_pem(&saved.key).map_err(|e| TlsError::Saved(e.to_string()))?;
        let mut params = ca_params()?;
        let at = |secs: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        params.not_before = time::OffsetDateTime::from(at(saved.not_before));
        params.not_after = time::OffsetDateTime::from(at(saved.not_after));
        // The saved certificate must carry this key: compare the public keys.
        let spki = |pem: &str| -> Result<Vec<u8>, TlsError> {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            let der = CertificateDer::from_pem_slice(pem.as_bytes())
                .map_err(|e| TlsError::Saved(format!("the certificate is not PEM: {e}")))?;
            Ok(der.to_vec())
        };
        let der = spki(&saved.cert)?;
        let public = rcgen::PublicKeyData::subject_public_key_info(&key);
        if !der.windows(public.len()).any(|w| w == public.as_slice()) {
            return Err(TlsError::Saved(
                "the key is not the key of the certificate".into(),
            ));
        }
        Ok(Self {
            params,
            key,
            cert_pem: saved.cert.clone(),
            not_after: at(saved.not_after),
        })
    }

    /// The CA certificate.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// When the CA expires.
    pub fn not_after(&self) -> SystemTime {
        self.not_after
    }

    fn issue(
        &self,
        common_name: &str,
        sans: Vec<SanType>,
        usage: ExtendedKeyUsagePurpose,
        now: SystemTime,
        valid_for: Duration,
    ) -> Result<Pem, TlsError> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.subject_alt_names = sans;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        // A leaf never outlives its CA.
        let valid_for = valid_for.min(self.not_after.duration_since(now).unwrap_or_default());
        let not_after = validity(&mut params, now, valid_for);
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Pem {
            cert: cert.pem(),
            key: key.serialize_pem(),
            not_after,
        })
    }

    /// A server certificate for the runners of `namespace`.
    ///
    /// # Errors
    /// [`TlsError::Generate`].
    pub fn issue_server(
        &self,
        namespace: &str,
        now: SystemTime,
        valid_for: Duration,
    ) -> Result<Pem, TlsError> {
        let name = runner_server_name(namespace);
        let san = SanType::DnsName(name.clone().try_into()?);
        self.issue(
            &name,
            vec![san],
            ExtendedKeyUsagePurpose::ServerAuth,
            now,
            valid_for,
        )
    }

    /// The controller's client certificate.
    ///
    /// # Errors
    /// [`TlsError::Generate`].
    pub fn issue_client(&self, now: SystemTime, valid_for: Duration) -> Result<Pem, TlsError> {
        self.issue(
            "tfops-controller",
            Vec::new(),
            ExtendedKeyUsagePurpose::ClientAuth,
            now,
            valid_for,
        )
    }
}

/// A CA as saved ([`CertificateAuthority::save`]): certificate and key PEM, validity in Unix
/// seconds. Its `Debug` never shows the key.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedCa {
    /// The CA certificate, PEM.
    pub cert: String,
    /// The CA key, PEM (secret).
    pub key: String,
    /// Valid from (Unix seconds).
    pub not_before: u64,
    /// Valid until (Unix seconds).
    pub not_after: u64,
}

impl std::fmt::Debug for SavedCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SavedCa")
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("key", &"<redacted>")
            .finish()
    }
}

/// The whole PKI as saved: the current CA and, during a rotation, the previous one.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedPki {
    /// The CA that issues.
    pub current: SavedCa,
    /// The previous CA, still trusted until it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<SavedCa>,
}

/// What the per-namespace `terraform-runner.tls` Secret holds: no CA key.
#[derive(Clone)]
pub struct RunnerSecret {
    /// `ca.crt`: every CA currently trusted, PEM.
    pub ca_crt: String,
    /// `tls.crt`: the runner's server certificate.
    pub tls_crt: String,
    /// `tls.key`: its key.
    pub tls_key: String,
}

impl std::fmt::Debug for RunnerSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunnerSecret")
            .field("tls_key", &"<redacted>")
            .finish()
    }
}

/// Whether a certificate expiring at `not_after` must be renewed at `now`.
pub fn needs_renewal(not_after: SystemTime, now: SystemTime, look_ahead: Duration) -> bool {
    now + look_ahead >= not_after
}

/// The controller's public key infrastructure: the current CA, the previous one while it is
/// still valid, and the durations in force.
pub struct Pki {
    current: CertificateAuthority,
    previous: Option<CertificateAuthority>,
    /// How long a CA is valid (`--ca-validity-duration`).
    pub ca_validity: Duration,
    /// How long leaf certificates are valid.
    pub leaf_validity: Duration,
    /// How long before expiry certificates are renewed.
    pub look_ahead: Duration,
}

impl Pki {
    /// A new PKI with a fresh CA.
    ///
    /// # Errors
    /// [`TlsError::Generate`].
    pub fn new(
        now: SystemTime,
        ca_validity: Duration,
        leaf_validity: Duration,
        look_ahead: Duration,
    ) -> Result<Self, TlsError> {
        Ok(Self {
            current: CertificateAuthority::generate(now, ca_validity)?,
            previous: None,
            ca_validity,
            leaf_validity,
            look_ahead,
        })
    }

    /// What to keep to use this PKI again after a restart.
    pub fn save(&self) -> SavedPki {
        SavedPki {
            current: self.current.save(),
            previous: self.previous.as_ref().map(CertificateAuthority::save),
        }
    }

    /// The PKI `saved` describes, with these durations.
    ///
    /// # Errors
    /// [`TlsError::Saved`].
    pub fn load(
        saved: &SavedPki,
        ca_validity: Duration,
        leaf_validity: Duration,
        look_ahead: Duration,
    ) -> Result<Self, TlsError> {
        Ok(Self {
            current: CertificateAuthority::load(&saved.current)?,
            previous: saved
                .previous
                .as_ref()
                .map(CertificateAuthority::load)
                .transpose()?,
            ca_validity,
            leaf_validity,
            look_ahead,
        })
    }

    /// The CA that issues new certificates.
    pub fn current(&self) -> &CertificateAuthority {
        &self.current
    }

    /// Every CA to trust, PEM: the current one and, during a rotation, the previous one.
    pub fn trust_bundle(&self) -> String {
        let mut bundle = self.current.cert_pem.clone();
        if let Some(previous) = &self.previous {
            bundle.push_str(&previous.cert_pem);
        }
        bundle
    }

    /// Renews the CA when it is within the look-ahead of expiring, keeping the old one trusted
    /// until it expires; forgets an expired previous CA. Returns whether the CA changed.
    ///
    /// # Errors
    /// [`TlsError::Generate`].
    pub fn rotate_if_due(&mut self, now: SystemTime) -> Result<bool, TlsError> {
        if self.previous.as_ref().is_some_and(|p| p.not_after <= now) {
            self.previous = None;
        }
        if !needs_renewal(self.current.not_after, now, self.look_ahead) {
            return Ok(false);
        }
        let next = CertificateAuthority::generate(now, self.ca_validity)?;
        self.previous = Some(std::mem::replace(&mut self.current, next));
        Ok(true)
    }

    /// The Secret for the runners of `namespace`.
    ///
    /// # Errors
    /// [`TlsError::Generate`].
    pub fn runner_secret(
        &self,
        namespace: &str,
        now: SystemTime,
    ) -> Result<RunnerSecret, TlsError> {
        let leaf = self
            .current
            .issue_server(namespace, now, self.leaf_validity)?;
        Ok(RunnerSecret {
            ca_crt: self.trust_bundle(),
            tls_crt: leaf.cert,
            tls_key: leaf.key,
        })
    }

    /// A client certificate for the controller. During a rotation it comes from the previous
    /// CA, which runners started before the rotation (trusting only that CA) and after it
    /// (trusting both) all accept; once the previous CA is gone, from the current one.
    ///
    /// # Errors
    /// [`TlsError::Generate`].
    pub fn client(&self, now: SystemTime) -> Result<Pem, TlsError> {
        match &self.previous {
            Some(previous) if previous.not_after > now => {
                previous.issue_client(now, self.leaf_validity)
            }
            _ => self.current.issue_client(now, self.leaf_validity),
        }
    }
}
