//! Credentials for a remote: HTTP user and token, SSH keys checked against `known_hosts`,
//! a CA for HTTPS, and the callbacks that hand them to git2.

use std::sync::{Arc, Mutex};

/// Credentials for a Git remote: a username and password or token (HTTP), or a private key
/// checked against `known_hosts` (SSH).
#[derive(Clone, Default)]
pub struct GitCredentials {
    /// The username (`git` or anything for a token).
    pub username: Option<String>,
    /// The password or token.
    pub password: Option<String>,
    /// An SSH private key (OpenSSH PEM).
    pub ssh_private_key: Option<String>,
    /// Its passphrase.
    pub ssh_passphrase: Option<String>,
    /// `known_hosts` lines the server's host key must match.
    pub known_hosts: Option<String>,
    /// Accept a server whose host is not in `known_hosts` at all (a mismatch is never accepted).
    pub allow_unknown_host_key: bool,
    /// CA certificates (PEM) an `https://` server's certificate must chain to, instead of the
    /// system's roots.
    pub ca_bundle: Option<String>,
}

impl std::fmt::Debug for GitCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret = |v: &Option<String>| v.as_ref().map(|_| "<redacted>");
        f.debug_struct("GitCredentials")
            .field("username", &self.username)
            .field("password", &secret(&self.password))
            .field("ssh_private_key", &secret(&self.ssh_private_key))
            .field("ssh_passphrase", &secret(&self.ssh_passphrase))
            .field("allow_unknown_host_key", &self.allow_unknown_host_key)
            .finish()
    }
}

/// How a server's SSH host key compares with `known_hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostKeyCheck {
    /// An entry for the host has this key.
    Known,
    /// Entries for the host exist, none with this key.
    Mismatch,
    /// No entry names the host.
    Unknown,
}

/// Checks `key` (type name like `ssh-ed25519`, raw key blob) of `host` (and `port`) against
/// plain (unhashed) `known_hosts` lines.
pub fn check_host_key(
    known_hosts: &str,
    host: &str,
    port: u16,
    key_type: &str,
    key: &[u8],
) -> HostKeyCheck {
    use base64::Engine;
    let names = [host.to_string(), format!("[{host}]:{port}")];
    let mut seen = false;
    for line in known_hosts
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let mut fields = line.split_whitespace();
        let (Some(hosts), Some(kind), Some(blob)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if !hosts
            .split(',')
            .any(|h| names.iter().any(|n| n == h) || (port == 22 && h == host))
        {
            continue;
        }
        seen = true;
        let matches = kind == key_type
            && base64::engine::general_purpose::STANDARD
                .decode(blob)
                .is_ok_and(|b| b == key);
        if matches {
            return HostKeyCheck::Known;
        }
    }
    if seen {
        HostKeyCheck::Mismatch
    } else {
        HostKeyCheck::Unknown
    }
}

/// The scheme and host (with port) of a Git URL; scp-like `user@host:path` is `ssh`.
pub(super) fn scheme_and_host(url: &str) -> (String, String) {
    // `<transport>::<address>` picks a remote helper (`ext::` runs a command).
    if let Some((transport, _)) = url.split_once("::")
        && !transport.contains('/')
    {
        return (
            format!("{}::", transport.to_ascii_lowercase()),
            String::new(),
        );
    }
    if let Some((scheme, rest)) = url.split_once("://") {
        let authority = rest.split('/').next().unwrap_or_default();
        let host = authority.rsplit('@').next().unwrap_or_default();
        return (scheme.to_ascii_lowercase(), host.to_ascii_lowercase());
    }
    match url.split_once(':') {
        Some((user_host, _)) if !user_host.contains('/') => (
            "ssh".into(),
            user_host
                .rsplit('@')
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase(),
        ),
        _ => ("file".into(), String::new()),
    }
}

