//! A command's deadline (`spec.timeout`): when it passes, the command is stopped as a cancel
//! stops it (SIGINT, as Ctrl-C gives Terraform: it stops its providers, writes the state and
//! releases its lock; SIGKILL after the grace period), and its result says it timed out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::proto;

/// The deadline of one running command.
pub(super) struct Deadline {
    after: Duration,
    fired: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Deadline {
    /// Calls `stop` once `after` has passed, unless [`Deadline::judge`] came first.
    pub(super) fn start(after: Duration, stop: impl FnOnce() + Send + 'static) -> Self {
        let fired = Arc::new(AtomicBool::new(false));
        let flag = fired.clone();
        let task = tokio::spawn(async move {
            tokio::time::sleep(after).await;
            flag.store(true, Ordering::SeqCst);
            stop();
        });
        Self { after, fired, task }
    }

    /// The command's result as the controller gets it: a command stopped by this deadline
    /// (cancelled after it fired) answers `TIMED_OUT`, saying what ran (`what`, e.g.
    /// `terraform apply`) and how it was stopped; any other result is kept (one that ended
    /// on its own right at the deadline among them).
    pub(super) fn judge(
        self,
        result: proto::RunResult,
        what: &str,
        grace: Duration,
    ) -> proto::RunResult {
        self.task.abort();
        let stopped = result.status == proto::run_result::Status::Cancelled as i32;
        if !(stopped && self.fired.load(Ordering::SeqCst)) {
            return result;
        }
        proto::RunResult {
            status: proto::run_result::Status::TimedOut as i32,
            exit_code: result.exit_code,
            diagnostic: format!(
                "{what} ran past its timeout of {} and was stopped: interrupted as Ctrl-C does \
                 (Terraform writes the state and releases its lock), killed if still running \
                 {} s later. What it finished is in the state; the run is retried. Raise \
                 spec.timeout if it needs longer, or find what hangs in its log.",
                tfops_core::duration::format(self.after),
                grace.as_secs()
            ),
            ..Default::default()
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn with(status: proto::run_result::Status) -> proto::RunResult {
        proto::RunResult {
            status: status as i32,
            ..Default::default()
        }
    }

    /// A deadline of `ms` and what turns true when it stops the command.
    fn armed(ms: u64) -> (Deadline, tokio::sync::watch::Receiver<bool>) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        let d = Deadline::start(Duration::from_millis(ms), move || {
            let _ = tx.send(true);
        });
        (d, rx)
    }

    #[tokio::test]
    async fn only_a_command_it_stopped_times_out() {
        let (d, mut rx) = armed(150);
        rx.wait_for(|stopped| *stopped).await.unwrap();
        let judged = d.judge(
            with(proto::run_result::Status::Cancelled),
            "terraform apply",
            Duration::from_secs(25),
        );
        assert_eq!(judged.status, proto::run_result::Status::TimedOut as i32);
        assert!(
            judged
                .diagnostic
                .starts_with("terraform apply ran past its timeout of 150ms"),
            "{}",
            judged.diagnostic
        );
        assert!(
            judged.diagnostic.contains("25 s later"),
            "{}",
            judged.diagnostic
        );

        // Ended on its own as the deadline passed: its own result.
        let (d, mut rx) = armed(1);
        rx.wait_for(|stopped| *stopped).await.unwrap();
        let ok = d.judge(
            with(proto::run_result::Status::Succeeded),
            "x",
            Duration::ZERO,
        );
        assert_eq!(ok.status, proto::run_result::Status::Succeeded as i32);
        // Cancelled by the controller before the deadline: cancelled, and never stopped.
        let (d, rx) = armed(60_000);
        let c = d.judge(
            with(proto::run_result::Status::Cancelled),
            "x",
            Duration::ZERO,
        );
        assert_eq!(c.status, proto::run_result::Status::Cancelled as i32);
        tokio::task::yield_now().await;
        assert!(!*rx.borrow(), "a judged deadline stops nothing");
    }
}
