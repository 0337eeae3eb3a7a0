//! A user's request to stop the run under way (the cancel annotation), carried to the command
//! the session runs: the runner interrupts it as Ctrl-C does.

use super::RunnerClient;

/// Runs `attempt`; once `stop` says who stops the run, asks the runner to cancel run `id`
/// (SIGINT, killed after the runner's grace period) and goes on waiting for the run's own
/// end. Gives the attempt's result, and who stopped it if anyone did.
pub(super) async fn stoppable<T>(
    attempt: impl std::future::Future<Output = T>,
    stop: &mut Option<StopSignal>,
    canceller: &mut RunnerClient,
    id: &str,
) -> (T, Option<String>) {
    tokio::pin!(attempt);
    let mut by = None;
    loop {
        tokio::select! {
            r = &mut attempt => return (r, by),
            who = stop_asked(stop), if by.is_none() => {
                if let Err(e) = canceller.cancel(id).await {
                    tracing::warn!(run = id, error = %e, "asking the runner to stop the run");
                }
                by = Some(who);
            }
        }
    }
}

/// Who asks to stop, once someone does (never without a signal).
async fn stop_asked(stop: &mut Option<StopSignal>) -> String {
    let Some(rx) = stop else {
        return std::future::pending().await;
    };
    loop {
        if let Some(who) = rx.borrow_and_update().clone() {
            return who;
        }
        if rx.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Says who stops the run under way (a user, by the cancel annotation); `None` until someone
/// does.
pub type StopSignal = tokio::sync::watch::Receiver<Option<String>>;
