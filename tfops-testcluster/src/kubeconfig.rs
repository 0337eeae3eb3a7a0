//! Kubeconfig files for the test cluster: what kubectl, helm and kube-rs read.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::pki::CertKey;

/// How a kubeconfig's user authenticates.
#[derive(Debug, Clone)]
pub enum Credentials<'a> {
    /// A bearer token (a ServiceAccount's, from the TokenRequest API).
    Token(&'a str),
    /// A client certificate and key (a user: CN the name, O the groups).
    Certificate(&'a CertKey),
}

/// A kubeconfig for the server at `server` (`https://host:port`) whose CA is `ca_pem`.
pub fn text(server: &str, ca_pem: &str, credentials: &Credentials<'_>) -> String {
    let ca = STANDARD.encode(ca_pem.as_bytes());
    let user = match credentials {
        Credentials::Token(token) => format!("    token: {token}\n"),
        Credentials::Certificate(c) => format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            STANDARD.encode(c.cert_pem.as_bytes()),
            STANDARD.encode(c.key_pem.as_bytes())
        ),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: tfops-test\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: tfops-test-user\n  user:\n{user}contexts:\n- name: tfops-test\n  context:\n    cluster: tfops-test\n    user: tfops-test-user\ncurrent-context: tfops-test\n"
    )
}
