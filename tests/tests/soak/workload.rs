//! The workload: objects in two namespaces and two shards (auto-approved and manual, two
//! dependency chains, one across the shards, two applying as an identity of their own), and
//! what their users do at random. The model here remembers what each user change meant
//! (which content a generation and a commit stand for) and which contents were approved, so
//! that the checks can judge what Terraform really did.

use std::collections::BTreeMap;
use std::time::Instant;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;
use tfops_core::api::{SHARD_LABEL, annotations};
use tfops_kube::Terraform;

/// One object and its history, as its users know it.
#[derive(Debug, Clone)]
pub(crate) struct Object {
    pub(crate) namespace: String,
    pub(crate) name: String,
    /// Waits for a person's approval (else `approvePlan: auto`).
    pub(crate) manual: bool,
    pub(crate) depends_on: Option<String>,
    /// Bumped each time the object is created again under the same name.
    pub(crate) incarnation: u32,
    /// The `stamp` variable now.
    pub(crate) stamp: u32,
    /// Which stamp each generation of this incarnation had.
    pub(crate) stamps: BTreeMap<i64, u32>,
    pub(crate) alive: bool,
    pub(crate) suspended: bool,
    pub(crate) destroy_on_delete: bool,
    /// Its shard label (`infra.argocd.io/shard`; `None`: the default shard).
    pub(crate) shard: Option<String>,
    /// Plans as `tf-plan` and applies as `tf-apply` (`spec.runner.apply`), else runs as
    /// `tf-runner`.
    pub(crate) apply_identity: bool,
}

impl Object {
    fn new(namespace: &str, name: &str, manual: bool, depends_on: Option<&str>) -> Self {
        Self {
            shard: None,
            apply_identity: false,
            namespace: namespace.into(),
            name: name.into(),
            manual,
            depends_on: depends_on.map(Into::into),
            incarnation: 1,
            stamp: 1,
            stamps: BTreeMap::new(),
            alive: true,
            suspended: false,
            destroy_on_delete: false,
        }
    }

    /// The incarnation's name in the ledger.
    pub(crate) fn owner(&self) -> String {
        format!("{}/{}#{}", self.namespace, self.name, self.incarnation)
    }

    /// Its directory in the repository.
    pub(crate) fn dir(&self) -> String {
        format!("{}-{}", self.namespace, self.name)
    }

    pub(crate) fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn in_shard(mut self, shard: &str) -> Self {
        self.shard = Some(shard.into());
        self
    }

    fn applying_as_its_own(mut self) -> Self {
        self.apply_identity = true;
        self
    }

    /// The identity every create and destroy of this object must run as.
    pub(crate) fn applier(&self) -> String {
        let account = if self.apply_identity {
            APPLY_ACCOUNT
        } else {
            "tf-runner"
        };
        format!("system:serviceaccount:{}:{account}", self.namespace)
    }
}

/// The shard of the second pair of manager replicas.
pub(crate) const SHARD: &str = "b";
/// The ServiceAccounts of the objects with an apply identity (in their namespace).
pub(crate) const PLAN_ACCOUNT: &str = "tf-plan";
pub(crate) const APPLY_ACCOUNT: &str = "tf-apply";

/// A change a user made, and the content it asks for.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub(crate) at: Instant,
    pub(crate) owner: String,
    pub(crate) content: String,
    /// An approval (of a manual object), not a change of the spec or the source.
    pub(crate) approval: bool,
}

/// The objects, the repository's commits and every change and approval made.
pub(crate) struct World {
    pub(crate) objects: Vec<Object>,
    /// Commits in order: (sha, the directory changed, its new rev).
    pub(crate) commits: Vec<(String, String, u32)>,
    pub(crate) changes: Vec<Change>,
    pub(crate) tokens: u64,
}

impl World {
    pub(crate) fn new() -> Self {
        // team-a/dns waits for an object of the other shard; team-b/queue is served by the
        // default shard; the users move objects between the shards as well.
        let objects = vec![
            Object::new("team-a", "net", false, None),
            Object::new("team-a", "app", true, Some("net")),
            Object::new("team-a", "dns", false, Some("app")).in_shard(SHARD),
            Object::new("team-b", "db", true, None).in_shard(SHARD),
            Object::new("team-b", "cache", false, Some("db"))
                .in_shard(SHARD)
                .applying_as_its_own(),
            Object::new("team-b", "queue", true, None).applying_as_its_own(),
        ];
        Self {
            objects,
            commits: Vec::new(),
            changes: Vec::new(),
            tokens: 0,
        }
    }

    /// The rev of `dir` at commit `sha` (a prefix of either), if that commit is known.
    pub(crate) fn rev_at(&self, dir: &str, sha: &str) -> Option<u32> {
        let mut rev = None;
        for (commit, changed, r) in &self.commits {
            if changed == dir || changed == "*" {
                rev = Some(*r);
            }
            if !sha.is_empty() && (commit.starts_with(sha) || sha.starts_with(commit.as_str())) {
                return rev;
            }
        }
        None
    }

