//! The controller's side: a gRPC client over mutual TLS, and [`Session`], which implements the
//! core's runner-session port on it (`session`).

mod session;
mod setup;
mod stop;

pub use session::Session;
pub use setup::{setup_request, uses_tfops_backend};
pub use stop::StopSignal;

use std::future::Future;

use tokio::net::TcpListener;
use tonic::transport::{
    Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig,
};

use crate::proto::{self, run_request::Command, runner_client, runner_server};
use crate::server::RunnerService;

/// The largest gRPC message either side accepts by default (`--grpc-max-message-size`):
/// plan files travel in one message.
pub const DEFAULT_MAX_MESSAGE: usize = 128 << 20;

/// Each Terraform command's timeout when neither the object (`spec.timeout`) nor the manager
/// (`--default-timeout`) says otherwise: two hours, longer than the slowest single creates
/// of managed cloud services take (database clusters and CDN distributions are on the scale
/// of an hour), short enough that a hung command frees its object and its slot the same
/// working day.
pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2 * 3600);

/// How the controller talks to runners (the manager's flags set it).
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// How long connecting may take.
    pub connect_timeout: std::time::Duration,
    /// HTTP/2 keepalive pings this often, so a dead runner is noticed during a long apply.
    pub keepalive_interval: std::time::Duration,
    /// How long a keepalive ping may go unanswered before the connection counts as broken.
    pub keepalive_timeout: std::time::Duration,
    /// The longest one command may run before a setup names its timeout; past it the
    /// command is cancelled and fails.
    pub command_deadline: std::time::Duration,
    /// Each Terraform command's timeout when the object sets no `spec.timeout`
    /// (`--default-timeout`); the runner stops a command at it.
    pub default_timeout: std::time::Duration,
    /// How much longer than its timeout the controller waits for a command's end before it
    /// gives the runner up (a frozen runner answers nothing, not even at its own deadline).
    pub deadline_margin: std::time::Duration,
    /// The largest message either way (`--grpc-max-message-size`; plan files travel in one).
    pub max_message: usize,
    /// How often a broken stream is followed by re-attaching to the run before it fails.
    pub reattach_attempts: u32,
    /// The wait before the first re-attach, doubled for each next one.
    pub reattach_backoff: std::time::Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            connect_timeout: std::time::Duration::from_secs(10),
            keepalive_interval: std::time::Duration::from_secs(20),
            keepalive_timeout: std::time::Duration::from_secs(10),
            command_deadline: std::time::Duration::from_secs(6 * 3600),
            default_timeout: DEFAULT_TIMEOUT,
            deadline_margin: std::time::Duration::from_secs(300),
            max_message: DEFAULT_MAX_MESSAGE,
            reattach_attempts: 4,
            reattach_backoff: std::time::Duration::from_millis(500),
        }
    }
}

/// The controller's TLS material for one runner.
#[derive(Clone)]
pub struct ClientTls {
    /// Every CA to trust for the runner's certificate, PEM.
    pub ca_bundle: String,
    /// The controller's client certificate.
    pub cert: String,
    /// Its key.
    pub key: String,
    /// The name the runner's certificate must carry ([`crate::tls::runner_server_name`]).
    pub server_name: String,
}

/// The runner's TLS material (what the `terraform-runner.tls` Secret holds).
#[derive(Clone)]
pub struct ServerTls {
    /// `tls.crt`.
    pub cert: String,
    /// `tls.key`.
    pub key: String,
    /// `ca.crt`: the CAs whose client certificates are accepted.
    pub client_ca_bundle: String,
}

/// Why talking to a runner failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint or TLS material is unusable, or the connection failed.
    #[error("connecting to runner {endpoint}: {}", causes(source))]
    Connect {
        /// The endpoint.
        endpoint: String,
        /// The cause.
        #[source]
        source: tonic::transport::Error,
    },
    /// A call failed.
    #[error("runner call {call} failed: {}", status_text(status))]
    Call {
        /// The RPC.
        call: &'static str,
        /// The status.
        status: tonic::Status,
    },
    /// The run's stream ended without a result.
    #[error("run {0} ended without a result")]
    NoResult(String),
}

