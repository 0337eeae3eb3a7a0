//! The manager's flags: the names tofu-controller's users know where one exists, each also an
//! environment variable (the image as `RUNNER_POD_IMAGE`, the Pod's namespace and name from
//! the downward API's `POD_NAMESPACE` and `POD_NAME`).

use std::net::SocketAddr;
use std::time::Duration;

use clap::{ArgAction, Parser};

use crate::logs::LogFormat;
use tfops_kube::controller::shard::Shard;

fn shard(text: &str) -> Result<Shard, String> {
    Shard::parse(text).map_err(|e| e.to_string())
}

fn go_duration(text: &str) -> Result<Duration, String> {
    tfops_core::duration::parse(text).map_err(|e| e.to_string())
}

/// `tfops-manager`: reconciles `Terraform` objects in a cluster.
#[derive(Debug, Clone, Parser)]
// A flag given twice takes its last value (as Go's flag package does for tofu-controller's).
#[command(
    name = "tfops-manager",
    version,
    about = "The tfops controller: reconciles the Terraform objects of a cluster, running plans and applies in runner Pods (run it in the cluster, as the Helm chart does)",
    long_about = None,
    args_override_self = true
)]
pub struct Flags {
    /// The runner image (pinned per release): runner Pods use it unless `spec.runner.image`
    /// says otherwise.
    #[arg(long, env = "RUNNER_POD_IMAGE")]
    pub runner_pod_image: String,
    /// Reconciles running at once, across all watched namespaces (0: no limit).
    #[arg(long, env = "TFOPS_CONCURRENT", default_value_t = 4)]
    pub concurrent: u16,
    /// How long a runner Pod may take to become Ready (Go duration).
    #[arg(long, env = "TFOPS_RUNNER_CREATION_TIMEOUT", default_value = "120s", value_parser = go_duration)]
    pub runner_creation_timeout: Duration,
    /// How long each Terraform command of a run may take when the object sets no
    /// `spec.timeout` (Go duration): stopped at it as Ctrl-C stops Terraform, killed after the
    /// runner Pod's grace period.
    #[arg(long, env = "TFOPS_DEFAULT_TIMEOUT", default_value = "2h", value_parser = go_duration)]
    pub default_timeout: Duration,
    /// How much longer than a command's timeout the manager waits for its runner's answer
    /// before it gives the runner up and deletes its Pod (Go duration): a frozen runner does
    /// not stop itself at its deadline.
    #[arg(long, env = "TFOPS_RUNNER_DEADLINE_MARGIN", default_value = "5m", value_parser = go_duration)]
    pub runner_deadline_margin: Duration,
    /// The largest gRPC message between manager and runners, in bytes (plan files travel in
    /// one).
    #[arg(long, env = "TFOPS_RUNNER_GRPC_MAX_MESSAGE_SIZE", default_value_t = tfops_runner::client::DEFAULT_MAX_MESSAGE)]
    pub runner_grpc_max_message_size: usize,
    /// How long the runner CA is valid (Go duration); it is renewed a quarter before.
    #[arg(long, env = "TFOPS_CA_VALIDITY_DURATION", default_value = "2160h", value_parser = go_duration)]
    pub ca_validity_duration: Duration,
    /// How long the certificates of runners and of the manager are valid (Go duration);
    /// default a third of the CA's validity, at least an hour or the CA's validity if shorter.
    #[arg(long, env = "TFOPS_CERT_VALIDITY_DURATION", value_parser = go_duration)]
    pub cert_validity_duration: Option<Duration>,
    /// How long before expiry the CA and certificates are renewed (Go duration); default a
    /// quarter of the CA's validity.
    #[arg(long, env = "TFOPS_CERT_RENEW_BEFORE", value_parser = go_duration)]
    pub cert_renew_before: Option<Duration>,
    /// How often the CA's expiry is checked (Go duration).
    #[arg(long, env = "TFOPS_CERT_ROTATION_CHECK_FREQUENCY", default_value = "30m", value_parser = go_duration)]
    pub cert_rotation_check_frequency: Duration,
    /// How long to wait before retrying a reconcile that failed for a reason of the cluster
    /// (the API server unreachable, a conflict); an object's own failures wait its
    /// `spec.retryInterval` (Go duration).
    #[arg(long, env = "TFOPS_ERROR_REQUEUE_INTERVAL", default_value = "10s", value_parser = go_duration)]
    pub error_requeue_interval: Duration,
    /// How often each distinct source (repository and reference) of the watched objects is
    /// resolved, so that objects pick up a new revision at once rather than at their
    /// `spec.interval`; one that changed nothing under an object's path costs it no runner Pod
    /// (Go duration; `0`: no polling).
    #[arg(long, env = "TFOPS_SOURCE_POLL_INTERVAL", default_value = "1m", value_parser = go_duration)]
    pub source_poll_interval: Duration,
    /// The namespaces to watch, comma-separated; all when not given (the controller's RBAC
    /// may then be bound per namespace instead of cluster-wide).
    #[arg(
        long,
        visible_alias = "watch-namespace",
        env = "TFOPS_WATCH_NAMESPACES",
        value_delimiter = ','
    )]
    pub watch_namespaces: Vec<String>,
    /// The port runner Pods serve gRPC on.
    #[arg(long, env = "TFOPS_RUNNER_GRPC_PORT", default_value_t = tfops_kube::runner::pod::GRPC_PORT)]
    pub runner_grpc_port: u16,
    /// Requests per second to the Kubernetes API, sustained (as Flux's controllers).
    #[arg(long, env = "TFOPS_KUBE_API_QPS", default_value_t = 50.0)]
    pub kube_api_qps: f32,
    /// Requests to the Kubernetes API allowed in a burst above `--kube-api-qps`.
    #[arg(long, env = "TFOPS_KUBE_API_BURST", default_value_t = 300)]
    pub kube_api_burst: u32,
    /// Use Argo CD's repository credentials for sources that name no Secret of their own.
    #[arg(long, env = "TFOPS_ENABLE_ARGOCD_CREDENTIALS")]
    pub enable_argocd_credentials: bool,
    /// Argo CD's namespace.
    #[arg(long, env = "TFOPS_ARGOCD_NAMESPACE", default_value = "argocd")]
    pub argocd_namespace: String,
    /// The manager's own namespace (its CA Secret and leader Lease live there).
    #[arg(long, env = "POD_NAMESPACE", default_value = "tfops-system")]
    pub namespace: String,
    /// This replica's name in the leader Lease and in events (default: the host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Elect one leader among replicas with a Lease; only the leader reconciles.
    #[arg(long, env = "TFOPS_LEADER_ELECTION", default_value_t = true, action = ArgAction::Set)]
    pub leader_election: bool,
    /// The leader Lease's name; default `tfops-manager`, and `tfops-manager-shard-NAME` for
    /// `--shard NAME` (each shard elects its own leader).
    #[arg(long, env = "TFOPS_LEADER_ELECTION_ID")]
    pub leader_election_id: Option<String>,
    /// The shard this manager reconciles: objects labelled `infra.argocd.io/shard=NAME`.
    /// Without it (or empty), the default shard: objects without that label.
    #[arg(long, env = "TFOPS_SHARD", default_value = "", value_parser = shard)]
    pub shard: Shard,
    /// How long a leader's Lease lasts without renewal (Go duration, whole seconds): a standby
    /// takes over within it.
    #[arg(long, env = "TFOPS_LEADER_ELECTION_LEASE_DURATION", default_value = "15s", value_parser = go_duration)]
    pub leader_election_lease_duration: Duration,
    /// Where `/metrics` is served.
    #[arg(long, env = "TFOPS_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Where `/healthz` and `/readyz` are served.
    #[arg(long, env = "TFOPS_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    pub health_addr: SocketAddr,
    /// Where the forge's webhooks are received (`POST /hooks/gitea`; plain HTTP, put TLS in
    /// front of it): a push makes the repository's sources be resolved at once. None when not
    /// given.
    #[arg(long, env = "TFOPS_WEBHOOK_ADDR")]
    pub webhook_addr: Option<SocketAddr>,
    /// A file holding the webhooks' secret (a mounted Secret), which signs every delivery;
    /// required with `--webhook-addr`.
    #[arg(long, env = "TFOPS_WEBHOOK_SECRET_FILE", requires = "webhook_addr")]
    pub webhook_secret_file: Option<std::path::PathBuf>,
    /// Log format.
    #[arg(long, env = "TFOPS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Json)]
    pub log_format: LogFormat,
    /// Where Git repositories are cached.
    #[arg(long, env = "TFOPS_GIT_CACHE", default_value = "/tmp/tfops-git-cache")]
    pub git_cache: std::path::PathBuf,
}

