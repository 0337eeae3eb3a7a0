//! The `tfops` command line.
//!
//! ```text
//! tfops local apply   -f FILE [-f FILE...] [--state-dir DIR] [--output json] [--binary auto|terraform|tofu]
//! tfops local watch   -f FILE [...]
//! tfops local status  [NAME]
//! tfops local plan show NAME
//! tfops local approve NAME [PLAN_ID]
//! tfops local replan  NAME
//! tfops local destroy NAME
//! tfops local unlock  NAME
//! tfops source push   DIR oci://REGISTRY/REPOSITORY[:TAG] [--insecure]
//! tfops runner        (the runner process; see tfops-runner --help)
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use tfops_operator::local::{Local, Options, Request};

const USAGE: &str = "usage:
  tfops local apply   -f FILE [-f FILE...] [--state-dir DIR] [--output json] [--binary auto|terraform|tofu]
  tfops local watch   -f FILE [-f FILE...] [--state-dir DIR]
  tfops local status  [NAME] [--state-dir DIR] [--output json]
  tfops local plan show NAME
  tfops local approve NAME [PLAN_ID]
  tfops local replan  NAME
  tfops local destroy NAME
  tfops local unlock  NAME
  tfops source push   DIR oci://REGISTRY/REPOSITORY[:TAG] [--insecure]
                      (credentials from TFOPS_REGISTRY_USERNAME and TFOPS_REGISTRY_PASSWORD)
  tfops runner        --grpc-port PORT --tls-dir DIR ...";

fn parse(args: &[String]) -> anyhow::Result<(Options, Vec<String>)> {
    let mut opts = Options {
        binary: std::env::var("TFOPS_BINARY").unwrap_or_else(|_| "auto".into()),
        ..Options::default()
    };
    let mut rest = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .with_context(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "-f" | "--file" | "--filename" => opts.files.push(PathBuf::from(value()?)),
            "--state-dir" => opts.state_dir = Some(PathBuf::from(value()?)),
            "--binary" => opts.binary = value()?,
            "--output" | "-o" => match value()?.as_str() {
                "json" => opts.json = true,
                "text" => opts.json = false,
                other => bail!("--output takes json or text, not {other:?}"),
            },
            flag if flag.starts_with('-') => bail!("unknown flag {flag}\n{USAGE}"),
            word => rest.push(word.to_string()),
        }
    }
    Ok((opts, rest))
}

async fn local(args: &[String]) -> anyhow::Result<bool> {
    let (opts, words) = parse(args)?;
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let local = Local::open(opts)?;
    let result = run_local(&local, &words).await;
    local.shutdown().await;
    result
}

async fn run_local(local: &Local, words: &[&str]) -> anyhow::Result<bool> {
    let one = |w: &[&str]| -> anyhow::Result<String> {
        match w {
            [name] => Ok((*name).to_string()),
            _ => bail!("name exactly one object\n{USAGE}"),
        }
    };
    let reports = match words {
        ["apply"] => local.reconcile(&[], Request::Reconcile).await?.0,
        ["watch"] => return watch(local).await,
        ["status", rest @ ..] => {
            let name = rest.first().copied();
            let reports = local.status(name)?;
            return Ok(local.print(&reports));
        }
        ["plan", "show", rest @ ..] => {
            print!("{}", local.plan_text(&one(rest)?)?);
            return Ok(true);
        }
        ["approve", name] => {
            local
                .reconcile(&[(*name).to_string()], Request::Approve(None))
                .await?
                .0
        }
        ["approve", name, id] => {
            local
                .reconcile(
                    &[(*name).to_string()],
                    Request::Approve(Some((*id).to_string())),
                )
                .await?
                .0
        }
        ["replan", rest @ ..] => local.reconcile(&[one(rest)?], Request::Replan).await?.0,
        ["destroy", rest @ ..] => local.reconcile(&[one(rest)?], Request::Destroy).await?.0,
        ["unlock", rest @ ..] => local.reconcile(&[one(rest)?], Request::Unlock).await?.0,
        _ => bail!("{USAGE}"),
    };
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

/// Publishes a directory as an OCI artifact tfops can consume.
async fn source(args: &[String]) -> anyhow::Result<bool> {
    let insecure = args.iter().any(|a| a == "--insecure");
    let words: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| *a != "--insecure")
        .collect();
    let ["push", dir, target] = words.as_slice() else {
        bail!("{USAGE}");
    };
    let (url, tag) = match target.rfind(':') {
        Some(i) if i > target.rfind('/').unwrap_or(0) => (&target[..i], &target[i + 1..]),
        _ => (*target, "latest"),
    };
    let creds = tfops_operator::sources::oci::OciCredentials {
        username: std::env::var("TFOPS_REGISTRY_USERNAME").ok(),
        password: std::env::var("TFOPS_REGISTRY_PASSWORD").ok(),
    };
    let digest = tfops_operator::sources::oci::OciSource::new(insecure)
        .push(std::path::Path::new(dir), url, tag, None, &creds)
        .await?;
    println!("pushed {url}:{tag}@{digest}");
    Ok(true)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("local") => local(&args[1..]).await,
        Some("source") => source(&args[1..]).await,
        Some("runner") => match tfops_runner::process::parse_args(&args[1..]) {
            Ok(Some(a)) => tfops_runner::process::run(a)
                .await
                .map(|()| true)
                .map_err(anyhow::Error::from),
            Ok(None) => {
                println!("{}", tfops_runner::process::USAGE);
                Ok(true)
            }
            Err(e) => Err(e.into()),
        },
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
