//! Checks a spec once and lists every problem, so a user fixes them all in one edit.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{
    ApprovePlan, ForceUnlock, HealthCheckType, SourceKind, TerraformObject, TerraformSpec,
};
use crate::windows::Windows;
use crate::{duration, naming};

/// One thing wrong with a spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecProblem {
    /// The field, as a path (`spec.vars[2].name`).
    pub field: String,
    /// What is wrong and what to write instead.
    pub message: String,
}

impl std::fmt::Display for SpecProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every problem found in a spec. It becomes a `Stalled` condition whose message lists them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid spec: {}", join(.0))]
pub struct ValidationErrors(pub Vec<SpecProblem>);

fn join(problems: &[SpecProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A spec that passed [`validate`], with its parsed values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidSpec {
    /// `spec.interval`.
    pub interval: Duration,
    /// `spec.retryInterval`.
    pub retry_interval: Duration,
    /// `spec.timeout`, when set.
    pub timeout: Option<Duration>,
    /// `spec.approvePlan`.
    pub approve: ApprovePlan,
    /// `spec.healthChecks[*].timeout`, in order.
    pub health_check_timeouts: Vec<Duration>,
    /// `spec.applyWindows`.
    pub windows: Windows,
}

/// Checks an object's spec.
///
/// # Errors
/// [`ValidationErrors`] listing every problem found, each naming its field.
pub fn validate(object: &TerraformObject) -> Result<ValidSpec, ValidationErrors> {
    let mut c = Checker::default();
    let spec = &object.spec;
    let interval = c.duration("spec.interval", &spec.interval, true);
    let retry_interval = c.duration("spec.retryInterval", &spec.retry_interval, true);
    let timeout = spec
        .timeout
        .as_deref()
        .and_then(|t| c.duration("spec.timeout", t, true));
    check_source(&mut c, spec);
    c.relative_path("spec.path", &spec.path, true);
    let approve = check_approve(&mut c, &spec.approve_plan);
    check_conflicts(&mut c, spec);
    check_state(&mut c, object);
    check_vars(&mut c, spec);
    check_outputs_and_dependencies(&mut c, object);
    let health_check_timeouts = check_health_checks(&mut c, spec);
    check_runner(&mut c, spec);
    let windows = Windows::parse(&spec.apply_windows).unwrap_or_else(|problems| {
        for (field, message) in problems {
            c.problem(&field, message);
        }
        Windows::default()
    });
    if !c.problems.is_empty() {
        return Err(ValidationErrors(c.problems));
    }
    Ok(ValidSpec {
        interval: interval.unwrap_or_default(),
        retry_interval: retry_interval.unwrap_or_default(),
        timeout,
        approve,
        health_check_timeouts: health_check_timeouts
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect(),
        windows,
    })
}

/// Each health check's type and target, its timeout (given back, in order) and a unique name.
fn check_health_checks(c: &mut Checker, spec: &TerraformSpec) -> Vec<Option<Duration>> {
    let timeouts = spec
        .health_checks
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let field = format!("spec.healthChecks[{i}]");
            match h.check_type {
                HealthCheckType::Tcp if h.address.as_deref().unwrap_or("").is_empty() => {
                    c.problem(&field, "a tcp check needs `address` (host:port)")
                }
                HealthCheckType::Http if h.url.as_deref().unwrap_or("").is_empty() => {
                    c.problem(&field, "an http check needs `url`")
                }
                _ => {}
            }
            c.duration(&format!("{field}.timeout"), &h.timeout, true)
        })
        .collect::<Vec<_>>();
    let mut names = BTreeSet::new();
    for (i, h) in spec.health_checks.iter().enumerate() {
        if h.name.is_empty() || !names.insert(&h.name) {
            c.problem(
                &format!("spec.healthChecks[{i}].name"),
                "names must be set and unique",
            );
        }
    }
    timeouts
}

