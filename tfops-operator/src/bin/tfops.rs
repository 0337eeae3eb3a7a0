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
//! tfops policy eval   --policy FILE --plan PLAN.json [--object TERRAFORM.yaml]
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
  tfops policy eval   --policy FILE [--policy FILE...] --plan PLAN.json [--object TERRAFORM.yaml]
  tfops policy test   DIR   (policies and *.test.yaml cases; see the README)
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

/// Evaluates policies (YAML files of `TerraformPolicy` documents) against a plan JSON and
/// prints the verdict of every rule; exits 1 when a Deny rule is violated.
fn policy(args: &[String]) -> anyhow::Result<bool> {
    use tfops_core::policy::{Action, Outcome, Verdict, compile, evaluate};
    use tfops_operator::local::manifest;
    if let [verb, dir] = args
        && verb == "test"
    {
        let checked = tfops_operator::policy_test::run(std::path::Path::new(dir))?;
        println!(
            "{:<40} {:<36} {:<15} {:<15} OK",
            "CASE", "RULE", "EXPECTED", "GOT"
        );
        for c in &checked {
            println!(
                "{:<40} {:<36} {:<15} {:<15} {}",
                c.case,
                c.rule,
                c.expected,
                c.got,
                if c.ok() { "ok" } else { "FAIL" }
            );
        }
        let failed = checked.iter().filter(|c| !c.ok()).count();
        println!("\n{} passed, {failed} failed", checked.len() - failed);
        return Ok(failed == 0 && !checked.is_empty());
    }
    let Some(("eval", rest)) = args.split_first().map(|(a, rest)| (a.as_str(), rest)) else {
        bail!("{USAGE}");
    };
    let (mut policies, mut plan, mut object) = (Vec::new(), None, None);
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .with_context(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--policy" => policies.push(PathBuf::from(value()?)),
            "--plan" => plan = Some(PathBuf::from(value()?)),
            "--object" => object = Some(PathBuf::from(value()?)),
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    let plan_path = plan.context("--plan is required")?;
    let read = manifest::read(&[policies, object.into_iter().collect()].concat())?;
    let compiled = read
        .policies
        .iter()
        .map(compile)
        .collect::<Result<Vec<_>, _>>()?;
    let text = std::fs::read_to_string(&plan_path)
        .with_context(|| format!("reading {}", plan_path.display()))?;
    let plan: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not JSON", plan_path.display()))?;
    // Without an object, each policy is evaluated as for an object of its own namespace.
    let mut verdict = Verdict::default();
    for p in &compiled {
        let object = match read.objects.first() {
            Some(m) => m.object(),
            None => tfops_operator::policy_test::object_in(&p.namespace),
        };
        verdict
            .results
            .extend(evaluate(std::slice::from_ref(p), &plan, &object)?.results);
    }
    println!("{:<20} {:<28} {:<5} RESULT", "POLICY", "RULE", "ACTION");
    for r in &verdict.results {
        let action = if r.action == Action::Deny {
            "Deny"
        } else {
            "Warn"
        };
        let result = match &r.outcome {
            Outcome::Pass => "pass".to_string(),
            Outcome::NotApplicable => "not applicable".to_string(),
            Outcome::Violation { message, addresses } if addresses.is_empty() => {
                format!("VIOLATED: {message}")
            }
            Outcome::Violation { message, addresses } => {
                format!("VIOLATED: {message} ({})", addresses.join(", "))
            }
            Outcome::Error { message } => format!("ERROR: {message}"),
        };
        println!("{:<20} {:<28} {:<5} {result}", r.policy, r.rule, action);
    }
    Ok(!verdict.denied())
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
        Some("policy") => policy(&args[1..]),
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
