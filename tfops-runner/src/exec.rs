//! Spawning `terraform`/`tofu`: lines streamed as they come, cancellation that lets Terraform
//! finish in-flight operations, write its state and release its lock (SIGINT, as Ctrl-C gives
//! `terraform apply`; then SIGKILL after a grace period).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::Command;
use tokio::sync::{mpsc, watch};

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exit {
    /// The exit code (-1 when killed by a signal).
    pub code: i32,
    /// Whether it was cancelled.
    pub cancelled: bool,
    /// Standard output, when captured.
    pub stdout: String,
    /// The end of standard error ([`STDERR_TAIL`]): it holds Terraform's diagnostics.
    pub stderr: String,
}

/// One invocation.
#[derive(Debug, Clone)]
pub struct Invocation {
    /// The binary.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Working directory.
    pub dir: PathBuf,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Keep standard output in [`Exit::stdout`] (JSON results) instead of only streaming it.
    pub capture_stdout: bool,
    /// Stream standard output lines to the log (off for JSON that may hold sensitive values).
    pub log_stdout: bool,
}

/// Why a process could not run.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// It could not be started.
    #[error("starting {program}")]
    Spawn {
        /// The binary.
        program: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for it failed.
    #[error("waiting for {program}")]
    Wait {
        /// The binary.
        program: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// How much of standard error is kept for the diagnostic and lock parsing: its last
/// 256 KiB. Everything is streamed to the log; a Terraform that prints megabytes of warnings
/// does not make the runner hold them (its error is at the end).
pub const STDERR_TAIL: usize = 256 << 10;

/// What [`pump`] keeps of a stream besides sending its lines to the log.
#[derive(Clone, Copy)]
enum Keep {
    /// Nothing.
    Nothing,
    /// Every line (JSON results, read whole).
    All,
    /// The last lines, at most this many bytes.
    Tail(usize),
}

async fn pump<R: AsyncRead + Unpin>(
    reader: R,
    stream: Stream,
    log: Option<mpsc::UnboundedSender<(Stream, String)>>,
    keep: Keep,
) -> String {
    let mut lines = BufReader::new(reader).lines();
    let mut kept = std::collections::VecDeque::<String>::new();
    let mut kept_bytes = 0usize;
    let mut cut = false;
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(log) = &log {
            let _ = log.send((stream, line.clone()));
        }
        match keep {
            Keep::Nothing => {}
            Keep::All => {
                kept_bytes += line.len() + 1;
                kept.push_back(line);
            }
            Keep::Tail(limit) => {
                kept_bytes += line.len() + 1;
                kept.push_back(line);
                while kept_bytes > limit {
                    match kept.pop_front() {
                        Some(old) => {
                            kept_bytes -= old.len() + 1;
                            cut = true;
                        }
                        None => break,
                    }
                }
            }
        }
    }
    let mut out = String::with_capacity(kept_bytes + 32);
    if cut {
        out.push_str("(earlier output cut)\n");
    }
    for line in kept {
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// Whether the inherited `TF_CLI_CONFIG_FILE` (not one the invocation sets) names no file.
fn dangling_cli_config(env: &std::collections::BTreeMap<String, String>) -> bool {
    !env.contains_key("TF_CLI_CONFIG_FILE")
        && std::env::var_os("TF_CLI_CONFIG_FILE")
            .is_some_and(|p| !p.is_empty() && !std::path::Path::new(&p).exists())
}

/// Runs `inv` to completion, sending its lines to `log`. When `cancel` turns true the process
/// gets SIGINT, and SIGKILL if it is still running after `grace`.
///
/// # Errors
/// [`ExecError`] when the process cannot be started or waited for.
pub async fn run(
    inv: &Invocation,
    log: mpsc::UnboundedSender<(Stream, String)>,
    mut cancel: watch::Receiver<bool>,
    grace: Duration,
) -> Result<Exit, ExecError> {
    let mut cmd = Command::new(&inv.program);
    if dangling_cli_config(&inv.env) {
        // Terraform ignores a CLI configuration file that does not exist; OpenTofu warns about
        // it on stdout, ahead of the JSON the runner reads. Both then run without one.
        cmd.env_remove("TF_CLI_CONFIG_FILE");
    }
    cmd.args(&inv.args)
        .current_dir(&inv.dir)
        .envs(&inv.env)
        .env("TF_IN_AUTOMATION", "1")
        .env("TF_INPUT", "0")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|source| ExecError::Spawn {
        program: inv.program.clone(),
        source,
    })?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let out_log = inv.log_stdout.then(|| log.clone());
    let out_keep = if inv.capture_stdout {
        Keep::All
    } else {
        Keep::Nothing
    };
    let out_task = tokio::spawn(async move {
        match stdout {
            Some(s) => pump(s, Stream::Stdout, out_log, out_keep).await,
            None => String::new(),
        }
    });
    let err_task = tokio::spawn(async move {
        match stderr {
            Some(s) => pump(s, Stream::Stderr, Some(log), Keep::Tail(STDERR_TAIL)).await,
            None => String::new(),
        }
    });
    let mut cancelled = *cancel.borrow();
    let status = if cancelled {
        terminate(&mut child, grace).await
    } else {
        tokio::select! {
            status = child.wait() => status,
            _ = wait_true(&mut cancel) => {
                cancelled = true;
                terminate(&mut child, grace).await
            }
        }
    }
    .map_err(|source| ExecError::Wait {
        program: inv.program.clone(),
        source,
    })?;
    let stdout = out_task.await.unwrap_or_default();
    let stderr = err_task.await.unwrap_or_default();
    Ok(Exit {
        code: status.code().unwrap_or(-1),
        cancelled,
        stdout,
        stderr,
    })
}

async fn wait_true(rx: &mut watch::Receiver<bool>) {
    loop {
        if *rx.borrow() {
            return;
        }
        if rx.changed().await.is_err() {
            // The sender is gone: nobody can cancel any more.
            std::future::pending::<()>().await;
        }
    }
}

async fn terminate(
    child: &mut tokio::process::Child,
    grace: Duration,
) -> std::io::Result<std::process::ExitStatus> {
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        // An interrupt, as Ctrl-C: Terraform stops starting operations, lets those under way
        // finish, writes its state and releases the lock.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGINT,
        );
    }
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            child.start_kill()?;
            child.wait().await
        }
    }
}