/// The runner's settings, and what the plan commands are given (parallelism, targets).
fn check_runner(c: &mut Checker, spec: &TerraformSpec) {
    if spec.runner.termination_grace_period_seconds < 0 {
        c.problem(
            "spec.runner.terminationGracePeriodSeconds",
            "must not be negative",
        );
    }
    if spec.runner.service_account_name.is_empty() {
        c.problem(
            "spec.runner.serviceAccountName",
            "must not be empty (default tf-runner)",
        );
    }
    if let Some(apply) = &spec.runner.apply {
        for (i, e) in apply.pod_template.spec.env.iter().enumerate() {
            if e.name.trim().is_empty() {
                c.problem(
                    &format!("spec.runner.apply.podTemplate.spec.env[{i}].name"),
                    "must not be empty",
                );
            }
        }
    }
    if spec.parallelism < 0 {
        c.problem(
            "spec.parallelism",
            "must be 0 (Terraform's default) or positive",
        );
    }
    for (i, t) in spec.targets.iter().enumerate() {
        if t.trim().is_empty() {
            c.problem(&format!("spec.targets[{i}]"), "must be a resource address");
        }
    }
}

#[derive(Default)]
struct Checker {
    problems: Vec<SpecProblem>,
}

impl Checker {
    fn problem(&mut self, field: &str, message: impl Into<String>) {
        self.problems.push(SpecProblem {
            field: field.to_string(),
            message: message.into(),
        });
    }

    fn duration(&mut self, field: &str, text: &str, positive: bool) -> Option<Duration> {
        match duration::parse(text) {
            Ok(d) if positive && d.is_zero() => {
                self.problem(field, "must be longer than zero");
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.problem(
                    field,
                    format!("{text:?} is not a duration ({e}); write e.g. 30s, 5m or 1h"),
                );
                None
            }
        }
    }

    fn relative_path(&mut self, field: &str, path: &str, may_be_empty: bool) {
        if path.is_empty() {
            if !may_be_empty {
                self.problem(field, "must not be empty");
            }
            return;
        }
        if path.starts_with('/') || path.contains('\\') {
            self.problem(field, "must be a relative path with `/` separators");
        } else if path.split('/').any(|p| p == "..") {
            self.problem(field, "must not contain `..`");
        }
    }
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn check_source(c: &mut Checker, spec: &TerraformSpec) {
    let src = &spec.source_ref;
    if src.url.trim().is_empty() {
        c.problem("spec.sourceRef.url", "must not be empty");
    }
    for (i, line) in src.watch_paths.iter().enumerate() {
        let field = format!("spec.sourceRef.watchPaths[{i}]");
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            c.problem(&field, "must be a pattern (not empty, not a comment)");
        } else if let Err(e) = ignore::gitignore::GitignoreBuilder::new("/").add_line(None, line) {
            // Checked here, as `source::Watched` reads it, without `api` depending on `source`.
            c.problem(&field, format!("invalid pattern {line:?}: {e}"));
        }
    }
    if let Some(pulls) = &src.pull_requests {
        if src.kind != super::SourceKind::GitRepository {
            c.problem(
                "spec.sourceRef.pullRequests",
                "is for Git sources (kind GitRepository) only",
            );
        }
        for (field, message) in super::pulls::problems(&src.url, pulls) {
            c.problem(&field, message);
        }
    }
    let set = src.reference.set_fields();
    if set.len() > 1 {
        let names: Vec<_> = set.iter().map(|(n, _)| *n).collect();
        c.problem(
            "spec.sourceRef.ref",
            format!(
                "set only one of branch, tag, semver, commit, digest (found {})",
                names.join(", ")
            ),
        );
    }
    for (name, value) in &set {
        let field = format!("spec.sourceRef.ref.{name}");
        if value.trim().is_empty() {
            c.problem(&field, "must not be empty when set");
            continue;
        }
        let allowed = match src.kind {
            SourceKind::GitRepository => *name != "digest",
            SourceKind::OciRepository => matches!(*name, "tag" | "semver" | "digest"),
            SourceKind::Local => false,
        };
        if !allowed {
            c.problem(&field, format!("not supported for a {:?} source", src.kind));
        }
        match *name {
            "commit" if !(7..=40).contains(&value.len()) || !is_hex(value) => {
                c.problem(&field, "must be a commit SHA of 7 to 40 hex digits")
            }
            "digest"
                if !value
                    .strip_prefix("sha256:")
                    .is_some_and(|h| h.len() == 64 && is_hex(h)) =>
            {
                c.problem(&field, "must be sha256:<64 hex digits>")
            }
            _ => {}
        }
    }
}

