//! How a runner runs: its configuration, its own host name, and which binary it runs.

use std::path::PathBuf;
use std::time::Duration;

/// How the runner runs.
#[derive(Debug, Clone)]
pub struct RunnerConfig {
    /// The `terraform` or `tofu` binary.
    pub program: PathBuf,
    /// `terraform` or `tofu`, as reported.
    pub binary: String,
    /// Root of working directories (`/tmp` in a Pod).
    pub workdir_root: PathBuf,
    /// The home directory for file mappings.
    pub home: PathBuf,
    /// Time Terraform gets after SIGINT before SIGKILL.
    pub grace: Duration,
    /// Log lines kept per run for re-attaching clients.
    pub max_log_lines: usize,
    /// A kubeconfig the kubernetes backend reads instead of the in-cluster configuration,
    /// when a request asks for in-cluster configuration (`TFOPS_KUBECONFIG`: the test
    /// cluster's node agent sets it when it cannot bind-mount `/var/run/secrets` for a process).
    pub kubeconfig: Option<PathBuf>,
    /// This runner's own host name, when it has one (see [`own_host`]): Terraform names a
    /// lock's holder `user@host`, and since a runner runs one command at a time, a lock held
    /// by this host when a command finds it is a dead process's (an earlier command killed
    /// with its Pod, or an earlier Pod of this name, which the API server lets exist only
    /// after that Pod ended).
    pub pod_name: Option<String>,
    /// Where the other binary a setup may ask for by name (`spec.runner.binary`) is, when not
    /// on `PATH` ([`Overrides::from_env`] in a runner Pod).
    pub others: Overrides,
}

/// `TFOPS_RUNNER_HOST` (the Pod's `spec.hostname`, unique in the cluster) when the kernel's
/// host name is it; else `None`: a process that shares its host name with others can prove
/// nothing about a lock held by that host.
pub fn own_host() -> Option<String> {
    let own = std::env::var("TFOPS_RUNNER_HOST")
        .ok()
        .filter(|p| !p.is_empty())?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    (host.trim() == own).then_some(own)
}

/// Whether a lock held by `holder` (`user@host`) is held by the host `pod`, the runner's own
/// ([`own_host`]).
pub fn held_by_own_host(holder: &str, pod: Option<&str>) -> bool {
    let host = holder.rsplit_once('@').map(|(_, h)| h.trim());
    pod.is_some_and(|p| host == Some(p))
}

/// Chooses the binary for `binary: auto | terraform | tofu` from the process environment
/// (`PATH`, `TFOPS_TERRAFORM`, `TFOPS_TOFU`): see [`find_binary_in`].
pub fn find_binary(choice: &str) -> Option<(String, PathBuf)> {
    find_binary_in(choice, std::env::var_os("PATH"), &Overrides::from_env())
}

/// Paths that name a binary outright instead of searching `PATH` (`TFOPS_TERRAFORM`,
/// `TFOPS_TOFU`): tests and images that keep several builds side by side.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// The `terraform` to run.
    pub terraform: Option<std::ffi::OsString>,
    /// The `tofu` to run.
    pub tofu: Option<std::ffi::OsString>,
}

impl Overrides {
    /// `TFOPS_TERRAFORM` and `TFOPS_TOFU`, as set.
    pub fn from_env() -> Self {
        Self {
            terraform: std::env::var_os("TFOPS_TERRAFORM"),
            tofu: std::env::var_os("TFOPS_TOFU"),
        }
    }
}

/// Chooses the binary for `binary: auto | terraform | tofu`: `auto` prefers `tofu`, then
/// `terraform`; each is its override when set, else the first on `path`. Returns the name
/// reported in status and the path, or `None` when the choice is not installed.
pub fn find_binary_in(
    choice: &str,
    path: Option<std::ffi::OsString>,
    overrides: &Overrides,
) -> Option<(String, PathBuf)> {
    let find = |name: &str, over: &Option<std::ffi::OsString>| {
        over.clone()
            .map(PathBuf::from)
            .or_else(|| {
                path.as_ref().and_then(|paths| {
                    std::env::split_paths(paths)
                        .map(|d| d.join(name))
                        .find(|p| p.is_file())
                })
            })
            .map(|p| (name.to_string(), p))
    };
    let terraform = || find("terraform", &overrides.terraform);
    let tofu = || find("tofu", &overrides.tofu);
    match choice {
        "tofu" => tofu(),
        "terraform" => terraform(),
        _ => tofu().or_else(terraform),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_prefers_tofu_and_explicit_choices_are_honoured() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(bin.join("terraform"), "").unwrap_or_else(|e| panic!("{e}"));
        let path = Some(bin.clone().into_os_string());
        let none = Overrides::default();
        assert_eq!(
            find_binary_in("auto", path.clone(), &none).map(|b| b.0),
            Some("terraform".into())
        );
        assert_eq!(find_binary_in("tofu", path.clone(), &none), None);
        std::fs::write(bin.join("tofu"), "").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            find_binary_in("auto", path.clone(), &none),
            Some(("tofu".into(), bin.join("tofu")))
        );
        assert_eq!(
            find_binary_in("terraform", path.clone(), &none).map(|b| b.0),
            Some("terraform".into())
        );
        let custom = Overrides {
            terraform: Some("/opt/tf/terraform".into()),
            tofu: Some("/opt/tofu/1.12.6/tofu".into()),
        };
        assert_eq!(
            find_binary_in("terraform", path.clone(), &custom).map(|b| b.1),
            Some(PathBuf::from("/opt/tf/terraform"))
        );
        assert_eq!(
            find_binary_in("auto", path, &custom),
            Some(("tofu".into(), PathBuf::from("/opt/tofu/1.12.6/tofu")))
        );
    }
}
