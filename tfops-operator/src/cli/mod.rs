//! The `tfops` command line (clap): local mode, sources, policies, the runner process, shell
//! completion, and the commands for `Terraform` objects in a cluster.

pub mod cluster;
pub mod history;
pub mod local;
pub mod policy;
pub mod pulls;

use std::path::PathBuf;

use clap::{CommandFactory, Parser, Subcommand};

use crate::runner_process::RunnerCommand;

/// `tfops`: GitOps for Terraform and OpenTofu, on this machine or in a cluster.
#[derive(Debug, Parser)]
#[command(
    name = "tfops",
    version,
    about = "Plan, approve and apply Terraform and OpenTofu from Git: in a Kubernetes cluster (Terraform objects) or on this machine (tfops local)",
    propagate_version = true
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Reconcile `Terraform` manifests on this machine (no cluster): the same reconciler and
    /// runner as in a cluster.
    Local(local::LocalArgs),
    /// List the `Terraform` objects of a namespace (or one) with their plan and drift.
    Get(cluster::GetArgs),
    /// The plans open pull requests make of an object (`--show N`: one whole).
    Pr(pulls::PullArgs),
    /// Show the pending plan of an object (`tfops plan show NAME`).
    #[command(subcommand)]
    Plan(cluster::PlanCommand),
    /// Approve the pending plan of an object (its id checked against the pending one).
    Approve(cluster::ApproveArgs),
    /// Ask for a fresh plan even when nothing changed (replaces a pending plan).
    Replan(cluster::NameArgs),
    /// Ask for a run now.
    Reconcile(cluster::NameArgs),
    /// Stop reconciling an object (the `infra.argocd.io/suspend` annotation; Git's spec is
    /// left alone).
    Suspend(cluster::NameArgs),
    /// Reconcile a suspended object again (the annotation removed, `spec.suspend: false`).
    Resume(cluster::NameArgs),
    /// Release a held state lock, after showing who holds it.
    Unlock(cluster::UnlockArgs),
    /// Stop the run under way (the `infra.argocd.io/cancel` annotation, naming you): a plan
    /// or drift check ends, an apply is interrupted as Ctrl-C does.
    Cancel(cluster::NameArgs),
    /// The last runs of an object: when, why, what revision and plan, the result.
    History(cluster::NameArgs),
    /// Terraform's output of a run (the newest by default), as kept in the run history.
    Logs(cluster::LogsArgs),
    /// Publish a configuration directory for `Terraform` objects to read (an OCI artifact).
    #[command(subcommand)]
    Source(SourceCommand),
    /// Evaluate and test `TerraformPolicy` rules offline.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// The runner process (what runner Pods run; see `tfops-runner --help`).
    Runner(RunnerCommand),
    /// Print a shell completion script (`source <(tfops completion bash)`).
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `tfops source`.
#[derive(Debug, Subcommand)]
pub enum SourceCommand {
    /// Push a directory as an OCI artifact tfops can consume (credentials from
    /// `TFOPS_REGISTRY_USERNAME` and `TFOPS_REGISTRY_PASSWORD`).
    Push {
        /// The directory.
        dir: PathBuf,
        /// `oci://REGISTRY/REPOSITORY[:TAG]` (tag `latest` when none).
        target: String,
        /// Talk plain HTTP to the registry.
        #[arg(long)]
        insecure: bool,
    },
}