impl Flags {
    /// The leader Lease's name (`--leader-election-id`, or derived from the shard).
    pub fn lease_name(&self) -> String {
        match (&self.leader_election_id, &self.shard) {
            (Some(id), _) => id.clone(),
            (None, Shard::Default) => "tfops-manager".into(),
            (None, Shard::Named(name)) => format!("tfops-manager-shard-{name}"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn defaults_flags_and_bad_values() {
        let f = Flags::try_parse_from(["tfops-manager", "--runner-pod-image", "r:1"]).unwrap();
        assert_eq!(f.concurrent, 4);
        assert_eq!(f.runner_creation_timeout, Duration::from_secs(120));
        assert_eq!(f.ca_validity_duration, Duration::from_secs(2160 * 3600));
        assert!(f.leader_election);
        assert_eq!(f.source_poll_interval, Duration::from_secs(60));
        let f = Flags::try_parse_from([
            "tfops-manager",
            "--runner-pod-image",
            "r:1",
            "--leader-election",
            "false",
            "--runner-creation-timeout",
            "5m",
            "--watch-namespaces",
            "team-a,team-b",
            "--runner-grpc-port",
            "31000",
        ])
        .unwrap();
        assert!(!f.leader_election);
        assert_eq!(f.runner_creation_timeout, Duration::from_secs(300));
        assert_eq!(f.watch_namespaces, ["team-a", "team-b"]);
        assert_eq!(f.runner_grpc_port, 31000);
        assert_eq!((f.kube_api_qps, f.kube_api_burst), (50.0, 300));
        let f = Flags::try_parse_from([
            "tfops-manager",
            "--runner-pod-image",
            "r:1",
            "--watch-namespace",
            "team-a",
        ])
        .unwrap();
        assert_eq!(
            f.watch_namespaces,
            ["team-a"],
            "the singular name still works"
        );
        let e = Flags::try_parse_from([
            "tfops-manager",
            "--runner-pod-image",
            "r:1",
            "--runner-creation-timeout",
            "soon",
        ])
        .unwrap_err();
        assert!(e.to_string().contains("--runner-creation-timeout"), "{e}");
        assert_eq!(f.shard, Shard::Default);
        assert_eq!(f.lease_name(), "tfops-manager");
        let f =
            Flags::try_parse_from(["tfops-manager", "--runner-pod-image", "r", "--shard", "eu"])
                .unwrap();
        assert_eq!(f.shard, Shard::Named("eu".into()));
        assert_eq!(
            f.lease_name(),
            "tfops-manager-shard-eu",
            "a Lease per shard"
        );
        let f = Flags::try_parse_from([
            "tfops-manager",
            "--runner-pod-image",
            "r",
            "--shard",
            "eu",
            "--leader-election-id",
            "mine",
        ])
        .unwrap();
        assert_eq!(f.lease_name(), "mine");
        let e =
            Flags::try_parse_from(["tfops-manager", "--runner-pod-image", "r", "--shard", "e u"])
                .unwrap_err();
        assert!(e.to_string().contains("not a label value"), "{e}");
        let e = Flags::try_parse_from(["tfops-manager", "--concurent", "2"]).unwrap_err();
        assert!(e.to_string().contains("--concurrent"), "a suggestion: {e}");
    }
}
