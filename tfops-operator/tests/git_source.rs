//! Git sources against a real `git daemon` on 127.0.0.1: every ref kind, a new commit, a
//! forced push, unknown refs and an unreachable host; then local mode on a GitRepository.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{Server, free_port, serve, tfops};
use tfops_core::api::SourceRevisionRef;
use tfops_core::source::refs::ResolvedRef;
use tfops_operator::sources::git::{GitCredentials, GitError, GitSource};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn commit(repo: &Path, file: &str, content: &str) -> String {
    std::fs::write(repo.join(file), content).unwrap();
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", content]);
    git(repo, &["rev-parse", "HEAD"])
}

struct Daemon {
    server: Server,
    root: tempfile::TempDir,
}

impl Daemon {
    fn url(&self, repo: &str) -> String {
        format!("git://127.0.0.1:{}/{repo}", self.server.port)
    }
    fn repo(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }
}

/// A repository `infra` (main.tf; tags v1.0.0, v1.2.0 annotated, v2.0.0; branch dev) served by
/// `git daemon` on a free loopback port.
fn daemon() -> Daemon {
    let root = tempfile::tempdir().unwrap();
    let repo = root.path().join("infra");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    commit(
        &repo,
        "main.tf",
        "resource \"terraform_data\" \"a\" { input = \"one\" }\n",
    );
    git(&repo, &["tag", "v1.0.0"]);
    commit(
        &repo,
        "main.tf",
        "resource \"terraform_data\" \"a\" { input = \"two\" }\n",
    );
    git(&repo, &["tag", "-a", "v1.2.0", "-m", "release"]);
    commit(
        &repo,
        "main.tf",
        "resource \"terraform_data\" \"a\" { input = \"three\" }\n",
    );
    git(&repo, &["tag", "v2.0.0"]);
    git(&repo, &["branch", "dev", "v1.0.0"]);
    let port = free_port();
    // The daemon binary itself (not the `git daemon` wrapper), so that killing it stops it.
    let exec_path = git(root.path(), &["--exec-path"]);
    let mut command = Command::new(Path::new(&exec_path).join("git-daemon"));
    command
        .args([
            "--reuseaddr",
            "--export-all",
            "--listen=127.0.0.1",
            &format!("--port={port}"),
        ])
        .arg(format!("--base-path={}", root.path().display()))
        .arg(root.path());
    Daemon {
        server: serve(command, || Some(port)),
        root,
    }
}

fn reference(j: serde_json::Value) -> SourceRevisionRef {
    serde_json::from_value(j).unwrap()
}

fn tree_of(src: &GitSource, url: &str, r: &SourceRevisionRef) -> (String, String) {
    tree_with(src, url, r, &GitCredentials::default())
}

/// Resolves `r`, checks it out with `creds`, and returns the commit and `main.tf`.
fn tree_with(
    src: &GitSource,
    url: &str,
    r: &SourceRevisionRef,
    creds: &GitCredentials,
) -> (String, String) {
    let resolved = src.resolve(url, r, creds).unwrap();
    let dest = tempfile::tempdir().unwrap();
    let commit = src
        .checkout(url, &resolved, creds, &dest.path().join("t"))
        .unwrap();
    assert!(
        !dest.path().join("t/.git").exists(),
        ".git never reaches the tree"
    );
    (
        commit,
        std::fs::read_to_string(dest.path().join("t/main.tf")).unwrap(),
    )
}

/// Resolves the reference written as JSON without credentials.
fn resolve_anonymously(
    src: &GitSource,
    url: &str,
    r: serde_json::Value,
) -> Result<ResolvedRef, GitError> {
    src.resolve(url, &reference(r), &GitCredentials::default())
}

#[test]
fn every_ref_kind_resolves_and_fetches_the_right_tree() {
    let d = daemon();
    let cache = tempfile::tempdir().unwrap();
    let src = GitSource::new(cache.path());
    let url = d.url("infra");
    let head = git(&d.repo("infra"), &["rev-parse", "HEAD"]);
    let (c, text) = tree_of(
        &src,
        &url,
        &reference(serde_json::json!({"branch": "main"})),
    );
    assert_eq!(c, head);
    assert!(text.contains("three"));
    assert!(
        tree_of(&src, &url, &reference(serde_json::json!({"branch": "dev"})))
            .1
            .contains("one")
    );
    assert!(
        tree_of(&src, &url, &reference(serde_json::json!({"tag": "v1.2.0"})))
            .1
            .contains("two"),
        "annotated tag"
    );
    let semver =
        resolve_anonymously(&src, &url, serde_json::json!({"semver": ">=1.0.0 <2.0.0"})).unwrap();
    assert_eq!(semver.name, "v1.2.0");
    let v1 = git(&d.repo("infra"), &["rev-parse", "v1.0.0"]);
    let (c, text) = tree_of(&src, &url, &reference(serde_json::json!({"commit": v1})));
    assert_eq!(c, v1);
    assert!(
        text.contains("one"),
        "an exact commit that is no branch tip"
    );
}