/// Serves `service` on `listener` with mutual TLS until `shutdown` completes.
///
/// # Errors
/// The transport's error.
pub async fn serve(
    listener: TcpListener,
    service: RunnerService,
    tls: &ServerTls,
    max_message: usize,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let config = ServerTlsConfig::new()
        .identity(Identity::from_pem(&tls.cert, &tls.key))
        .client_ca_root(Certificate::from_pem(&tls.client_ca_bundle));
    Server::builder()
        .tls_config(config)?
        .add_service(
            runner_server::RunnerServer::new(service)
                .max_decoding_message_size(max_message)
                .max_encoding_message_size(max_message),
        )
        .serve_with_incoming_shutdown(no_delay(listener), shutdown)
        .await
}

/// The connections `listener` accepts, each with `TCP_NODELAY`. (`Server::tcp_nodelay` applies
/// only to the server's own listener.) Without it a small reply waits behind the kernel's
/// coalescing of small writes until the client's delayed ACK, 40 ms on Linux: measured as a
/// 45 ms stall in one of `setup`, `init` or `workspace` of most local runs.
fn no_delay(
    listener: TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|accepted| {
        accepted.and_then(|stream| {
            stream.set_nodelay(true)?;
            Ok(stream)
        })
    })
}

/// A connection to one runner.
#[derive(Clone)]
pub struct RunnerClient {
    rpc: runner_client::RunnerClient<Channel>,
    config: ClientConfig,
}

fn call(name: &'static str) -> impl FnOnce(tonic::Status) -> ClientError {
    move |status| ClientError::Call { call: name, status }
}

impl RunnerClient {
    /// Connects to `endpoint` (`https://10.0.0.7:30000`) with mutual TLS and the default
    /// [`ClientConfig`].
    ///
    /// # Errors
    /// [`ClientError::Connect`].
    pub async fn connect(endpoint: &str, tls: &ClientTls) -> Result<Self, ClientError> {
        Self::connect_with(endpoint, tls, ClientConfig::default()).await
    }

