//! The state of an apply or destroy that Terraform could not write at its end.
//!
//! Terraform writes the state to the backend (the kubernetes backend: Secrets through the API
//! server) as an apply ends. When the API server is away just then, the infrastructure has
//! changed but the backend still holds the state from before: Terraform saves what it could
//! not write as `errored.tfstate` in the working directory and fails. Left there, the file
//! dies with the runner Pod, and the next plan (made from the old state) changes the same
//! infrastructure again: a second create of every resource the apply made. Measured on the
//! real control plane with the kube-apiserver killed mid-apply. So the runner pushes the file
//! (`terraform state push`) until the backend takes it, and frees the state lock the failed
//! apply could not release.

use std::time::{Duration, Instant};

use crate::exec::Stream;
use crate::terraform::{Io, Terraform, TfError, args, failure};

/// The file Terraform writes the state to when the backend refuses it.
pub const ERRORED_STATE: &str = "errored.tfstate";
/// How long the runner keeps trying to push it.
pub const PUSH_FOR: Duration = Duration::from_secs(600);
/// The longest wait between two tries.
const LONGEST_WAIT: Duration = Duration::from_secs(10);

impl Terraform {
    /// Runs a command that changes infrastructure (`apply`, `destroy`), then rescues its
    /// state when Terraform could not write it (see the module).
    ///
    /// # Errors
    /// The command's own failure (after the rescue: the run failed, but nothing is lost), or
    /// [`TfError::Failed`] when the state could not be pushed within [`PUSH_FOR`].
    pub(crate) async fn changing(&self, command: &[String], io: &Io) -> Result<(), TfError> {
        let ran = self.exec(command, io, false).await;
        // Only a file Terraform said it wrote: one the configuration itself left there (its
        // provisioners run in this directory) is not pushed.
        let said = ran
            .as_ref()
            .map_or(true, |exit| exit.stderr.contains(ERRORED_STATE));
        if said && self.dir.join(ERRORED_STATE).exists() {
            self.push_errored_state(io).await?;
            if let Ok(exit) = &ran {
                self.release_lock_left(&exit.stderr, io).await;
            }
        }
        let exit = ran?;
        if exit.code != 0 {
            return Err(failure(&exit));
        }
        Ok(())
    }

    async fn push_errored_state(&self, io: &Io) -> Result<(), TfError> {
        let say = |line: String| {
            let _ = io.log.send((Stream::Stderr, line));
        };
        say(format!(
            "tfops: Terraform could not write the state at the end; pushing {ERRORED_STATE} until the backend takes it"
        ));
        let began = Instant::now();
        let mut wait = Duration::from_secs(1);
        // Not cancelled by the run's cancel: the state matters more than stopping soon.
        let quiet = Io {
            log: io.log.clone(),
            cancel: tokio::sync::watch::channel(false).1,
        };
        loop {
            // `-lock=false`: the lock is this run's own (the apply could not release it).
            let push = args(&["state", "push", "-lock=false", ERRORED_STATE]);
            let exit = self.exec(&push, &quiet, false).await?;
            if exit.code == 0 {
                let _ = std::fs::remove_file(self.dir.join(ERRORED_STATE));
                say(format!(
                    "tfops: the state was written {:.1} s after the command ended",
                    began.elapsed().as_secs_f64()
                ));
                return Ok(());
            }
            if began.elapsed() > PUSH_FOR {
                return Err(TfError::Failed {
                    code: exit.code,
                    diagnostic: format!(
                        "the state could not be written for {} s after the command ended; it is in {ERRORED_STATE} of the runner Pod (push it with `terraform state push` before anything else runs)",
                        PUSH_FOR.as_secs()
                    ),
                });
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(LONGEST_WAIT);
        }
    }

    /// Frees the lock that the command reported it could not release.
    async fn release_lock_left(&self, stderr: &str, io: &Io) {
        if !stderr.contains("Error releasing the state lock") {
            return;
        }
        let Some(id) = lock_id(stderr) else {
            return;
        };
        for _ in 0..10 {
            if self.force_unlock(&id, io).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

/// The `ID:` of Terraform's "Lock Info" in `stderr`.
fn lock_id(stderr: &str) -> Option<String> {
    stderr.lines().find_map(|l| {
        l.trim()
            .trim_start_matches('│')
            .trim()
            .strip_prefix("ID:")
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_id_is_read_from_terraforms_lock_info() {
        let stderr = "│ Error: Error releasing the state lock\n│ \n│ Lock Info:\n│   ID:        3f1c-77\n│   Path:      \n";
        assert_eq!(lock_id(stderr).as_deref(), Some("3f1c-77"));
        assert_eq!(lock_id("no lock here"), None);
    }
}
