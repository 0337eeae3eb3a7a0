//! A Git repository served by a real `git daemon` on a free loopback port, for sources (the
//! e2e tests' and the scale benchmark's).
// Test support: a repository that cannot be made or served is a failed test or benchmark,
// so failures panic with git's message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Runs git in `dir` (with an identity and `main` as the default branch); its stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
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

/// A `git daemon` exporting the repositories of a directory; stopped when dropped.
pub struct GitDaemon {
    child: Child,
    port: u16,
    /// The host in its URLs.
    host: String,
    root: tempfile::TempDir,
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl GitDaemon {
    /// A daemon with no repositories yet, on loopback.
    pub fn start() -> Self {
        Self::start_on("127.0.0.1", "127.0.0.1")
    }

    /// A daemon that containers reach too: on every address, its URLs naming `host` (the
    /// container network's gateway).
    pub fn start_for_containers(host: &str) -> Self {
        Self::start_on("0.0.0.0", host)
    }

    fn start_on(listen: &str, host: &str) -> Self {
        let root = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // The daemon binary itself (not the `git daemon` wrapper), so that killing it stops it.
        let exec_path = git(root.path(), &["--exec-path"]);
        let mut child = Command::new(Path::new(&exec_path).join("git-daemon"))
            .args([
                "--reuseaddr",
                "--export-all",
                &format!("--listen={listen}"),
                &format!("--port={port}"),
            ])
            .arg(format!("--base-path={}", root.path().display()))
            .arg(root.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        for _ in 0..400 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Self {
                    child,
                    port,
                    host: host.to_string(),
                    root,
                };
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("git daemon did not start");
    }

    /// The URL of repository `name`.
    pub fn url(&self, name: &str) -> String {
        format!("git://{}:{}/{name}", self.host, self.port)
    }

    /// The working tree of repository `name`.
    pub fn repo(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    /// Commits `files` (path, content) to repository `name` (created when new); the commit.
    pub fn commit(&self, name: &str, files: &[(&str, &str)]) -> String {
        let repo = self.repo(name);
        if !repo.exists() {
            std::fs::create_dir_all(&repo).unwrap();
            git(&repo, &["init", "-q"]);
        }
        for (path, content) in files {
            let file = repo.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, content).unwrap();
        }
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "--allow-empty", "-m", "change"]);
        git(&repo, &["rev-parse", "HEAD"])
    }
}