    /// Connects to `endpoint` with mutual TLS and `config`.
    ///
    /// # Errors
    /// [`ClientError::Connect`].
    pub async fn connect_with(
        endpoint: &str,
        tls: &ClientTls,
        config: ClientConfig,
    ) -> Result<Self, ClientError> {
        let err = |source| ClientError::Connect {
            endpoint: endpoint.to_string(),
            source,
        };
        let tls_config = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&tls.ca_bundle))
            .identity(Identity::from_pem(&tls.cert, &tls.key))
            .domain_name(tls.server_name.clone());
        let channel = Endpoint::from_shared(endpoint.to_string())
            .map_err(err)?
            .tls_config(tls_config)
            .map_err(err)?
            .connect_timeout(config.connect_timeout)
            .http2_keep_alive_interval(config.keepalive_interval)
            .keep_alive_timeout(config.keepalive_timeout)
            .keep_alive_while_idle(true)
            .connect()
            .await
            .map_err(err)?;
        Ok(Self {
            rpc: runner_client::RunnerClient::new(channel)
                .max_decoding_message_size(config.max_message)
                .max_encoding_message_size(config.max_message),
            config,
        })
    }

    /// The binary and its version.
    ///
    /// # Errors
    /// [`ClientError::Call`].
    pub async fn info(&mut self) -> Result<(String, String), ClientError> {
        let r = self.info_reply().await?;
        Ok((r.binary, r.version))
    }

    /// Everything the runner says of itself (binary, version, whether it writes plans and
    /// outputs itself).
    ///
    /// # Errors
    /// [`ClientError::Call`].
    pub async fn info_reply(&mut self) -> Result<proto::InfoReply, ClientError> {
        Ok(self
            .rpc
            .info(proto::InfoRequest {})
            .await
            .map_err(call("Info"))?
            .into_inner())
    }

    /// Uploads the archive unless the runner holds it already; returns whether it uploaded.
    ///
    /// # Errors
    /// [`ClientError::Call`].
    pub async fn upload(&mut self, data: &[u8], sha256: &str) -> Result<bool, ClientError> {
        let present = self
            .rpc
            .has_archive(proto::ArchiveRef {
                sha256: sha256.to_string(),
            })
            .await
            .map_err(call("HasArchive"))?
            .into_inner()
            .present;
        if present {
            return Ok(false);
        }
        let chunks: Vec<proto::ArchiveChunk> = data
            .chunks(1 << 20)
            .enumerate()
            .map(|(i, c)| proto::ArchiveChunk {
                sha256: if i == 0 {
                    sha256.to_string()
                } else {
                    String::new()
                },
                data: c.to_vec(),
            })
            .collect();
        let chunks = if chunks.is_empty() {
            vec![proto::ArchiveChunk {
                sha256: sha256.to_string(),
                data: Vec::new(),
            }]
        } else {
            chunks
        };
        self.rpc
            .upload_archive(tokio_stream::iter(chunks))
            .await
            .map_err(call("UploadArchive"))?;
        Ok(true)
    }

    /// Prepares the working directory.
    ///
    /// # Errors
    /// [`ClientError::Call`].
    pub async fn setup(&mut self, request: proto::SetupRequest) -> Result<String, ClientError> {
        Ok(self
            .rpc
            .setup(request)
            .await
            .map_err(call("Setup"))?
            .into_inner()
            .working_dir)
    }

    /// Runs `command` as `run_id` (or re-attaches when `command` is `None` or the id is known),
    /// passing each log line to `on_line`, and returns the result.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn run(
        &mut self,
        run_id: &str,
        command: Option<Command>,
        mut on_line: impl FnMut(&proto::LogLine) + Send,
    ) -> Result<proto::RunResult, ClientError> {
        let mut stream = self
            .rpc
            .run(proto::RunRequest {
                run_id: run_id.to_string(),
                command,
            })
            .await
            .map_err(call("Run"))?
            .into_inner();
        while let Some(event) = stream.message().await.map_err(call("Run"))? {
            match event.event {
                Some(proto::run_event::Event::Log(line)) => on_line(&line),
                Some(proto::run_event::Event::Result(result)) => return Ok(result),
                None => {}
            }
        }
        Err(ClientError::NoResult(run_id.to_string()))
    }

    /// Cancels `run_id`; returns whether it was running.
    ///
    /// # Errors
    /// [`ClientError::Call`].
    pub async fn cancel(&mut self, run_id: &str) -> Result<bool, ClientError> {
        Ok(self
            .rpc
            .cancel(proto::CancelRequest {
                run_id: run_id.to_string(),
            })
            .await
            .map_err(call("Cancel"))?
            .into_inner()
            .was_running)
    }

    /// Removes the working directory.
    ///
    /// # Errors
    /// [`ClientError::Call`].
    pub async fn cleanup(&mut self) -> Result<(), ClientError> {
        self.rpc
            .cleanup(proto::CleanupRequest {})
            .await
            .map_err(call("Cleanup"))?;
        Ok(())
    }
}

/// A call's status in words: who refused whose certificate when TLS refused it (the status
/// itself says only "transport error"), else the status.
pub(super) fn status_text(status: &tonic::Status) -> String {
    crate::refusal::tls_refusal(status).unwrap_or_else(|| status.to_string())
}

/// An error and every cause below it, joined by `: `, or the TLS refusal it is (which only the
/// innermost cause tells: "invalid peer certificate: UnknownIssuer") put in words.
pub(super) fn causes(e: &(dyn std::error::Error + 'static)) -> String {
    if let Some(refusal) = crate::refusal::tls_refusal(e) {
        return refusal;
    }
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        cur = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every accepted connection has Nagle's algorithm off: a small reply goes out at once.
    #[tokio::test]
    async fn accepted_connections_send_small_replies_at_once() {
        use tokio_stream::StreamExt;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let _client = tokio::net::TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut incoming = std::pin::pin!(no_delay(listener));
        let accepted = incoming
            .next()
            .await
            .and_then(Result::ok)
            .unwrap_or_else(|| panic!("no connection accepted"));
        assert!(accepted.nodelay().unwrap_or(false));
    }
}
