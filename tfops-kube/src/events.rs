//! Events (`events.k8s.io/v1`) on `Terraform` objects through kube's [`Recorder`], which
//! deduplicates as client-go's recorder does: a repeat of an event (same type, reason, action,
//! reporter and object) within minutes becomes a series on the first one (its count and last
//! time patched) rather than a new object.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::Api;
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder, Reporter};
use tfops_core::api::{GROUP, KIND, ObjectKey, VERSION};
use tfops_core::ports::{Event, EventSink, EventType};
use tokio::sync::Mutex;

use crate::Terraform;

/// The most an event's note may hold (the API refuses more than 1 kB).
const NOTE_LIMIT: usize = 1024;
/// The `action` of every event: what tfops was doing.
const ACTION: &str = "Reconcile";

/// Emits events as `reporter` (the controller's name and instance).
#[derive(Clone)]
pub struct KubeEventSink {
    client: kube::Client,
    recorder: Recorder,
    /// Objects' uids, so that events name the object they are about (`kubectl describe`
    /// finds events by uid), looked up once per object.
    uids: Arc<Mutex<HashMap<ObjectKey, String>>>,
}

impl std::fmt::Debug for KubeEventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeEventSink").finish_non_exhaustive()
    }
}

/// `note` cut to what the API accepts, on a character boundary.
pub fn note(message: &str) -> String {
    if message.len() <= NOTE_LIMIT {
        return message.to_string();
    }
    let mut cut = NOTE_LIMIT - 3;
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}...", &message[..cut])
}

impl KubeEventSink {
    /// A sink with `client`, reporting as `reporter`.
    pub fn new(client: kube::Client, reporter: Reporter) -> Self {
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            uids: Arc::default(),
        }
    }

    /// Tells the sink the uid of an object it will emit events on (the controller knows it
    /// from the object it reconciles; otherwise the sink reads the object once).
    pub async fn observe(&self, object: &ObjectKey, uid: &str) {
        let mut uids = self.uids.lock().await;
        if uids.get(object).map(String::as_str) != Some(uid) {
            uids.insert(object.clone(), uid.to_string());
        }
    }

    async fn uid(&self, object: &ObjectKey) -> Option<String> {
        if let Some(uid) = self.uids.lock().await.get(object) {
            return Some(uid.clone());
        }
        let api: Api<Terraform> = Api::namespaced(self.client.clone(), &object.namespace);
        let uid = api.get(&object.name).await.ok()?.metadata.uid?;
        self.uids.lock().await.insert(object.clone(), uid.clone());
        Some(uid)
    }
}

#[async_trait]
impl EventSink for KubeEventSink {
    async fn emit(&self, object: &ObjectKey, event: Event) {
        let reference = ObjectReference {
            api_version: Some(format!("{GROUP}/{VERSION}")),
            kind: Some(KIND.to_string()),
            name: Some(object.name.clone()),
            namespace: Some(object.namespace.clone()),
            uid: self.uid(object).await,
            ..ObjectReference::default()
        };
        let kube_event = KubeEvent {
            type_: match event.event_type {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: event.reason.as_str().to_string(),
            note: Some(note(&event.message)),
            action: ACTION.to_string(),
            secondary: None,
        };
        // Best effort, as the port says: a lost event must not fail a run.
        if let Err(e) = self.recorder.publish(&kube_event, &reference).await {
            tracing::warn!(object = %object, reason = %event.reason.as_str(), error = %e, "could not emit an event");
        }
    }
}
