//! Reconciles under way and for how long, taken at each scrape: a run that hangs shows here
//! long before its timeout stops it (`tfops_reconcile_in_progress_seconds`, the alert
//! `TfopsRunNearTimeout`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use tfops_core::api::ObjectKey;

use super::objects::{Clock, gauges};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ObjectLabels {
    namespace: String,
    name: String,
}

/// The reconciles under way, by object, with when each began.
pub(super) struct InProgress {
    since: Mutex<BTreeMap<ObjectKey, jiff::Timestamp>>,
    clock: Clock,
}

impl std::fmt::Debug for InProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProgress").finish_non_exhaustive()
    }
}

impl InProgress {
    pub(super) fn new(clock: Clock) -> Self {
        Self {
            since: Mutex::new(BTreeMap::new()),
            clock,
        }
    }

    fn since(&self) -> std::sync::MutexGuard<'_, BTreeMap<ObjectKey, jiff::Timestamp>> {
        // A panic while holding the lock leaves a map that is still whole.
        self.since.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A reconcile of `object` began now.
    pub(super) fn began(&self, object: &ObjectKey) {
        let now = (self.clock)();
        self.since().insert(object.clone(), now);
    }

    /// The reconcile of `object` ended (or the object is gone).
    pub(super) fn ended(&self, object: &ObjectKey) {
        self.since().remove(object);
    }

    fn encode_at(
        &self,
        now: jiff::Timestamp,
        mut encoder: DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        let since = self.since().clone();
        let seconds = |at: &jiff::Timestamp| now.duration_since(*at).as_secs_f64().max(0.0);
        gauges(
            &mut encoder,
            "reconcile_in_progress_seconds",
            "How long the object's reconcile (its run, when it runs Terraform) has been under way (present only while one is).",
            since.iter().map(|(k, at)| {
                let labels = ObjectLabels {
                    namespace: k.namespace.clone(),
                    name: k.name.clone(),
                };
                (labels, seconds(at))
            }),
        )?;
        let longest = since.values().map(seconds).fold(0.0, f64::max);
        encoder
            .encode_descriptor(
                "longest_reconcile_in_progress_seconds",
                "The longest reconcile under way (0: none).",
                None,
                prometheus_client::metrics::MetricType::Gauge,
            )?
            .encode_gauge(&longest)
    }
}

impl Collector for InProgress {
    fn encode(&self, encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.encode_at((self.clock)(), encoder)
    }
}
