//! Local mode: the whole reconciler on one machine, no cluster.
//!
//! `Terraform` objects are read from YAML files (the same `infra.argocd.io/v1alpha1` objects as
//! in a cluster, with `Secret`s and `ConfigMap`s for their inputs), reconciled in `dependsOn`
//! order by the same `tfops-core` driver, through the same `tfops-runner` server over gRPC and
//! mutual TLS (a child process on 127.0.0.1 with a CA made for the session). Status, plans,
//! outputs and — unless an object names its own backend — Terraform state live in the state
//! directory ([`store`]), so a restart continues where it was.

pub mod health;
pub mod manifest;
pub mod output;
pub mod ports;
mod report;
mod request;
pub mod runner;
pub mod runners;
pub mod store;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tfops_core::api::{BackendConfig, ObjectKey, ObjectMeta, TerraformObject};
use tfops_core::ports::{Ports, SystemClock};
use tfops_core::reconcile::{DependencyState, DependencyView, Driver, DriverError};

pub use report::{ObjectReport, pending_plan};
pub use request::Request;

use manifest::{Manifest, ManifestError, Manifests};
use output::Printer;
use ports::LocalWorld;
use runner::RunnerStartError;
use runners::LocalRunners;
use store::{Persisted, StateDir, StoreError};

/// Why a local command failed (objects that are not Ready are not errors: they are reported).
#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    /// The manifests could not be read.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The state directory could not be used.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The runner could not start.
    #[error(transparent)]
    Runner(#[from] RunnerStartError),
    /// The reconciler could not write status.
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// No manifest file was given or remembered.
    #[error("no manifest given: pass -f FILE (or run `tfops local apply -f FILE` once)")]
    NoManifests,
    /// The named object is not in the manifests.
    #[error("no Terraform object named {0} in the manifests")]
    NoSuchObject(String),
    /// Nothing to approve.
    #[error("{0} has no plan waiting for approval")]
    NoPendingPlan(String),
    /// The approval names another plan.
    #[error("plan {given} is stale: the plan waiting for approval is {pending}")]
    StalePlan {
        /// The id given.
        given: String,
        /// The pending one.
        pending: String,
    },
    /// No lock to release.
    #[error("{0} reports no held state lock")]
    NoLock(String),
}

/// Options shared by the commands.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Manifest files (`-f`).
    pub files: Vec<PathBuf>,
    /// `--state-dir`; default `.tfops/` next to the first manifest.
    pub state_dir: Option<PathBuf>,
    /// `--output json`.
    pub json: bool,
    /// `auto`, `terraform` or `tofu`.
    pub binary: String,
    /// `--logs`: print Terraform's output as it comes.
    pub logs: bool,
}

/// Local mode for one command.
pub struct Local {
    opts: Options,
    printer: Printer,
    manifests: Manifests,
    world: Arc<LocalWorld>,
    runner: tokio::sync::Mutex<Option<Arc<LocalRunners>>>,
}

fn state_dir_for(opts: &Options) -> PathBuf {
    opts.state_dir.clone().unwrap_or_else(|| {
        opts.files
            .first()
            .and_then(|f| f.parent())
            .map(|p| {
                if p.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    p
                }
            })
            .unwrap_or(Path::new("."))
            .join(".tfops")
    })
}

