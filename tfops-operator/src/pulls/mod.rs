//! The pull-request loop of the manager: for each repository its objects plan pull requests
//! of (`spec.sourceRef.pullRequests`), the open pull requests are listed at the poll interval
//! and at once when the forge's webhook says one opened, moved or was commented on; each
//! object a pull request touches is planned at its head ([`tfops_core::pulls::plan_pull_request`]),
//! the plan stored apart ([`PullPlans`]), shown in one comment and a commit status per object;
//! a new head cancels the plans of the old one, a close removes its plans.
//!
//! What to plan and remove is decided by [`tfops_core::pulls::plans_to_make`] from the open
//! pull requests and the plans stored or being made, so a delivery seen twice, a webhook and a
//! poll at once, or a restart plan nothing twice.

mod approvals;
mod closing;
mod group;
mod publish;
mod tasks;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use tfops_core::api::{ForgeRepository, TerraformObject};
use tfops_core::ports::{PortError, Ports};
use tfops_kube::controller::PollNow;
use tfops_kube::controller::shard::Shard;
use tfops_kube::pull_plans::PullPlans;

pub use group::Group;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// The label of a pull request's plan: `planned`, `failed` (the plan failed: a result the pull
/// request shows), `cancelled` (a newer head or a close came while it was being made: its
/// runner Pod removed mid-way), `superseded` (made, but stale by then: not stored).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlanResult {
    /// `planned`, `failed`, `cancelled` or `superseded`.
    pub result: &'static str,
}

/// What the loop counts, shared with the manager's metrics.
#[derive(Clone, Debug, Default)]
pub struct PullMetrics {
    /// Requests to forges (`tfops_forge_requests_total`).
    pub forge_requests: crate::forge::ForgeRequests,
    /// Pull requests' plans by result (`tfops_pull_request_plans_total`).
    pub plans: Family<PlanResult, Counter>,
}

impl PullMetrics {
    pub(crate) fn plan(&self, result: &'static str) {
        self.plans.get_or_create(&PlanResult { result }).inc();
    }
}

/// How the loop runs.
#[derive(Debug, Clone)]
pub struct PullSettings {
    /// Signs the approvals a merged pull request carries to the apply.
    pub approval_key: tfops_kube::approval_key::ApprovalKey,
    /// How often open pull requests are listed (`None`: only when a webhook asks).
    pub interval: Option<Duration>,
    /// The shard whose objects this manager plans.
    pub shard: Shard,
    /// Plans made at once, across pull requests.
    pub concurrency: usize,
    /// Where webhooks ask for a repository's pull requests at once.
    pub nudge: PollNow,
    /// What the loop counts.
    pub metrics: PullMetrics,
    /// The controller's caches of `Terraform` objects.
    pub stores: tfops_kube::controller::SharedStores,
}

/// A pull request, the objects it touches, and for each whether its head may be planned.
pub(crate) struct Open {
    pub(crate) pull: tfops_core::pulls::PullRequest,
    pub(crate) touched: Vec<(tfops_core::pulls::Touched, tfops_core::pulls::Trust)>,
}

/// The loop's shared parts.
pub(crate) struct Shared {
    pub(crate) client: kube::Client,
    pub(crate) ports: Ports,
    pub(crate) store: PullPlans,
    pub(crate) tasks: tasks::Tasks,
    pub(crate) published: publish::Published,
    /// Asks the loop to look at a repository again (a plan ended).
    pub(crate) nudge: PollNow,
    pub(crate) metrics: PullMetrics,
    /// Repositories with a look asked for soon (merged pull requests' plans being followed).
    pub(crate) following: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// The controller's caches (to ask it to run an object at once).
    pub(crate) stores: tfops_kube::controller::SharedStores,
    /// A forge client per repository and token, kept between looks.
    pub(crate) forges: std::sync::Mutex<BTreeMap<(String, String), Arc<crate::forge::GiteaForge>>>,
}

