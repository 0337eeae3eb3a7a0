//! The whole operator on the test cluster: the CRDs, the RBAC of `config/rbac/` bound to
//! the controller's and the runners' ServiceAccounts, a Git repository, and the manager
//! running as a process with the controller's ServiceAccount token, which a test can kill and
//! start again.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, PostParams};
use kube::runtime::wait::await_condition;
use serde_json::json;
use tfops_kube::Terraform;
use tfops_testcluster::TestCluster;

use super::git::GitDaemon;
use super::manager::Manager;

/// The configuration every test's repository starts with.
pub const CONFIG: &str = r#"variable "greeting" {
  type    = string
  default = "hello"
}
resource "terraform_data" "x" {
  input = var.greeting
}
output "greeting" {
  value = terraform_data.x.output
}
"#;

/// The operator and its cluster.
pub struct Operator {
    /// The cluster (with its kubelet).
    pub cluster: TestCluster,
    /// An admin client (what the test, as a user, does).
    pub admin: kube::Client,
    /// The Git server; repository `infra` holds [`CONFIG`].
    pub git: GitDaemon,
    /// The admin kubeconfig file, for kubectl.
    pub kubeconfig: PathBuf,
    /// A kubeconfig file of the controller's ServiceAccount, for manager processes.
    pub controller_kubeconfig: PathBuf,
    flags: Vec<String>,
    running: Option<Manager>,
    _dirs: Vec<tempfile::TempDir>,
}

/// A kubeconfig file authenticating with `token`, in a fresh directory.
pub fn kubeconfig_dir_for(cluster: &TestCluster, token: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, cluster.kubeconfig_for(token)).unwrap();
    (dir, path)
}

impl Operator {
    /// Everything set up and the manager running (one replica, no leader election), watching
    /// all namespaces; objects go in `team-a`, whose `tf-runner` ServiceAccount holds the
    /// runner's role. Runner Pods are real containers when [`super::containers_wanted`].
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// [`Operator::start`] with more manager flags (they win over the defaults).
    pub async fn start_with(flags: &[&str]) -> Self {
        Self::start_on(super::containers_wanted(), flags).await
    }

    /// [`Operator::start_with`] with runner Pods as local processes whatever
    /// [`super::containers_wanted`] says: for tests whose Terraform reads or waits for files
    /// of the test's own (a container sees none of them).
    pub async fn start_with_processes(flags: &[&str]) -> Self {
        Self::start_on(false, flags).await
    }

    async fn start_on(containers: bool, flags: &[&str]) -> Self {
        let mut operator = Self::prepare_on(containers).await;
        operator.start_prepared(flags);
        operator
    }

    /// Starts the manager of an [`Operator::prepare`]d cluster as [`Operator::start_with`]
    /// does (one replica, no leader election, `flags`), once the test arranged what it needs.
    pub fn start_prepared(&mut self, flags: &[&str]) {
        self.flags = ["--leader-election", "false"]
            .iter()
            .chain(flags)
            .map(ToString::to_string)
            .collect();
        self.start_controller();
    }

    /// [`Operator::start`] with runner Pods run as real containers from the runner image
    /// `scripts/build-images` built (`TFOPS_RUNNER_IMAGE`), the manager told to use it.
    pub async fn start_in_containers() -> Self {
        Self::start_in_containers_with(&[]).await
    }

    /// [`Operator::start_in_containers`] with more manager flags.
    pub async fn start_in_containers_with(flags: &[&str]) -> Self {
        let image = super::runner_image();
        let mut all = vec!["--runner-pod-image", image.as_str()];
        all.extend(flags);
        Self::start_on(true, &all).await
    }

    /// Everything but the manager (a test starts manager processes itself).
    pub async fn prepare() -> Self {
        Self::prepare_on(super::containers_wanted()).await
    }

