//! What the tfops-operator tests share: the `tfops` binary and real terraform, and servers
//! started for a test and stopped with it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub use tfops_core::api::Binary;

/// The terraform the tests run ([`program`]).
pub fn terraform() -> PathBuf {
    program(Binary::Terraform)
}

/// The `binary` the tests run: its variable, `PATH`, or the build of `scripts/install-terraform`
/// or `scripts/install-tofu` in this checkout ([`tfops_testcluster::tools`]); a test without
/// one fails at once naming the script to run.
pub fn program(binary: Binary) -> PathBuf {
    tfops_testcluster::tools::binary(binary.as_str()).unwrap_or_else(|e| panic!("{e}"))
}

/// What a `tfops` invocation printed.
pub struct Out {
    /// Exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs `tfops ARGS` in `dir` with the real terraform.
pub fn tfops(dir: &Path, args: &[&str]) -> Out {
    tfops_with(Binary::Terraform, dir, args)
}

/// Runs `tfops ARGS` in `dir` with `binary` as what `auto` means (`TFOPS_BINARY`); both
/// binaries are at hand, for objects that name the other one.
pub fn tfops_with(binary: Binary, dir: &Path, args: &[&str]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_tfops"))
        .args(args)
        .current_dir(dir)
        .env("TFOPS_BINARY", binary.as_str())
        .env("TFOPS_TERRAFORM", terraform())
        .env("TFOPS_TOFU", program(Binary::Tofu))
        .output()
        .unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A free port on 127.0.0.1 (bound, then released for the server to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server process, stopped (and reaped) when dropped.
pub struct Server {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `command` (output discarded) and waits until `port()` names a port that accepts
/// connections; `port` is asked again on each try, for servers that write theirs to a file.
pub fn serve(mut command: Command, mut port: impl FnMut() -> Option<u16>) -> Server {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
    for _ in 0..400 {
        if let Some(p) = port()
            && std::net::TcpStream::connect(("127.0.0.1", p)).is_ok()
        {
            return Server { child, port: p };
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("{command:?} did not start");
}
