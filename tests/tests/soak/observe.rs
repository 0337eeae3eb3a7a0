//! What the soak watches while it runs: every version of every state Secret (its lineage,
//! serial and the contents its resources hold), to judge that no state went backwards.

use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};

/// One version of a state Secret.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) at: Instant,
    /// `<namespace>/<name>`.
    pub(crate) secret: String,
    pub(crate) uid: String,
    pub(crate) lineage: String,
    pub(crate) serial: u64,
    /// The `triggers_replace` of its resources (`<owner> <content>`).
    pub(crate) contents: Vec<String>,
}

/// The state Secrets' versions seen so far.
#[derive(Clone, Default)]
pub(crate) struct States(Arc<Mutex<Vec<Seen>>>);

impl States {
    /// Watches the state Secrets (label `tfstate=true`) of `namespaces`.
    pub(crate) fn start(admin: &kube::Client, namespaces: &[&str]) -> Self {
        let states = Self::default();
        for ns in namespaces {
            let api: Api<Secret> = Api::namespaced(admin.clone(), ns);
            let kept = states.0.clone();
            let ns = ns.to_string();
            tokio::spawn(async move {
                let config = watcher::Config::default().labels("tfstate=true");
                let mut events = watcher(api, config).default_backoff().boxed();
                while let Some(event) = events.next().await {
                    let secret = match event {
                        Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => s,
                        _ => continue,
                    };
                    if let Some(seen) = read(&ns, &secret) {
                        kept.lock().unwrap().push(seen);
                    }
                }
            });
        }
        states
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }
}

fn read(ns: &str, secret: &Secret) -> Option<Seen> {
    let gz = secret.data.as_ref()?.get("tfstate")?;
    let mut json = Vec::new();
    flate2::read::GzDecoder::new(gz.0.as_slice())
        .read_to_end(&mut json)
        .ok()?;
    let state: serde_json::Value = serde_json::from_slice(&json).ok()?;
    let contents = state["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["instances"].as_array().cloned().unwrap_or_default())
        // A tainted instance is one whose create did not finish (its provisioner was
        // interrupted): the next plan replaces it, a create again that is no second apply.
        .filter(|i| i["status"].as_str() != Some("tainted"))
        .filter_map(|i| {
            // A dynamic attribute: `{"value": …, "type": …}` in the state, or a plain string.
            let v = &i["attributes"]["triggers_replace"];
            v.as_str().or_else(|| v["value"].as_str()).map(String::from)
        })
        .collect();
    Some(Seen {
        at: Instant::now(),
        secret: format!("{ns}/{}", secret.metadata.name.clone()?),
        uid: secret.metadata.uid.clone()?,
        lineage: state["lineage"].as_str()?.to_string(),
        serial: state["serial"].as_u64()?,
        contents,
    })
}