impl Local {
    /// Reads the manifests (given, or remembered in the state directory) and opens the state.
    ///
    /// # Errors
    /// [`LocalError`] for unreadable manifests or state directory.
    pub fn open(mut opts: Options) -> Result<Self, LocalError> {
        let dir = StateDir::open(&state_dir_for(&opts))?;
        if opts.files.is_empty() {
            opts.files = dir.manifests();
        } else {
            dir.set_manifests(&opts.files)?;
        }
        let manifests = if opts.files.is_empty() {
            Manifests::default()
        } else {
            manifest::read(&opts.files)?
        };
        let printer = Printer::new(opts.json).with_logs(opts.logs);
        let mut world = LocalWorld::new(dir, manifests.data.clone(), printer.clone());
        for m in &manifests.objects {
            world.bases.insert(m.key.clone(), m.base_dir.clone());
        }
        world.policies = manifests.policies.clone();
        let mut persisted = BTreeMap::new();
        for m in &manifests.objects {
            let mut p = world.dir.load(&m.key)?.unwrap_or_default();
            let digest = m.spec.digest();
            if p.spec_digest != digest {
                p.generation += 1;
                p.spec_digest = digest;
            }
            persisted.insert(m.key.clone(), p);
        }
        *world.objects.lock().unwrap_or_else(|e| e.into_inner()) = persisted;
        Ok(Self {
            opts,
            printer,
            manifests,
            world: Arc::new(world),
            runner: tokio::sync::Mutex::new(None),
        })
    }

    /// The printer.
    pub fn printer(&self) -> &Printer {
        &self.printer
    }