#[test]
fn new_commits_and_forced_pushes_change_the_revision() {
    let d = daemon();
    let cache = tempfile::tempdir().unwrap();
    let src = GitSource::new(cache.path());
    let url = d.url("infra");
    let main = reference(serde_json::json!({"branch": "main"}));
    let first = src
        .resolve(&url, &main, &GitCredentials::default())
        .unwrap()
        .sha;
    let second = commit(
        &d.repo("infra"),
        "main.tf",
        "resource \"terraform_data\" \"a\" { input = \"four\" }\n",
    );
    assert_eq!(
        src.resolve(&url, &main, &GitCredentials::default())
            .unwrap()
            .sha,
        second
    );
    assert!(tree_of(&src, &url, &main).1.contains("four"));
    // History rewritten (what a forced push does to the branch).
    git(&d.repo("infra"), &["reset", "-q", "--hard", &first]);
    let rewritten = commit(
        &d.repo("infra"),
        "main.tf",
        "resource \"terraform_data\" \"a\" { input = \"five\" }\n",
    );
    let (c, text) = tree_of(&src, &url, &main);
    assert_eq!(c, rewritten);
    assert!(text.contains("five"));
}

#[test]
fn unknown_refs_and_unreachable_hosts_are_named() {
    let d = daemon();
    let src = GitSource::new(tempfile::tempdir().unwrap().path());
    let url = d.url("infra");
    let err = resolve_anonymously(&src, &url, serde_json::json!({"branch": "nope"})).unwrap_err();
    assert!(
        matches!(err, GitError::Ref { .. })
            && err.to_string().contains("branch \"nope\" does not exist"),
        "{err}"
    );
    let err = resolve_anonymously(&src, &url, serde_json::json!({"semver": ">=9"})).unwrap_err();
    assert!(err.to_string().contains("no tag matches"), "{err}");
    let closed = free_port();
    let err = resolve_anonymously(
        &src,
        &format!("git://127.0.0.1:{closed}/infra"),
        serde_json::json!({}),
    )
    .unwrap_err();
    assert!(matches!(err, GitError::Unreachable { .. }), "{err}");
}

#[test]
fn a_repository_that_does_not_exist_is_named_as_such() {
    let d = daemon();
    let src = GitSource::new(tempfile::tempdir().unwrap().path());
    let server = http_server(d.root.path());
    let good = GitCredentials {
        username: Some("alice".into()),
        password: Some("s3cret-token".into()),
        ..GitCredentials::default()
    };
    let main = reference(serde_json::json!({"branch": "main"}));
    for (url, credentials) in [
        (d.url("nowhere"), GitCredentials::default()),
        (format!("http://127.0.0.1:{}/nowhere", server.port), good),
    ] {
        let err = src.resolve(&url, &main, &credentials).unwrap_err();
        println!("{url}: {err}");
        assert!(
            matches!(err, GitError::NoSuchRepository { .. }),
            "{url}: {err:?}"
        );
        assert!(
            err.to_string()
                .starts_with(&format!("{url}: no such repository")),
            "{err}"
        );
    }
}

#[test]
fn local_mode_reconciles_a_git_repository() {
    let d = daemon();
    let project = tempfile::tempdir().unwrap();
    let yaml = format!(
        "apiVersion: infra.argocd.io/v1alpha1\nkind: Terraform\nmetadata:\n  name: net\n  namespace: demo\nspec:\n  sourceRef:\n    kind: GitRepository\n    url: {}\n    ref:\n      semver: \">=1.0.0 <2.0.0\"\n  approvePlan: auto\n",
        d.url("infra")
    );
    std::fs::write(project.path().join("terraform.yaml"), yaml).unwrap();
    let out = tfops(project.path(), &["local", "apply", "-f", "terraform.yaml"]);
    assert_eq!(out.code, 0, "{}{}", out.stdout, out.stderr);
    let stdout = out.stdout;
    let tag = git(&d.repo("infra"), &["rev-parse", "v1.2.0^{commit}"]);
    assert!(
        stdout.contains(&format!("v1.2.0@sha1:{tag}")),
        "the revision names the tag and its commit: {stdout}"
    );
    assert!(
        stdout.contains(&format!("plan-v1.2.0-{}", &tag[..10])),
        "{stdout}"
    );
}

