//! What a newcomer reads first: `--help` of each binary and of every `tfops` command says what
//! it does for a user, with none of our internal notes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn help(binary: &str, args: &[&str]) -> String {
    let out = Command::new(binary)
        .args(args)
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success(), "{binary} {args:?} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Words that belong to our code and tests, not to a user's help.
const INTERNAL: [&str; 5] = [
    "composition root",
    "node agent",
    "test cluster",
    "tofu-controller",
    "later,",
];

fn assert_for_users(what: &str, text: &str) {
    for word in INTERNAL {
        assert!(!text.contains(word), "{what} says {word:?}:\n{text}");
    }
}

#[test]
fn each_binary_opens_with_what_it_is_for() {
    let tfops = help(env!("CARGO_BIN_EXE_tfops"), &[]);
    assert!(
        tfops.starts_with("Plan, approve and apply Terraform and OpenTofu from Git"),
        "{tfops}"
    );
    let manager = help(env!("CARGO_BIN_EXE_tfops-manager"), &[]);
    assert!(
        manager.starts_with("The tfops controller: reconciles the Terraform objects of a cluster"),
        "{manager}"
    );
    let runner = help(env!("CARGO_BIN_EXE_tfops-runner"), &[]);
    assert!(runner.starts_with("The tfops runner"), "{runner}");
    for (what, text) in [
        ("tfops", &tfops),
        ("tfops-manager", &manager),
        ("tfops-runner", &runner),
    ] {
        assert_for_users(what, text);
    }
}

#[test]
fn every_command_says_what_it_does_for_a_user() {
    let tfops = env!("CARGO_BIN_EXE_tfops");
    let commands: Vec<Vec<&str>> = [
        "local",
        "get",
        "pr",
        "plan",
        "approve",
        "replan",
        "reconcile",
        "suspend",
        "resume",
        "unlock",
        "history",
        "logs",
        "source",
        "policy",
        "runner",
        "completion",
    ]
    .iter()
    .map(|c| vec![*c])
    .chain(
        [
            "apply", "watch", "status", "plan", "approve", "replan", "destroy", "unlock",
            "history", "logs",
        ]
        .iter()
        .map(|c| vec!["local", *c]),
    )
    .chain([
        vec!["plan", "show"],
        vec!["policy", "eval"],
        vec!["policy", "test"],
    ])
    .chain([vec!["source", "push"], vec!["local", "plan", "show"]])
    .collect();
    for args in commands {
        let text = help(tfops, &args);
        let first = text.lines().next().unwrap_or_default();
        assert!(
            first.split_whitespace().count() >= 3,
            "tfops {args:?}: a one- or two-word summary says nothing: {first:?}"
        );
        assert_for_users(&format!("tfops {args:?}"), &text);
    }
}