/// Terraform's diagnostic from `stderr`: from the first `Error:` on (the noise before it
/// dropped), trimmed to the length a condition message takes.
pub fn diagnostic(stderr: &str) -> String {
    let start = stderr
        .find("Error:")
        .map_or(0, |i| stderr[..i].rfind('\n').map_or(0, |n| n + 1));
    tfops_core::reconcile::trim_message(stderr[start..].trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_long_stderr_keeps_its_end_and_streams_everything() {
        let text: String = (0..20_000).map(|i| format!("warning line {i}\n")).collect();
        let text = format!("{text}Error: the real problem\n");
        let (tx, mut rx) = mpsc::unbounded_channel();
        let kept = pump(text.as_bytes(), Stream::Stderr, Some(tx), Keep::Tail(4096)).await;
        assert!(kept.len() <= 4096 + 32, "{}", kept.len());
        assert!(kept.starts_with("(earlier output cut)\n"));
        assert!(kept.ends_with("Error: the real problem\n"));
        assert_eq!(diagnostic(&kept), "Error: the real problem");
        let mut streamed = 0;
        while rx.try_recv().is_ok() {
            streamed += 1;
        }
        assert_eq!(streamed, 20_001, "every line reaches the log");
    }

    #[tokio::test]
    async fn captured_output_is_kept_whole_and_uncaptured_output_not_at_all() {
        let text = "{\n\"a\": 1\n}\n";
        assert_eq!(
            pump(text.as_bytes(), Stream::Stdout, None, Keep::All).await,
            text
        );
        assert_eq!(
            pump(text.as_bytes(), Stream::Stdout, None, Keep::Nothing).await,
            ""
        );
    }
}
