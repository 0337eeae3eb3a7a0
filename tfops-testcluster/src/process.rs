//! The control plane's processes: started with their output in a log file, in a process group
//! of their own, killed (the whole group) when dropped, and killed by the kernel if this process
//! dies first (`setpriv --pdeathsig KILL`, from util-linux, where it is installed): a test that
//! panics or is killed leaves no etcd or kube-apiserver behind.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A running child process; killed with everything it started when dropped.
#[derive(Debug)]
pub struct Process {
    name: String,
    child: Child,
    log: PathBuf,
    /// What it was started with, to start it again.
    program: PathBuf,
    args: Vec<String>,
}

/// Whether `setpriv` (util-linux) can set the parent-death signal here.
fn setpriv() -> Option<&'static str> {
    ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

impl Process {
    /// Starts `program` with `args`, its standard output and error appended to `log`.
    ///
    /// # Errors
    /// When the log cannot be opened or the program cannot start.
    pub fn start(name: &str, program: &Path, args: &[String], log: &Path) -> std::io::Result<Self> {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let mut cmd = match setpriv() {
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.arg("--pdeathsig").arg("KILL").arg("--").arg(program);
                c
            }
            None => Command::new(program),
        };
        use std::os::unix::process::CommandExt;
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0);
        let child = cmd.spawn()?;
        Ok(Self {
            name: name.to_string(),
            child,
            log: log.to_path_buf(),
            program: program.to_path_buf(),
            args: args.to_vec(),
        })
    }

    /// Kills it (if it still runs) and starts it again with the same program, arguments and
    /// log (appended to).
    ///
    /// # Errors
    /// As [`Process::start`].
    pub fn start_again(&mut self) -> std::io::Result<()> {
        self.kill();
        let again = Self::start(&self.name, &self.program, &self.args, &self.log)?;
        // The old child is reaped: replacing it drops nothing that runs.
        *self = again;
        Ok(())
    }

    /// Sends `signal` to its whole process group (`SIGSTOP` pauses it, `SIGCONT` resumes it).
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), signal);
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The program's name (`etcd`, `kube-apiserver`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its exit status, when it has exited.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Kills the process group at once and reaps the process.
    pub fn kill(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}