    /// [`Operator::prepare`]; runner Pods are real containers when `containers`.
    pub async fn prepare_on(containers: bool) -> Self {
        let (cluster, pods_dir) = super::cluster_with_node_on(containers).await;
        let admin = super::client(&cluster).await;
        super::terraform_crd_served(&admin).await;
        super::crd_served(&admin, &tfops_kube::policy_crd().unwrap()).await;
        let pp = PostParams::default();
        for ns in ["tfops-system", "team-a"] {
            super::namespace(&admin, ns).await;
        }
        let account = |ns: &str, name: &str| {
            let (api, body) = (
                Api::<ServiceAccount>::namespaced(admin.clone(), ns),
                super::from_json::<ServiceAccount>(json!({"metadata": {"name": name}})),
            );
            async move { api.create(&PostParams::default(), &body).await.unwrap() }
        };
        account("tfops-system", "tfops-controller").await;
        account("team-a", "tf-runner").await;
        let roles: Api<ClusterRole> = Api::all(admin.clone());
        roles
            .create(&pp, &super::shipped_cluster_role("controller.yaml"))
            .await
            .unwrap();
        Api::<ClusterRoleBinding>::all(admin.clone())
            .create(
                &pp,
                &super::from_json(json!({
                    "metadata": {"name": "tfops-controller"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tfops-controller"},
                    "subjects": [{"kind": "ServiceAccount", "name": "tfops-controller", "namespace": "tfops-system"}],
                })),
            )
            .await
            .unwrap();
        super::grant_runner(&admin, "team-a", "tf-runner").await;
        let leader: k8s_openapi::api::rbac::v1::Role = serde_yaml_ng::from_str(
            &std::fs::read_to_string(
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../config/rbac/leader-election.yaml"),
            )
            .unwrap(),
        )
        .unwrap();
        Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(admin.clone(), "tfops-system")
            .create(&pp, &leader)
            .await
            .unwrap();
        super::bind(
            &admin,
            "tfops-system",
            "tfops-leader-election",
            "Role",
            "tfops-leader-election",
            "tfops-controller",
        )
        .await;
        let token = cluster
            .service_account_token("tfops-system", "tfops-controller")
            .await
            .unwrap();
        let controller_kubeconfig = kubeconfig_dir_for(&cluster, &token);
        let git = GitDaemon::start();
        git.commit("infra", &[("main.tf", CONFIG)]);
        let (kubeconfig_dir, kubeconfig) = super::kubeconfig_file(&cluster);
        let (controller_dir, controller_kubeconfig) = controller_kubeconfig;
        Self {
            cluster,
            admin,
            git,
            kubeconfig,
            controller_kubeconfig,
            flags: Vec::new(),
            running: None,
            _dirs: vec![pods_dir, kubeconfig_dir, controller_dir],
        }
    }

    /// Starts the manager (again).
    pub fn start_controller(&mut self) {
        self.running = Some(Manager::start(
            &self.controller_kubeconfig,
            "tfops-manager-0",
            &self.flags,
        ));
    }

    /// The manager running now.
    pub fn manager(&self) -> &Manager {
        self.running.as_ref().expect("a manager is running")
    }

    /// Kills the manager where it stands (SIGKILL: nothing it had under way finishes).
    pub fn kill_controller(&mut self) {
        self.running = None;
    }

    /// Another namespace for objects, prepared as `team-a` is (a `tf-runner` ServiceAccount
    /// holding the runner's role).
    pub async fn add_namespace(&self, namespace: &str) {
        super::namespace(&self.admin, namespace).await;
        Api::<ServiceAccount>::namespaced(self.admin.clone(), namespace)
            .create(
                &PostParams::default(),
                &super::from_json(json!({"metadata": {"name": "tf-runner"}})),
            )
            .await
            .unwrap();
        super::grant_runner(&self.admin, namespace, "tf-runner").await;
    }

    /// `kubectl apply` of `yaml` as the admin; panics when kubectl fails.
    pub fn apply(&self, yaml: &str) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("manifest.yaml");
        std::fs::write(&file, yaml).unwrap();
        let (ok, out, err) =
            super::kubectl(&self.kubeconfig, &["apply", "-f", file.to_str().unwrap()]);
        assert!(ok, "kubectl apply: {out}{err}");
    }

    /// A `Terraform` manifest for `name` in `team-a` on the `infra` repository, run by
    /// Terraform (`spec.runner.binary`; the tests of OpenTofu say so), `spec` merged over it.
    pub fn manifest(&self, name: &str, spec: serde_json::Value) -> String {
        let mut body = json!({
            "apiVersion": "infra.argocd.io/v1alpha1",
            "kind": "Terraform",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {
                "interval": "1h",
                "retryInterval": "2s",
                "sourceRef": {"kind": "GitRepository", "url": self.git.url("infra")},
                "runner": {"binary": "terraform"},
            },
        });
        json_patch::merge(&mut body["spec"], &spec);
        serde_yaml_ng::to_string(&body).unwrap()
    }