fn check_approve(c: &mut Checker, text: &str) -> ApprovePlan {
    let approve = ApprovePlan::parse(text);
    if let ApprovePlan::Plan(id) = &approve
        && !naming::is_plan_id(id)
    {
        c.problem(
            "spec.approvePlan",
            format!(
                "{id:?} is neither `auto`, empty, nor a plan id like plan-main-0123456789 (copy status.plan.pending)"
            ),
        );
    }
    approve
}

fn check_conflicts(c: &mut Checker, spec: &TerraformSpec) {
    if spec.plan_only && spec.force {
        c.problem(
            "spec.force",
            "conflicts with spec.planOnly, which never applies; unset one",
        );
    }
    if spec.plan_only && spec.approve_plan.trim() == "auto" {
        c.problem(
            "spec.approvePlan",
            "`auto` conflicts with spec.planOnly, which never applies; unset one",
        );
    }
    let t = &spec.tfstate;
    match t.force_unlock {
        ForceUnlock::Yes if t.lock_identifier.trim().is_empty() => c.problem(
            "spec.tfstate.lockIdentifier",
            "forceUnlock: yes needs the lock id to release (see status.lock.pending)",
        ),
        ForceUnlock::No | ForceUnlock::Auto if !t.lock_identifier.is_empty() => c.problem(
            "spec.tfstate.lockIdentifier",
            "is only used with forceUnlock: yes",
        ),
        _ => {}
    }
    if t.delete_on_destroy && !spec.destroy_resources_on_deletion {
        c.problem(
            "spec.tfstate.deleteOnDestroy",
            "has no effect without spec.destroyResourcesOnDeletion (state of live resources is never deleted)",
        );
    }
}

fn check_state(c: &mut Checker, object: &TerraformObject) {
    let spec = &object.spec;
    if spec.workspace.is_empty() || !naming::is_label_value(&spec.workspace) {
        c.problem(
            "spec.workspace",
            "must be 1-63 characters of a-z, 0-9, '-', '.', starting and ending alphanumeric",
        );
    }
    let backend = spec.backend_config.clone().unwrap_or_default();
    if backend.disable && backend.custom_configuration.is_some() {
        c.problem(
            "spec.backendConfig",
            "disable and customConfiguration conflict; set one",
        );
    }
    if backend.disable || backend.custom_configuration.is_some() {
        return;
    }
    let suffix = object.state_secret_suffix();
    let field = if backend.secret_suffix.is_some() {
        "spec.backendConfig.secretSuffix"
    } else {
        "metadata.name"
    };
    if !naming::is_label_value(&suffix) {
        c.problem(
            field,
            "the state secret suffix must be a label value (<= 63 characters of a-z, 0-9, '-', '.'); set spec.backendConfig.secretSuffix",
        );
    }
    if let Some((_, tail)) = suffix.rsplit_once('-')
        && !tail.is_empty()
        && tail.bytes().all(|b| b.is_ascii_digit())
    {
        c.problem(
            field,
            format!("Terraform 1.10+ rejects a state secret suffix ending in -<number> ({suffix:?}); set spec.backendConfig.secretSuffix"),
        );
    }
}