/// Runs the loop until the process ends.
pub async fn run(client: kube::Client, ports: Ports, settings: PullSettings) {
    let shared = Arc::new(Shared {
        store: PullPlans::new(client.clone()).with_key(settings.approval_key.clone()),
        tasks: tasks::Tasks::new(settings.concurrency.max(1)),
        published: publish::Published::default(),
        nudge: settings.nudge.clone(),
        metrics: settings.metrics.clone(),
        forges: std::sync::Mutex::default(),
        stores: settings.stores.clone(),
        following: std::sync::Mutex::default(),
        client,
        ports,
    });
    let mut every = settings.interval.map(tokio::time::interval);
    loop {
        let only = tokio::select! {
            asked = settings.nudge.take() => Some(asked),
            _ = async {
                match every.as_mut() {
                    Some(t) => { t.tick().await; }
                    None => std::future::pending::<()>().await,
                }
            } => None,
        };
        pass(&shared, &settings, only.as_ref()).await;
    }
}

/// One look at every repository (or only those `only` names, by
/// [`tfops_core::source::repository_id`]).
async fn pass(
    shared: &Arc<Shared>,
    settings: &PullSettings,
    only: Option<&std::collections::BTreeSet<String>>,
) {
    let objects = objects(settings).await;
    for group in groups(shared, objects, only).await {
        if let Err(e) = group::look(shared, &group).await {
            tracing::warn!(repository = %group.id, error = %e, "planning pull requests");
        }
    }
}

/// The objects of this shard that plan pull requests, from the controller's caches (no
/// request to the API server).
async fn objects(settings: &PullSettings) -> Vec<TerraformObject> {
    let mut out = Vec::new();
    for store in settings.stores.ready().await {
        out.extend(
            store
                .state()
                .iter()
                .filter(|t| settings.shard.owns(t.labels()))
                .filter(|t| t.spec.source_ref.pull_requests.is_some())
                .map(|t| t.to_object()),
        );
    }
    out
}

/// The objects grouped by repository and token: each group is one forge client, and one
/// comment per pull request. An object whose token cannot be read is left out, with a
/// warning.
async fn groups(
    shared: &Arc<Shared>,
    objects: Vec<TerraformObject>,
    only: Option<&std::collections::BTreeSet<String>>,
) -> Vec<Group> {
    let mut by: BTreeMap<(String, String), Group> = BTreeMap::new();
    // Each Secret read once per pass, however many objects name it.
    let mut tokens: BTreeMap<(String, String, String), Result<String, PortError>> = BTreeMap::new();
    for object in objects {
        let source = &object.spec.source_ref;
        let Some(pulls) = &source.pull_requests else {
            continue;
        };
        let Some(id) = tfops_core::source::repository_id(&source.url) else {
            continue;
        };
        if only.is_some_and(|ids| !ids.contains(&id)) {
            continue;
        }
        let repository: ForgeRepository = match pulls.repository(&source.url) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(object = %object.key(), error = %e, "spec.sourceRef.pullRequests");
                continue;
            }
        };
        let secret = &pulls.token_secret_ref;
        // Per object namespace: a Secret elsewhere may grant one namespace and not another.
        let at = (
            format!(
                "{}/{}",
                object.metadata.namespace,
                secret.namespace_for(&object.metadata.namespace)
            ),
            secret.name.clone(),
            secret.key.clone(),
        );
        let read = match tokens.get(&at) {
            Some(read) => read.clone(),
            None => {
                let read = group::token(&shared.client, &object).await;
                tokens.insert(at, read.clone());
                read
            }
        };
        let token = match read {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(object = %object.key(), error = %e, "reading the forge token");
                continue;
            }
        };
        let digest = tfops_core::digest::sha256_hex(token.as_bytes());
        by.entry((id.clone(), digest))
            .or_insert_with(|| Group::new(id, repository, token))
            .objects
            .push(object);
    }
    by.into_values().collect()
}
