//! Health checks for local mode: a TCP connection, or a plain-HTTP GET expecting 2xx.

use std::time::Duration;

use tfops_core::api::HealthCheckType;
use tfops_core::ports::{PortError, ResolvedHealthCheck};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Runs one check.
///
/// # Errors
/// [`PortError::Unavailable`] saying what failed; [`PortError::Invalid`] for an `https://`
/// URL, which local mode does not check.
pub async fn check(c: &ResolvedHealthCheck) -> Result<(), PortError> {
    let run = async {
        match c.check_type {
            HealthCheckType::Tcp => tokio::net::TcpStream::connect(&c.target)
                .await
                .map(drop)
                .map_err(|e| PortError::Unavailable(format!("connecting to {}: {e}", c.target))),
            HealthCheckType::Http => http_get(&c.target).await,
        }
    };
    tokio::time::timeout(c.timeout, run)
        .await
        .unwrap_or_else(|_| {
            Err(PortError::Unavailable(format!(
                "no answer within {:?}",
                c.timeout
            )))
        })
}

async fn http_get(url: &str) -> Result<(), PortError> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        PortError::Invalid(format!(
            "local mode checks plain http:// URLs only, not {url}"
        ))
    })?;
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    let addr = if host.contains(':') {
        host.to_string()
    } else {
        format!("{host}:80")
    };
    let mut s = tokio::net::TcpStream::connect(&addr)
        .await
        .map_err(|e| PortError::Unavailable(format!("connecting to {addr}: {e}")))?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes())
        .await
        .map_err(|e| PortError::Unavailable(e.to_string()))?;
    let mut head = vec![0u8; 64];
    let n = s
        .read(&mut head)
        .await
        .map_err(|e| PortError::Unavailable(e.to_string()))?;
    let line = String::from_utf8_lossy(&head[..n]);
    let code: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    if (200..300).contains(&code) {
        Ok(())
    } else {
        Err(PortError::Unavailable(format!("GET {url} answered {code}")))
    }
}

/// The default timeout when a check names none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20);
