//! `tfops local`: the reconciler on this machine.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

use crate::local::{Local, Options, Request};

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A table.
    Text,
    /// The reports as JSON on standard output (progress goes to standard error).
    Json,
}

/// Which binary runs Terraform configurations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Binary {
    /// `tofu` when found, else `terraform`.
    Auto,
    /// `terraform`.
    Terraform,
    /// `tofu`.
    Tofu,
}

impl Binary {
    fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Terraform => "terraform",
            Self::Tofu => "tofu",
        }
    }
}

/// The flags every `tfops local` command takes (before or after its verb).
#[derive(Debug, Clone, Args)]
pub struct LocalOptions {
    /// A manifest of `Terraform` (and `TerraformPolicy`) objects; repeat for several.
    #[arg(short = 'f', long = "file", visible_alias = "filename", global = true)]
    pub files: Vec<PathBuf>,
    /// Where state, status and plans are kept (default: `.tfops/` next to the first manifest).
    #[arg(long, global = true)]
    pub state_dir: Option<PathBuf>,
    /// How results are printed.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Text, global = true)]
    pub output: Output,
    /// Which binary runs the configurations.
    #[arg(long, value_enum, env = "TFOPS_BINARY", default_value_t = Binary::Auto, global = true)]
    pub binary: Binary,
    /// Print Terraform's own output as it comes (init, plan, apply).
    #[arg(long, global = true)]
    pub logs: bool,
}

/// `tfops local`.
#[derive(Debug, Args)]
pub struct LocalArgs {
    /// The flags.
    #[command(flatten)]
    pub options: LocalOptions,
    /// The verb.
    #[command(subcommand)]
    pub command: LocalCommand,
}

/// What `tfops local` does.
#[derive(Debug, Subcommand)]
pub enum LocalCommand {
    /// Reconcile every object of the manifests once (dependencies first).
    Apply,
    /// Reconcile, then again whenever a run is due, until Ctrl-C.
    Watch,
    /// The kept status of the objects (or one).
    Status {
        /// One object.
        name: Option<String>,
    },
    /// Show the pending plan of an object (`tfops local plan show NAME`).
    #[command(subcommand)]
    Plan(LocalPlan),
    /// Approve the pending plan (its id, when given, must be the pending one) and apply it.
    Approve {
        /// The object.
        name: String,
        /// The plan id (`status.plan.pending`).
        plan_id: Option<String>,
    },
    /// Plan again even when nothing changed.
    Replan {
        /// The object.
        name: String,
    },
    /// Destroy the object's resources.
    Destroy {
        /// The object.
        name: String,
    },
    /// Release the object's state lock (the id recorded in its status).
    Unlock {
        /// The object.
        name: String,
    },
    /// The last runs of an object: when, why, what revision and plan, the result.
    History {
        /// The object.
        name: String,
    },
    /// Terraform's output of a run (the newest by default), as kept in the run history.
    Logs {
        /// The object.
        name: String,
        /// Which run: 1 is the newest (as `tfops local history` numbers them).
        #[arg(long, default_value_t = 1)]
        run: usize,
    },
}

/// `tfops local plan`.
#[derive(Debug, Subcommand)]
pub enum LocalPlan {
    /// Print the pending plan as Terraform shows it.
    Show {
        /// The object.
        name: String,
    },
}

/// Runs `tfops local`.
///
/// # Errors
/// Bad manifests, the state directory, the runner.
pub async fn run(args: LocalArgs) -> anyhow::Result<bool> {
    let o = args.options;
    let json = o.output == Output::Json;
    let local = Local::open(Options {
        files: o.files,
        state_dir: o.state_dir,
        json,
        binary: o.binary.name().to_string(),
        logs: o.logs,
    })?;
    let result = command(&local, args.command, json).await;
    local.shutdown().await;
    result
}

async fn command(local: &Local, command: LocalCommand, json: bool) -> anyhow::Result<bool> {
    let (names, request) = match command {
        LocalCommand::Apply => (vec![], Request::Reconcile),
        LocalCommand::Watch => return watch(local).await,
        LocalCommand::Status { name } => {
            let reports = local.status(name.as_deref())?;
            return Ok(local.print(&reports));
        }
        LocalCommand::History { name } => {
            let runs = local.history(&name)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&runs)?);
            } else {
                super::history::print_runs(&name, &runs);
            }
            return Ok(true);
        }
        LocalCommand::Logs { name, run } => {
            super::history::print_output(&name, &local.history(&name)?, run)?;
            return Ok(true);
        }
        LocalCommand::Plan(LocalPlan::Show { name }) => {
            print!("{}", local.plan_text(&name)?);
            return Ok(true);
        }
        LocalCommand::Approve { name, plan_id } => (vec![name], Request::Approve(plan_id)),
        LocalCommand::Replan { name } => (vec![name], Request::Replan),
        LocalCommand::Destroy { name } => (vec![name], Request::Destroy),
        LocalCommand::Unlock { name } => (vec![name], Request::Unlock),
    };
    let (reports, _) = local.reconcile(&names, request).await?;
    Ok(local.print(&reports))
}

/// Reconciles whatever is due, sleeps until the next is due, until Ctrl-C or SIGTERM.
async fn watch(local: &Local) -> anyhow::Result<bool> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut first = true;
    loop {
        let request = if first {
            Request::Reconcile
        } else {
            Request::WhenDue
        };
        first = false;
        let pass = local.reconcile(&[], request);
        let (reports, next) = tokio::select! {
            r = pass => r?,
            _ = tokio::signal::ctrl_c() => { local.printer().step("interrupted: the running command was cancelled"); return Ok(false) }
            _ = term.recv() => { local.printer().step("terminated: the running command was cancelled"); return Ok(false) }
        };
        local.print(&reports);
        let wait = next
            .unwrap_or(Duration::from_secs(60))
            .clamp(Duration::from_secs(1), Duration::from_secs(300));
        local
            .printer()
            .step(&format!("next reconcile in {}s", wait.as_secs()));
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = tokio::signal::ctrl_c() => return Ok(true),
            _ = term.recv() => return Ok(true),
        }
    }
}