    fn persisted(&self, key: &ObjectKey) -> Persisted {
        self.world
            .objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    fn find(&self, name: &str) -> Result<&Manifest, LocalError> {
        let (ns, n) = name
            .split_once('/')
            .map_or((None, name), |(a, b)| (Some(a), b));
        self.manifests
            .objects
            .iter()
            .find(|m| m.key.name == n && ns.is_none_or(|ns| m.key.namespace == ns))
            .ok_or_else(|| LocalError::NoSuchObject(name.to_string()))
    }

    fn object(&self, m: &Manifest) -> TerraformObject {
        let p = self.persisted(&m.key);
        let mut spec = m.spec.clone();
        if spec.backend_config.is_none() {
            let path = self.world.dir.state_file(&m.key);
            spec.backend_config = Some(BackendConfig {
                custom_configuration: Some(format!(
                    "terraform {{\n  backend \"local\" {{\n    path = {}\n  }}\n}}\n",
                    serde_json::Value::String(path.display().to_string())
                )),
                ..BackendConfig::default()
            });
        }
        if p.deletion_requested_at.is_some() {
            spec.destroy_resources_on_deletion = true;
        }
        let mut annotations = m.annotations.clone();
        annotations.extend(p.annotations.clone());
        TerraformObject {
            metadata: ObjectMeta {
                name: m.key.name.clone(),
                namespace: m.key.namespace.clone(),
                generation: p.generation.max(1),
                labels: m.labels.clone(),
                annotations,
                deletion_timestamp: p.deletion_requested_at,
                finalizers: p.finalizers.clone(),
                // No API server: nothing to tell objects apart by, no precondition to meet.
                ..ObjectMeta::default()
            },
            spec,
            status: p.status,
        }
    }

    fn relations(&self, m: &Manifest) -> (Vec<DependencyState>, Vec<ObjectKey>) {
        let deps = m
            .spec
            .depends_on
            .iter()
            .map(|d| {
                let key =
                    ObjectKey::new(d.namespace.as_deref().unwrap_or(&m.key.namespace), &d.name);
                let found = self
                    .manifests
                    .objects
                    .iter()
                    .find(|o| o.key == key)
                    .map(|o| DependencyView::of(&self.object(o)));
                DependencyState { key, found }
            })
            .collect();
        let dependants = self
            .manifests
            .objects
            .iter()
            .filter(|o| {
                o.key != m.key
                    && self.world.dir.load(&o.key).ok().flatten().is_some()
                    && o.spec.depends_on.iter().any(|d| {
                        d.name == m.key.name
                            && d.namespace.as_deref().unwrap_or(&o.key.namespace) == m.key.namespace
                    })
            })
            .map(|o| o.key.clone())
            .collect();
        (deps, dependants)
    }

    /// Reconciles the objects named (all when empty) in dependency order, once each, after
    /// applying `request` to them. Returns a report per object and the shortest requeue.
    ///
    /// # Errors
    /// [`LocalError`] for what stops everything (manifests, state, runner).
    pub async fn reconcile(
        &self,
        names: &[String],
        request: Request,
    ) -> Result<(Vec<ObjectReport>, Option<Duration>), LocalError> {
        if self.opts.files.is_empty() {
            return Err(LocalError::NoManifests);
        }
        let _taken = self.world.dir.lock(&request.command())?;
        let selected = self.selected(names)?;
        for m in &selected {
            self.prepare(m, &request)?;
        }
        let driver = Driver::new(self.ports(self.runner().await?));
        let mut reports = Vec::new();
        let mut next: Option<Duration> = None;
        for m in selected {
            let (report, requeue) = self.reconcile_one(&driver, m).await?;
            next = match (next, requeue) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            reports.extend(report);
        }
        Ok((reports, next))
    }

    /// The objects named (all when empty), in dependency order.
    fn selected(&self, names: &[String]) -> Result<Vec<&Manifest>, LocalError> {
        let order = manifest::order(&self.manifests.objects)?;
        let in_order = order.iter().map(|&i| &self.manifests.objects[i]);
        if names.is_empty() {
            return Ok(in_order.collect());
        }
        let wanted: Vec<&Manifest> = names
            .iter()
            .map(|n| self.find(n))
            .collect::<Result<_, _>>()?;
        Ok(in_order
            .filter(|m| wanted.iter().any(|w| w.key == m.key))
            .collect())
    }

    /// The driver's ports: this machine's world, and `runner`.
    fn ports(&self, runner: Arc<LocalRunners>) -> Ports {
        Ports {
            source: self.world.clone(),
            inputs: self.world.clone(),
            runner,
            plans: self.world.clone(),
            outputs: self.world.clone(),
            state: self.world.clone(),
            health: self.world.clone(),
            events: self.world.clone(),
            objects: self.world.clone(),
            clock: Arc::new(SystemClock),
            policies: self.world.clone(),
        }
    }

    /// Reconciles one object and records the run: its report (none when the object is gone)
    /// and when it wants to run again.
    async fn reconcile_one(
        &self,
        driver: &Driver,
        m: &Manifest,
    ) -> Result<(Option<ObjectReport>, Option<Duration>), LocalError> {
        self.printer.object(&m.key.to_string());
        let object = self.object(m);
        let before = object.clone();
        let (deps, dependants) = self.relations(m);
        let started = jiff::Timestamp::now();
        let report = driver.reconcile(object, deps, dependants).await?;
        let kept = self.world.dir.load(&m.key)?.is_some();
        if let Some(entry) = tfops_core::history::entry(&before, &report, started)
            && kept
        {
            self.world.dir.record_run(&m.key, entry)?;
        }
        if report.records.is_empty() {
            self.printer.step("nothing due");
        }
        if !kept {
            self.printer
                .step("removed (its Terraform state file is kept unless tfstate.deleteOnDestroy)");
            return Ok((None, report.requeue_after));
        }
        Ok((
            Some(ObjectReport::of(&m.key, &report.status)),
            report.requeue_after,
        ))
    }

    /// The runners (processes start on first use and are kept for the rest of the command).
    async fn runner(&self) -> Result<Arc<LocalRunners>, LocalError> {
        let mut slot = self.runner.lock().await;
        if let Some(r) = slot.as_ref() {
            return Ok(r.clone());
        }
        let work = self.world.dir.root().join("work");
        let r = Arc::new(LocalRunners::new(
            work,
            &self.opts.binary,
            self.printer.clone(),
        )?);
        *slot = Some(r.clone());
        Ok(r)
    }

    /// Stops the runner, if started: a running Terraform command is cancelled (SIGTERM) and
    /// releases its state lock before the runner exits. Call before exiting, also on Ctrl-C.
    pub async fn shutdown(&self) {
        let runner = self.runner.lock().await.take();
        if let Some(r) = runner {
            r.stop().await;
        }
    }
}