    /// Waits (at most 30 s) until the run history of `name` holds `runs` runs: the controller
    /// records a run just after its last status write.
    pub async fn wait_for_runs(&self, name: &str, runs: usize) {
        let enough = move |m: Option<&k8s_openapi::api::core::v1::ConfigMap>| {
            m.and_then(|m| m.data.as_ref()?.get("runs.json").cloned())
                .and_then(|j| serde_json::from_str::<Vec<serde_json::Value>>(&j).ok())
                .is_some_and(|kept| kept.len() >= runs)
        };
        let maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
            Api::namespaced(self.admin.clone(), "team-a");
        let history = tfops_kube::history::history_name(name);
        tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(maps, &history, enough),
        )
        .await
        .unwrap_or_else(|_| panic!("{name} never had {runs} runs recorded"))
        .unwrap();
    }

    /// The Terraform API of `team-a`.
    pub fn terraforms(&self) -> Api<Terraform> {
        Api::namespaced(self.admin.clone(), "team-a")
    }

    /// Approves `plan` of `name` as the Argo CD action and `tfops approve` do: the approve
    /// annotation `<plan>@<token>` and a new reconcile request.
    pub async fn approve(&self, name: &str, plan: &str, token: &str) {
        self.terraforms()
            .patch(
                name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                    "infra.argocd.io/approve": format!("{plan}@{token}"),
                    "infra.argocd.io/reconcile": token,
                }}})),
            )
            .await
            .unwrap();
    }

    /// Waits (at most `seconds`) until `name` satisfies `test`; panics with its status when
    /// it does not.
    pub async fn wait_for(
        &self,
        name: &str,
        what: &str,
        seconds: u64,
        test: impl Fn(&Terraform) -> bool + Send + 'static,
    ) -> Terraform {
        let cond = move |t: Option<&Terraform>| t.is_some_and(&test);
        match tokio::time::timeout(
            Duration::from_secs(seconds),
            await_condition(self.terraforms(), name, cond),
        )
        .await
        {
            Ok(t) => t.unwrap().unwrap(),
            Err(_) => {
                let now = self.terraforms().get_opt(name).await.unwrap();
                let events: Vec<String> = Api::<k8s_openapi::api::events::v1::Event>::namespaced(
                    self.admin.clone(),
                    "team-a",
                )
                .list(&Default::default())
                .await
                .map(|l| l.items)
                .unwrap_or_default()
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
                .map(|e| {
                    format!(
                        "{} {} x{}: {}",
                        e.event_time.map(|t| t.0.to_string()).unwrap_or_default(),
                        e.reason.unwrap_or_default(),
                        e.series.map_or(1, |s| s.count),
                        e.note.unwrap_or_default()
                    )
                })
                .collect();
                panic!(
                    "{name} never {what} within {seconds} s: {}\nevents:\n{}",
                    serde_json::to_string_pretty(&now.map(|t| t.status)).unwrap(),
                    events.join("\n")
                )
            }
        }
    }
}

/// The status and reason of condition `kind`.
pub fn condition(t: &Terraform, kind: &str) -> Option<(String, String, String)> {
    t.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| {
            (
                format!("{:?}", c.status),
                c.reason.clone(),
                c.message.clone(),
            )
        })
}

/// The id of the plan `t` waits to have approved (empty when none).
pub fn pending(t: &Terraform) -> String {
    t.status
        .as_ref()
        .map(|s| s.plan.pending.clone())
        .unwrap_or_default()
}

/// Whether any of the object's conditions says `text`.
pub fn says(t: &Terraform, text: &str) -> bool {
    t.status
        .as_ref()
        .is_some_and(|s| s.conditions.iter().any(|c| c.message.contains(text)))
}

/// Whether `Ready` has `reason` at the object's generation.
pub fn ready_with(t: &Terraform, reason: &str) -> bool {
    let generation = t.metadata.generation.unwrap_or_default();
    t.status.as_ref().is_some_and(|s| {
        s.observed_generation >= generation
            && s.conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.reason == reason)
    })
}

