//! Forges behind [`tfops_core::pulls::Forge`]: Gitea.

mod gitea;

pub use gitea::GiteaForge;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// The labels of a request to a forge: its HTTP method and status code (0: no answer).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ForgeRequest {
    /// `GET`, `POST`, `PATCH`.
    pub method: String,
    /// The status code, 0 when none came.
    pub code: u16,
}

/// Requests made to forges (`tfops_forge_requests_total`), shared by every forge client of
/// the process and the metrics that show them.
pub type ForgeRequests = Family<ForgeRequest, Counter>;