    /// The rev of `dir` now.
    pub(crate) fn rev_now(&self, dir: &str) -> u32 {
        self.commits
            .iter()
            .rev()
            .find(|(_, changed, _)| changed == dir || changed == "*")
            .map_or(0, |c| c.2)
    }

    /// The content object `i` asks for now.
    pub(crate) fn content_now(&self, i: usize) -> String {
        let o = &self.objects[i];
        format!("{}/{}", o.stamp, self.rev_now(&o.dir()))
    }

    pub(crate) fn token(&mut self) -> String {
        self.tokens += 1;
        format!("soak-{}", self.tokens)
    }

    /// The manifest of object `i` as its users want it now.
    pub(crate) fn manifest(&self, i: usize, repo_url: &str) -> serde_json::Value {
        let o = &self.objects[i];
        let mut spec = json!({
            // Long enough that no drift check writes a status in the final quiet 30 s.
            "interval": "10m",
            "retryInterval": "2s",
            "sourceRef": {"kind": "GitRepository", "url": repo_url},
            "path": o.dir(),
            "runner": if o.apply_identity {
                json!({"binary": "terraform", "serviceAccountName": PLAN_ACCOUNT,
                       "apply": {"serviceAccountName": APPLY_ACCOUNT}})
            } else {
                json!({"binary": "terraform"})
            },
            "approvePlan": if o.manual { "" } else { "auto" },
            "suspend": o.suspended,
            "destroyResourcesOnDeletion": o.destroy_on_delete,
            "vars": [
                {"name": "owner", "value": o.owner()},
                {"name": "stamp", "value": o.stamp.to_string()},
            ],
        });
        if let Some(d) = &o.depends_on {
            spec["dependsOn"] = json!([{"name": d}]);
        }
        let labels = match &o.shard {
            Some(shard) => json!({SHARD_LABEL: shard}),
            None => json!({}),
        };
        json!({
            "apiVersion": "infra.argocd.io/v1alpha1",
            "kind": "Terraform",
            "metadata": {"name": o.name, "namespace": o.namespace, "labels": labels},
            "spec": spec,
        })
    }
}

/// The API of object `o`'s namespace.
pub(crate) fn api(admin: &kube::Client, o: &Object) -> Api<Terraform> {
    Api::namespaced(admin.clone(), &o.namespace)
}

/// Writes object `i` as the world wants it (server-side apply) and records the stamp of the
/// generation that made. Err: the API refused or was away.
pub(crate) async fn write(
    world: &mut World,
    i: usize,
    admin: &kube::Client,
    repo_url: &str,
) -> Result<(), String> {
    let body = world.manifest(i, repo_url);
    let o = &world.objects[i];
    let written = api(admin, o)
        .patch(
            &o.name,
            &PatchParams::apply("soak").force(),
            &Patch::Apply(body),
        )
        .await
        .map_err(|e| e.to_string())?;
    let generation = written.metadata.generation.unwrap_or_default();
    let stamp = o.stamp;
    world.objects[i].stamps.insert(generation, stamp);
    Ok(())
}

/// The content a pending plan id and generation stand for, when both are known.
pub(crate) fn content_of(world: &World, i: usize, plan: &str, generation: i64) -> Option<String> {
    let o = &world.objects[i];
    let sha = plan.rsplit('-').next().unwrap_or_default();
    let rev = world.rev_at(&o.dir(), sha)?;
    let stamp = o.stamps.get(&generation)?;
    Some(format!("{stamp}/{rev}"))
}

/// Approves `plan` of object `i` as the Argo CD action does (annotations), with a fresh token.
pub(crate) async fn approve(
    world: &mut World,
    i: usize,
    plan: &str,
    admin: &kube::Client,
) -> Result<(), String> {
    let token = world.token();
    annotate(
        world,
        i,
        admin,
        annotations::APPROVE,
        format!("{plan}@{token}"),
        token,
    )
    .await
}

/// Asks for a fresh plan (the re-plan action).
pub(crate) async fn replan(
    world: &mut World,
    i: usize,
    admin: &kube::Client,
) -> Result<(), String> {
    let token = world.token();
    annotate(world, i, admin, annotations::REPLAN, token.clone(), token).await
}

/// Sets annotation `key` to `value` on object `i`, with a new reconcile request `token`.
async fn annotate(
    world: &World,
    i: usize,
    admin: &kube::Client,
    key: &str,
    value: String,
    token: String,
) -> Result<(), String> {
    let o = &world.objects[i];
    let body = json!({"metadata": {"annotations": {key: value, annotations::RECONCILE: token}}});
    api(admin, o)
        .patch(&o.name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Deletes object `i` (its finalizer destroys its resources when it says so).
pub(crate) async fn delete(world: &World, i: usize, admin: &kube::Client) -> Result<(), String> {
    let o = &world.objects[i];
    api(admin, o)
        .delete(&o.name, &DeleteParams::default())
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Whether the object `i` is gone from the API (so that it can be created again).
pub(crate) async fn gone(world: &World, i: usize, admin: &kube::Client) -> bool {
    let o = &world.objects[i];
    matches!(api(admin, o).get_opt(&o.name).await, Ok(None))
}