fn http_server(root: &Path) -> Server {
    serve_http(root, &[])
}

fn serve_http(root: &Path, tls: &[&Path]) -> Server {
    let port_file = root.join("port");
    let _ = std::fs::remove_file(&port_file);
    let mut command = Command::new("python3");
    command
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/git_http_server.py"))
        .arg(root)
        .args(["alice", "s3cret-token"])
        .arg(&port_file)
        .args(tls);
    serve(command, || {
        std::fs::read_to_string(&port_file)
            .ok()?
            .trim()
            .parse()
            .ok()
    })
}

#[test]
fn smart_http_with_basic_auth_accepts_the_right_credentials_only() {
    let d = daemon();
    let server = http_server(d.root.path());
    let url = format!("http://127.0.0.1:{}/infra", server.port);
    let src = GitSource::new(tempfile::tempdir().unwrap().path());
    let main = reference(serde_json::json!({"branch": "main"}));
    let good = GitCredentials {
        username: Some("alice".into()),
        password: Some("s3cret-token".into()),
        ..GitCredentials::default()
    };
    let (_, text) = tree_with(&src, &url, &main, &good);
    assert!(text.contains("three"));

    let wrong = GitCredentials {
        username: Some("alice".into()),
        password: Some("guess".into()),
        ..GitCredentials::default()
    };
    let err = src.resolve(&url, &main, &wrong).unwrap_err();
    assert!(matches!(err, GitError::AccessDenied { .. }), "{err}");
    assert!(
        !err.to_string().contains("guess"),
        "no credential in messages: {err}"
    );
    let err = src
        .resolve(&url, &main, &GitCredentials::default())
        .unwrap_err();
    assert!(matches!(err, GitError::AccessDenied { .. }), "{err}");
}