/// The `tfops` binary's `main`: parses the command line (clap ends the process on `--help`,
/// `--version` or a usage error, with status 2 for the latter) and runs it. Exit status 0 on
/// success, 1 for a failure already reported (an object not Ready, a policy denying), 2 for
/// an error.
pub async fn main() -> std::process::ExitCode {
    use std::process::ExitCode;
    let cli = Cli::parse();
    // The CLI prints its own progress and results; library logs only for errors unless
    // `RUST_LOG` asks for more. The runner process installs its own (info, JSON in a Pod).
    if !matches!(cli.command, Command::Runner(_)) {
        crate::logs::init(crate::logs::LogFormat::Text, "error");
    }
    match run(cli).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs a parsed command line: `Ok(true)` success, `Ok(false)` a failure already reported
/// (an object not Ready, a policy denying), `Err` an error to print.
///
/// # Errors
/// What the command met, with context.
pub async fn run(cli: Cli) -> anyhow::Result<bool> {
    match cli.command {
        Command::Local(args) => local::run(args).await,
        Command::Get(args) => cluster::get(args).await,
        Command::Plan(cluster::PlanCommand::Show(args)) => cluster::plan_show(args).await,
        Command::Approve(args) => cluster::approve(args).await,
        Command::Pr(args) => pulls::run(args).await,
        Command::Replan(args) => cluster::request(args, cluster::Request::Replan).await,
        Command::Reconcile(args) => cluster::request(args, cluster::Request::Reconcile).await,
        Command::Suspend(args) => cluster::request(args, cluster::Request::Suspend).await,
        Command::Resume(args) => cluster::request(args, cluster::Request::Resume).await,
        Command::Cancel(args) => cluster::request(args, cluster::Request::Cancel).await,
        Command::Unlock(args) => cluster::unlock(args).await,
        Command::History(args) => cluster::history(args).await,
        Command::Logs(args) => cluster::logs(args).await,
        Command::Source(SourceCommand::Push {
            dir,
            target,
            insecure,
        }) => push(&dir, &target, insecure).await,
        Command::Policy(command) => policy::run(command),
        Command::Runner(command) => crate::runner_process::run(command).await.map(|()| true),
        Command::Completion { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "tfops", &mut std::io::stdout());
            Ok(true)
        }
    }
}

/// Publishes a directory as an OCI artifact.
async fn push(dir: &std::path::Path, target: &str, insecure: bool) -> anyhow::Result<bool> {
    let (url, tag) = match target.rfind(':') {
        Some(i) if i > target.rfind('/').unwrap_or(0) => (&target[..i], &target[i + 1..]),
        _ => (target, "latest"),
    };
    let creds = crate::sources::oci::OciCredentials {
        username: std::env::var("TFOPS_REGISTRY_USERNAME").ok(),
        password: std::env::var("TFOPS_REGISTRY_PASSWORD").ok(),
    };
    let digest = crate::sources::oci::OciSource::new(insecure)
        .push(dir, url, tag, None, &creds)
        .await?;
    println!("pushed {url}:{tag}@{digest}");
    Ok(true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn help_per_command_and_suggestions() {
        let e = Cli::try_parse_from(["tfops", "local", "apply", "--help"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
        assert!(e.to_string().contains("--state-dir"), "{e}");
        let e = Cli::try_parse_from(["tfops", "local", "aply"]).unwrap_err();
        assert!(e.to_string().contains("apply"), "a suggestion: {e}");
        let e = Cli::try_parse_from(["tfops", "approve", "x", "--namespac", "a"]).unwrap_err();
        assert!(e.to_string().contains("--namespace"), "a suggestion: {e}");
    }

    #[test]
    fn completion_scripts_name_the_commands() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "tfops", &mut out);
            let script = String::from_utf8(out).unwrap();
            for word in ["approve", "unlock", "local", "state-dir"] {
                assert!(script.contains(word), "{shell}: {word}");
            }
        }
    }

    #[test]
    fn local_flags_go_before_or_after_the_verb() {
        for argv in [
            vec!["tfops", "local", "-f", "a.yaml", "apply"],
            vec!["tfops", "local", "apply", "-f", "a.yaml"],
        ] {
            let Cli {
                command: Command::Local(args),
            } = Cli::try_parse_from(&argv).unwrap()
            else {
                panic!("local")
            };
            assert_eq!(args.options.files, [PathBuf::from("a.yaml")], "{argv:?}");
        }
    }
}