fn is_identifier(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn check_vars(c: &mut Checker, spec: &TerraformSpec) {
    let mut seen = BTreeSet::new();
    for (i, v) in spec.vars.iter().enumerate() {
        let field = format!("spec.vars[{i}]");
        if !is_identifier(&v.name) {
            c.problem(
                &format!("{field}.name"),
                format!("{:?} is not a Terraform variable name", v.name),
            );
        } else if !seen.insert(v.name.as_str()) {
            c.problem(
                &format!("{field}.name"),
                format!("variable {:?} is set twice", v.name),
            );
        }
        match (&v.value, &v.value_from) {
            (Some(_), Some(_)) | (None, None) => {
                c.problem(&field, "set exactly one of value and valueFrom")
            }
            (None, Some(from))
                if from.secret_key_ref.is_some() == from.config_map_key_ref.is_some() =>
            {
                c.problem(
                    &format!("{field}.valueFrom"),
                    "set exactly one of secretKeyRef and configMapKeyRef",
                );
            }
            _ => {}
        }
    }
    for (i, from) in spec.vars_from.iter().enumerate() {
        if from.name.is_empty() {
            c.problem(&format!("spec.varsFrom[{i}].name"), "must not be empty");
        }
        for (k, key) in from.var_keys.iter().enumerate() {
            let (key, rename) = key.split_once(':').unwrap_or((key, key));
            if key.is_empty() || !is_identifier(rename) {
                c.problem(
                    &format!("spec.varsFrom[{i}].varKeys[{k}]"),
                    "write `key` or `key:variable_name`",
                );
            }
        }
    }
    for (i, m) in spec.file_mappings.iter().enumerate() {
        c.relative_path(&format!("spec.fileMappings[{i}].path"), &m.path, false);
    }
}

/// `spec.writeOutputsToConfigMap`: a ConfigMap name, and each selected output under a valid,
/// distinct key (whether an output is sensitive is only known when Terraform reads it).
fn check_config_map_target(c: &mut Checker, w: &super::WriteOutputsToConfigMap) {
    if !naming::is_subdomain(&w.name) {
        c.problem(
            "spec.writeOutputsToConfigMap.name",
            "must be a ConfigMap name (lowercase DNS subdomain)",
        );
    }
    let mut keys: Vec<&str> = Vec::new();
    for (i, o) in w.outputs.iter().enumerate() {
        let field = format!("spec.writeOutputsToConfigMap.outputs[{i}]");
        let (tf, key) = o.split_once(':').unwrap_or((o, o));
        if tf.is_empty() || key.is_empty() {
            c.problem(&field, "write `output` or `output:key`");
        } else if !naming::is_config_map_key(key) {
            c.problem(
                &field,
                format!("{key:?} is not a ConfigMap key (letters, digits, `-`, `_` and `.`)"),
            );
        } else if keys.contains(&key) {
            c.problem(&field, format!("key {key:?} is given twice"));
        }
        keys.push(key);
    }
}

fn check_outputs_and_dependencies(c: &mut Checker, object: &TerraformObject) {
    let spec = &object.spec;
    if let Some(w) = &spec.write_outputs_to_secret {
        if !naming::is_subdomain(&w.name) {
            c.problem(
                "spec.writeOutputsToSecret.name",
                "must be a Secret name (lowercase DNS subdomain)",
            );
        }
        for (i, o) in w.outputs.iter().enumerate() {
            let (tf, key) = o.split_once(':').unwrap_or((o, o));
            if tf.is_empty() || key.is_empty() {
                c.problem(
                    &format!("spec.writeOutputsToSecret.outputs[{i}]"),
                    "write `output` or `output:secret_key`",
                );
            }
        }
    }
    if let Some(w) = &spec.write_outputs_to_config_map {
        check_config_map_target(c, w);
    }
    let me = object.key();
    for (i, d) in spec.depends_on.iter().enumerate() {
        let field = format!("spec.dependsOn[{i}]");
        if d.name.is_empty() {
            c.problem(&format!("{field}.name"), "must not be empty");
        }
        let ns = d.namespace.as_deref().unwrap_or(&me.namespace);
        if d.name == me.name && ns == me.namespace {
            c.problem(&field, "an object cannot depend on itself");
        }
    }
}