#[test]
fn the_cache_stays_within_its_limit_least_recently_used_first() {
    let d = daemon();
    for name in ["infra2", "infra3"] {
        let copy = d.repo(name);
        std::fs::create_dir(&copy).unwrap();
        git(&copy, &["init", "-q"]);
        commit(&copy, "main.tf", &format!("# {name}\n"));
    }
    let cache = tempfile::tempdir().unwrap();
    // Room for about two small repositories.
    let one = {
        let probe = GitSource::new(&cache.path().join("probe"));
        tree_of(&probe, &d.url("infra"), &reference(serde_json::json!({})));
        dir_size(&cache.path().join("probe"))
    };
    let src = GitSource::with_limit(&cache.path().join("c"), one * 2 + one / 2);
    for name in ["infra", "infra2", "infra3"] {
        tree_of(&src, &d.url(name), &reference(serde_json::json!({})));
        std::thread::sleep(Duration::from_millis(20));
    }
    let repos = std::fs::read_dir(cache.path().join("c")).unwrap().count();
    assert_eq!(repos, 2, "the least recently used repository was evicted");
    assert!(dir_size(&cache.path().join("c")) <= one * 2 + one / 2);
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    if e.path().is_dir() {
                        dir_size(&e.path())
                    } else {
                        e.metadata().map(|m| m.len()).unwrap_or(0)
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

struct Sshd {
    server: Server,
    dir: tempfile::TempDir,
}

fn keygen(path: &Path, passphrase: &str) {
    let out = Command::new("ssh-keygen")
        .args([
            "-q",
            "-t",
            "ed25519",
            "-N",
            passphrase,
            "-C",
            "tfops-test",
            "-f",
        ])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Debian's sshd on a loopback port with its own host key, accepting the keys of
/// `dir/client` and `dir/client-pass` (passphrase `open sesame`).
fn sshd() -> Sshd {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    keygen(&d.join("host"), "");
    keygen(&d.join("client"), "");
    keygen(&d.join("client-pass"), "open sesame");
    keygen(&d.join("other-host"), "");
    let authorized = [
        std::fs::read_to_string(d.join("client.pub")).unwrap(),
        std::fs::read_to_string(d.join("client-pass.pub")).unwrap(),
    ]
    .concat();
    std::fs::write(d.join("authorized_keys"), authorized).unwrap();
    let port = free_port();
    let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
    std::fs::write(
        d.join("sshd_config"),
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {host}\nPidFile {d}/sshd.pid\nAuthorizedKeysFile {d}/authorized_keys\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nAllowUsers {user}\n",
            host = d.join("host").display(),
            d = d.display()
        ),
    )
    .unwrap();
    std::fs::create_dir_all("/run/sshd").unwrap();
    let mut command = Command::new("/usr/sbin/sshd");
    command.args(["-D", "-e", "-f"]).arg(d.join("sshd_config"));
    Sshd {
        server: serve(command, || Some(port)),
        dir,
    }
}

impl Sshd {
    fn known_hosts(&self, key: &str) -> String {
        format!(
            "[127.0.0.1]:{} {}",
            self.server.port,
            std::fs::read_to_string(self.dir.path().join(format!("{key}.pub"))).unwrap()
        )
    }
    fn creds(&self, key: &str, passphrase: Option<&str>, known: &str) -> GitCredentials {
        GitCredentials {
            username: Some(std::env::var("USER").unwrap_or_else(|_| "root".into())),
            ssh_private_key: Some(std::fs::read_to_string(self.dir.path().join(key)).unwrap()),
            ssh_passphrase: passphrase.map(str::to_string),
            known_hosts: Some(known.to_string()),
            ..GitCredentials::default()
        }
    }
}

#[test]
fn ssh_with_a_key_and_known_hosts_and_what_is_refused() {
    let d = daemon();
    let s = sshd();
    let url = format!(
        "ssh://127.0.0.1:{}{}",
        s.server.port,
        d.repo("infra").display()
    );
    let src = GitSource::new(tempfile::tempdir().unwrap().path());
    let main = reference(serde_json::json!({"branch": "main"}));
    let known = s.known_hosts("host");

    let good = s.creds("client", None, &known);
    let (commit, text) = tree_with(&src, &url, &main, &good);
    assert!(text.contains("three"));

    let with_passphrase = s.creds("client-pass", Some("open sesame"), &known);
    assert_eq!(
        src.resolve(&url, &main, &with_passphrase).unwrap().sha,
        commit
    );

    // A key the server does not know.
    let stranger = tempfile::tempdir().unwrap();
    keygen(&stranger.path().join("k"), "");
    let wrong = GitCredentials {
        ssh_private_key: Some(std::fs::read_to_string(stranger.path().join("k")).unwrap()),
        ..good.clone()
    };
    let err = src.resolve(&url, &main, &wrong).unwrap_err();
    assert!(matches!(err, GitError::AccessDenied { .. }), "{err}");

    // The server presents another host key than known_hosts names.
    let mismatch = s.creds("client", None, &s.known_hosts("other-host"));
    let err = src.resolve(&url, &main, &mismatch).unwrap_err();
    assert!(
        matches!(err, GitError::HostKey { .. }) && err.to_string().contains("mismatch"),
        "{err}"
    );

    // Unknown host: refused unless explicitly allowed.
    let unknown = s.creds("client", None, "");
    let err = src.resolve(&url, &main, &unknown).unwrap_err();
    assert!(
        matches!(err, GitError::HostKey { .. }) && err.to_string().contains("unknown"),
        "{err}"
    );
    let allowed = GitCredentials {
        allow_unknown_host_key: true,
        ..unknown
    };
    assert_eq!(src.resolve(&url, &main, &allowed).unwrap().sha, commit);
}

/// A CA (PEM) and, signed by it, a certificate and key for 127.0.0.1 written into `dir`.
fn tls_material(dir: &Path) -> String {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "test git CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params
        .subject_alt_names
        .push(rcgen::SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let cert = params.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
    ca.pem()
}

#[test]
fn https_with_a_private_ca_is_trusted_only_with_that_ca() {
    let d = daemon();
    let certs = tempfile::tempdir().unwrap();
    let ca = tls_material(certs.path());
    let other_ca = tls_material(tempfile::tempdir().unwrap().path());
    let server = serve_http(
        d.root.path(),
        &[&certs.path().join("tls.crt"), &certs.path().join("tls.key")],
    );
    let url = format!("https://127.0.0.1:{}/infra", server.port);
    let src = GitSource::new(tempfile::tempdir().unwrap().path());
    let main = reference(serde_json::json!({"branch": "main"}));
    let creds = |ca: Option<&str>| GitCredentials {
        username: Some("alice".into()),
        password: Some("s3cret-token".into()),
        ca_bundle: ca.map(str::to_string),
        ..GitCredentials::default()
    };
    let (_, text) = tree_with(&src, &url, &main, &creds(Some(&ca)));
    assert!(text.contains("three"));

    let err = src
        .resolve(&url, &main, &creds(Some(&other_ca)))
        .unwrap_err();
    assert!(
        matches!(err, GitError::HostKey { .. })
            && err
                .to_string()
                .contains("TLS certificate of 127.0.0.1 was refused"),
        "{err}"
    );
    assert!(
        src.resolve(&url, &main, &creds(None)).is_err(),
        "the system's roots do not know the test CA"
    );
}

#[test]
fn submodules_are_fetched_only_when_asked() {
    let d = daemon();
    let sub = d.repo("sub");
    std::fs::create_dir(&sub).unwrap();
    git(&sub, &["init", "-q"]);
    commit(&sub, "module.tf", "# from the submodule\n");
    let parent = d.repo("parent");
    std::fs::create_dir(&parent).unwrap();
    git(&parent, &["init", "-q"]);
    commit(
        &parent,
        "main.tf",
        "module \"m\" { source = \"./modules/sub\" }\n",
    );
    git(
        &parent,
        &["submodule", "add", "-q", &d.url("sub"), "modules/sub"],
    );
    git(&parent, &["commit", "-q", "-m", "add submodule"]);

    let src = GitSource::new(tempfile::tempdir().unwrap().path());
    let url = d.url("parent");
    let resolved = resolve_anonymously(&src, &url, serde_json::json!({})).unwrap();
    let plain = tempfile::tempdir().unwrap();
    src.checkout(
        &url,
        &resolved,
        &GitCredentials::default(),
        &plain.path().join("t"),
    )
    .unwrap();
    assert!(
        !plain.path().join("t/modules/sub/module.tf").exists(),
        "not followed by default"
    );
    let deep = tempfile::tempdir().unwrap();
    src.checkout_with(
        &url,
        &resolved,
        &GitCredentials::default(),
        &deep.path().join("t"),
        true,
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(deep.path().join("t/modules/sub/module.tf")).unwrap(),
        "# from the submodule\n"
    );
}

/// Monorepos: what two commits' trees differ in, read from the cache with no checkout, the
/// earlier commit fetched when the cache lacks it (by id, or with the branches where `git
/// daemon` refuses fetches by id).
#[test]
fn the_files_two_commits_differ_in_come_from_their_trees() {
    let d = daemon();
    let repo = d.repo("infra");
    std::fs::create_dir_all(repo.join("envs/prod")).unwrap();
    std::fs::create_dir_all(repo.join("envs/staging")).unwrap();
    std::fs::write(repo.join("envs/prod/main.tf"), "# prod\n").unwrap();
    let base = commit(&repo, "envs/staging/main.tf", "# staging\n");
    let staging = commit(&repo, "envs/staging/main.tf", "# staging, changed\n");
    git(&repo, &["mv", "envs/prod/main.tf", "envs/prod/network.tf"]);
    git(&repo, &["commit", "-q", "-m", "rename"]);
    let renamed = git(&repo, &["rev-parse", "HEAD"]);
    let url = d.url("infra");
    let main = reference(serde_json::json!({"branch": "main"}));
    let creds = GitCredentials::default();

    for warm in [false, true] {
        let cache = tempfile::tempdir().unwrap();
        let src = GitSource::new(cache.path());
        let to = src.resolve(&url, &main, &creds).unwrap();
        assert_eq!(to.sha, renamed);
        if warm {
            // The earlier commit is in the cache already, as after the run that used it.
            let pinned = ResolvedRef {
                name: base.clone(),
                fetch: String::new(),
                sha: base.clone(),
            };
            let dest = tempfile::tempdir().unwrap();
            src.checkout(&url, &pinned, &creds, &dest.path().join("t"))
                .unwrap();
        }
        let files = src.changed_files(&url, &base, &to, &creds).unwrap();
        assert_eq!(
            files,
            [
                "envs/prod/main.tf",
                "envs/prod/network.tf",
                "envs/staging/main.tf"
            ],
            "warm cache: {warm}"
        );
        let files = src.changed_files(&url, &staging, &to, &creds).unwrap();
        assert_eq!(files, ["envs/prod/main.tf", "envs/prod/network.tf"]);
        assert!(
            src.changed_files(&url, &renamed, &to, &creds)
                .unwrap()
                .is_empty()
        );
    }
    let src = GitSource::new(tempfile::tempdir().unwrap().path());
    let to = src.resolve(&url, &main, &creds).unwrap();
    let gone = "0123456789012345678901234567890123456789";
    let e = src.changed_files(&url, gone, &to, &creds).unwrap_err();
    assert!(matches!(e, GitError::NoSuchCommit { .. }), "{e:?}");
}