/// Verifies a server certificate (DER) for `host` against the CA certificates of `ca_pem`.
fn verify_with_ca(ca_pem: &str, leaf: &[u8], host: &str) -> Result<(), String> {
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        let cert = cert.map_err(|e| format!("the CA bundle is not PEM: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("the CA bundle holds an unusable certificate: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    verifier
        .verify_server_cert(
            &CertificateDer::from(leaf.to_vec()),
            &[],
            &name,
            &[],
            UnixTime::now(),
        )
        .map(drop)
        .map_err(|e| e.to_string())
}

fn port_of(url: &str) -> u16 {
    url.split_once("://")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|authority| {
            authority
                .rsplit_once('@')
                .map_or(Some(authority), |(_, h)| Some(h))
        })
        .and_then(|hostport| hostport.rsplit_once(':'))
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or(22)
}

/// Why the host-key check refused a server, kept because libgit2 replaces the callback's
/// error with a generic one.
pub(super) type HostKeyVerdict = Mutex<Option<String>>;

pub(super) fn callbacks<'a>(
    creds: &'a GitCredentials,
    url: &str,
    verdict: &'a HostKeyVerdict,
) -> git2::RemoteCallbacks<'a> {
    let mut cb = git2::RemoteCallbacks::new();
    let mut tried = false;
    cb.credentials(move |_url, username, allowed| {
        // SSH without a user in the URL: libgit2 first asks only for the user name.
        if allowed == git2::CredentialType::USERNAME {
            return git2::Cred::username(creds.username.as_deref().unwrap_or("git"));
        }
        // Offer the credentials once; libgit2 asks again when they are refused.
        if tried {
            return Err(git2::Error::from_str("authentication refused"));
        }
        tried = true;
        if allowed.contains(git2::CredentialType::SSH_KEY)
            && let Some(key) = &creds.ssh_private_key
        {
            let user = creds.username.as_deref().or(username).unwrap_or("git");
            return git2::Cred::ssh_key_from_memory(
                user,
                None,
                key,
                creds.ssh_passphrase.as_deref(),
            );
        }
        match (&creds.username, &creds.password) {
            (user, Some(password))
                if allowed.contains(git2::CredentialType::USER_PASS_PLAINTEXT) =>
            {
                git2::Cred::userpass_plaintext(
                    user.as_deref().or(username).unwrap_or("git"),
                    password,
                )
            }
            _ => Err(git2::Error::from_str(
                "authentication required but no credentials were given",
            )),
        }
    });
    let port = port_of(url);
    cb.certificate_check(move |cert, host| {
        let Some(hostkey) = cert.as_hostkey() else {
            // TLS: against the configured CA, else libgit2 checks the system's roots.
            let (Some(ca), Some(x509)) = (&creds.ca_bundle, cert.as_x509()) else {
                return Ok(git2::CertificateCheckStatus::CertificatePassthrough);
            };
            return match verify_with_ca(ca, x509.data(), host) {
                Ok(()) => Ok(git2::CertificateCheckStatus::CertificateOk),
                Err(why) => {
                    let refusal = format!("TLS certificate of {host} was refused: {why}");
                    *verdict.lock().unwrap_or_else(|e| e.into_inner()) = Some(refusal.clone());
                    Err(git2::Error::from_str(&refusal))
                }
            };
        };
        let (Some(key), Some(kind)) = (hostkey.hostkey(), hostkey.hostkey_type()) else {
            return Err(git2::Error::from_str("host key of an unknown type"));
        };
        let known = creds.known_hosts.as_deref().unwrap_or("");
        let refusal = match check_host_key(known, host, port, kind.name(), key) {
            HostKeyCheck::Known => return Ok(git2::CertificateCheckStatus::CertificateOk),
            HostKeyCheck::Unknown if creds.allow_unknown_host_key => {
                return Ok(git2::CertificateCheckStatus::CertificateOk);
            }
            HostKeyCheck::Unknown => format!(
                "host key of {host} is unknown: add it to known_hosts (or allow unknown host keys explicitly)"
            ),
            HostKeyCheck::Mismatch => format!(
                "host key mismatch for {host}: the server's {} key is not the one known_hosts names",
                kind.name()
            ),
        };
        *verdict.lock().unwrap_or_else(|e| e.into_inner()) = Some(refusal.clone());
        Err(git2::Error::from_str(&refusal))
    });
    cb
}
