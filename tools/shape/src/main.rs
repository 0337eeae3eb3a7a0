//! `shape`: checks that the product crates keep the shape their design promises: no file over
//! `--max-file` lines and no function over `--max-fn` lines (tests aside), and no modules of a
//! crate that import each other in a circle. What is over a limit today is named in an
//! allow-list, which only shrinks: an entry that no longer applies fails the run too.
//!
//! Written here because no maintained tool measures these three things: clippy's
//! `too_many_lines` counts a function's code lines only, and nothing reports module cycles
//! within one crate.

mod cycles;
mod sizes;
mod source;

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

/// The command line.
#[derive(Parser)]
#[command(about = "File and function sizes and module cycles of the product crates")]
struct Args {
    /// The repository's root.
    #[arg(long, default_value = ".")]
    root: PathBuf,
    /// The allow-list (relative to the root): `file <path>`, `fn <path> <name>`, `cycle
    /// <module> <module>…`, one per line; `#` starts a comment.
    #[arg(long, default_value = "tools/shape/allow.txt")]
    allow: PathBuf,
    /// The most lines a file may have, its test modules aside.
    #[arg(long, default_value_t = 500)]
    max_file: usize,
    /// The most lines a function may have, from `fn` to its closing brace.
    #[arg(long, default_value_t = 80)]
    max_fn: usize,
    /// The crates' source directories, relative to the root.
    #[arg(default_values_t = [
        "tfops-core/src".to_string(),
        "tfops-kube/src".to_string(),
        "tfops-runner/src".to_string(),
        "tfops-operator/src".to_string(),
    ])]
    crates: Vec<String>,
}

fn main() -> std::process::ExitCode {
    match check(&Args::parse()) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("the code's shape is outside its limits (see FAIL and STALE above)");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("shape: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Prints every finding; whether none fails.
fn check(args: &Args) -> anyhow::Result<bool> {
    let allow_path = args.root.join(&args.allow);
    let allowed = read_allow(&allow_path)?;
    let mut found = BTreeSet::new();
    for krate in &args.crates {
        let files =
            source::read_crate(&args.root, krate).with_context(|| format!("reading {krate}"))?;
        found.extend(sizes::oversized(&files, args.max_file, args.max_fn));
        found.extend(cycles::circles(&files));
    }
    let mut failed = false;
    for finding in &found {
        let state = if allowed.contains(&finding.key) {
            "allowed"
        } else {
            failed = true;
            "FAIL"
        };
        println!("{state:7} {}  ({})", finding.key, finding.detail);
    }
    let keys: BTreeSet<&String> = found.iter().map(|f| &f.key).collect();
    for stale in allowed.iter().filter(|a| !keys.contains(a)) {
        failed = true;
        println!("STALE   {stale}  (no longer over a limit: remove it from the allow-list)");
    }
    let allowed_now = found.iter().filter(|f| allowed.contains(&f.key)).count();
    println!(
        "{} finding(s), {allowed_now} on the allow-list ({})",
        found.len(),
        args.allow.display()
    );
    Ok(!failed)
}

/// What is over a limit: `key` is how the allow-list names it.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Finding {
    /// `file <path>`, `fn <path> <name>` or `cycle <module>…`.
    pub key: String,
    /// Sizes, or the imports that close the circle.
    pub detail: String,
}

fn read_allow(path: &std::path::Path) -> anyhow::Result<BTreeSet<String>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    Ok(text
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect())
}