/// The configuration with an apply that takes `seconds` (a provisioner sleeping).
pub fn slow(seconds: u32) -> String {
    format!(
        "{CONFIG}\nresource \"terraform_data\" \"slow\" {{\n  provisioner \"local-exec\" {{\n    command = \"sleep {seconds}\"\n  }}\n}}\n"
    )
}

/// The tests' memory hog ([`tfops_testcluster::node::MEMORY_HOG`]).
pub const GROW: &str = tfops_testcluster::node::MEMORY_HOG;

/// [`CONFIG`] with a resource whose apply grows ([`GROW`]): in a runner Pod with a memory
/// limit, the kernel's OOM killer ends it, and the container with it. With a `gate` (a file of
/// the host: runner Pods as processes) it first waits until that file exists, two minutes at
/// most, and ends at once if it never comes (a retry nobody opens the gate for cannot hang);
/// without one it grows at once, so that a retry in a new Pod does the same.
pub fn hungry(gate: Option<&std::path::Path>) -> String {
    let wait = gate
        .map(|g| {
            let g = g.display();
            format!(
                "n=0; while [ ! -e '{g}' ] && [ $n -lt 1200 ]; do sleep 0.1; n=$((n+1)); done; [ -e '{g}' ] || exit 0; "
            )
        })
        .unwrap_or_default();
    format!(
        "{CONFIG}\nresource \"terraform_data\" \"slow\" {{\n  provisioner \"local-exec\" {{\n    command = \"{wait}{GROW}\"\n  }}\n}}\n"
    )
}

/// The `spec.runner` part giving the runner container a memory limit of `limit`.
pub fn memory_limit(limit: &str) -> serde_json::Value {
    json!({"podTemplate": {"spec": {"resources": {"limits": {"memory": limit}}}}})
}

/// Waits until the object's apply holds the state lock (Terraform is applying): the apply is
/// recorded in status before it starts, after the plan released its lock.
pub async fn applying(op: &Operator, name: &str) {
    op.wait_for(name, "recorded the apply", 120, |t| {
        t.status.as_ref().is_some_and(|s| s.active_run.is_some())
    })
    .await;
    let leases: Api<Lease> = Api::namespaced(op.admin.clone(), "team-a");
    let lease = format!("lock-tfstate-default-{name}");
    let held = async {
        loop {
            let l = leases.get_opt(&lease).await.unwrap();
            if l.and_then(|l| l.spec?.holder_identity).is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(120), held)
        .await
        .expect("the apply started");
}

/// Waits until `name` records the apply a controller attached to after the one that started
/// it died, and checks it was applied once: one runner Pod was ever created.
pub async fn attached_once(op: &Operator, name: &str) -> Terraform {
    let t = op
        .wait_for(name, "recorded the attached apply", 120, |t| {
            ready_with(t, "TerraformAppliedSucceed")
        })
        .await;
    let status = t.status.clone().unwrap();
    assert!(status.active_run.is_none());
    let (_, _, message) = condition(&t, "Apply").unwrap();
    assert!(message.contains("attached to run"), "{message}");
    let pods_created = op
        .cluster
        .audit()
        .iter()
        .filter(|a| a.method == "POST" && a.path.ends_with("/namespaces/team-a/pods"))
        .count();
    assert_eq!(pods_created, 1, "one runner Pod, one apply");
    t
}

/// A configuration whose only output reads another state file: the "infrastructure" that
/// changes behind Terraform's back is that file (the runner Pods of the node agent are
/// processes of this machine, so an absolute path reaches it).
pub fn reading(path: &std::path::Path) -> String {
    format!(
        r#"data "terraform_remote_state" "upstream" {{
  backend = "local"
  config = {{ path = "{}" }}
}}
output "upstream_color" {{
  value = data.terraform_remote_state.upstream.outputs.color
}}
"#,
        path.display()
    )
}

/// Writes a local Terraform state at `path` whose only output is `color`, as another
/// configuration's state that a `terraform_remote_state` reads (`serial` must grow with
/// each change).
pub fn upstream_state(path: &std::path::Path, color: &str, serial: u32) {
    std::fs::write(
        path,
        format!(
            r#"{{"version":4,"terraform_version":"1.5.0","serial":{serial},"lineage":"00000000-0000-0000-0000-000000000000","outputs":{{"color":{{"value":"{color}","type":"string"}}}},"resources":[],"check_results":null}}"#
        ),
    )
    .unwrap();
}
