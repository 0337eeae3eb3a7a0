//! The runner of local mode: the same runner server and gRPC/mTLS path as in a cluster, as a
//! child process on 127.0.0.1 with a CA made for this session.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use tfops_core::api::{InventoryEntry, TerraformObject};
use tfops_core::ports::{
    OutputValue, PlanKind, PlanRequest, PlanResult, PortError, RunnerSession, SetupRequest,
    ShownPlan,
};
use tfops_runner::client::{ClientTls, RunnerClient, Session};
use tfops_runner::tls::{Pki, runner_server_name};
use tokio::io::AsyncReadExt;

use super::output::Printer;

/// Why the local runner could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunnerStartError {
    /// No terraform or tofu.
    #[error(
        "no {0} binary found: run scripts/install-terraform or scripts/install-tofu and set TFOPS_TERRAFORM or TFOPS_TOFU to the path it prints, or put terraform or tofu on PATH"
    )]
    NoBinary(String),
    /// `TFOPS_TERRAFORM` or `TFOPS_TOFU` names something that is not an executable file.
    #[error(
        "{variable} is {path}, which is not an executable file: fix the path (scripts/install-terraform and scripts/install-tofu print one) or unset it to search PATH"
    )]
    BadBinaryPath {
        /// The variable.
        variable: &'static str,
        /// What it names.
        path: String,
    },
    /// TLS material could not be made or written.
    #[error("preparing the runner's TLS material: {0}")]
    Tls(String),
    /// The child process failed.
    #[error("starting the runner process: {0}")]
    Process(String),
}

/// Fails when no `binary` (`auto`, `terraform`, `tofu`) can be run.
///
/// # Errors
/// [`RunnerStartError::NoBinary`], [`RunnerStartError::BadBinaryPath`].
pub fn check_binary(binary: &str) -> Result<(), RunnerStartError> {
    use std::os::unix::fs::PermissionsExt;
    for (variable, name) in [("TFOPS_TERRAFORM", "terraform"), ("TFOPS_TOFU", "tofu")] {
        if binary != "auto" && binary != name {
            continue;
        }
        if let Some(path) = std::env::var_os(variable) {
            let executable = std::fs::metadata(&path)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
            if !executable {
                return Err(RunnerStartError::BadBinaryPath {
                    variable,
                    path: std::path::Path::new(&path).display().to_string(),
                });
            }
        }
    }
    if tfops_runner::server::find_binary(binary).is_none() {
        return Err(RunnerStartError::NoBinary(if binary == "auto" {
            "terraform or tofu".into()
        } else {
            binary.into()
        }));
    }
    Ok(())
}

/// The runner child process and how to reach it.
pub struct LocalRunner {
    child: tokio::sync::Mutex<tokio::process::Child>,
    endpoint: String,
    tls: ClientTls,
    _tls_dir: tempfile::TempDir,
    /// The runner's (and so Terraform's) home: `location: home` file mappings go here, never
    /// into the user's own home directory.
    _home: tempfile::TempDir,
    printer: Printer,
    identity: String,
}

impl LocalRunner {
    /// Starts `tfops runner` (this same binary) on 127.0.0.1 with a fresh CA.
    ///
    /// # Errors
    /// [`RunnerStartError`] saying what is missing.
    pub async fn start(
        workdir_root: &Path,
        binary: &str,
        printer: Printer,
        env: &[(String, String)],
        identity: String,
    ) -> Result<Self, RunnerStartError> {
        check_binary(binary)?;
        Self::spawn(workdir_root, binary, printer, env, identity).await
    }

    async fn spawn(
        workdir_root: &Path,
        binary: &str,
        printer: Printer,
        env: &[(String, String)],
        identity: String,
    ) -> Result<Self, RunnerStartError> {
        let (tls_dir, tls) = session_tls()?;
        let home = tempfile::tempdir().map_err(|e| RunnerStartError::Process(e.to_string()))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .map_err(|e| RunnerStartError::Process(e.to_string()))?;
        let exe = std::env::current_exe().map_err(|e| RunnerStartError::Process(e.to_string()))?;
        std::fs::create_dir_all(workdir_root)
            .map_err(|e| RunnerStartError::Process(e.to_string()))?;
        let mut child = tokio::process::Command::new(exe)
            .args([
                "runner",
                "--listen",
                "127.0.0.1",
                "--grpc-port",
                &port.to_string(),
                "--binary",
                binary,
            ])
            .arg("--tls-dir")
            .arg(tls_dir.path())
            .arg("--workdir-root")
            .arg(workdir_root)
            .env("HOME", home.path())
            .env("POD_NAME", "local")
            .env("POD_NAMESPACE", "local")
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| RunnerStartError::Process(e.to_string()))?;
        let endpoint = format!("https://127.0.0.1:{port}");
        wait_ready(&mut child, &endpoint, &tls).await?;
        Ok(Self {
            child: tokio::sync::Mutex::new(child),
            endpoint,
            tls,
            _tls_dir: tls_dir,
            _home: home,
            printer,
            identity,
        })
    }

    /// Stops the runner: SIGTERM, so a running Terraform is cancelled and releases its lock.
    pub async fn stop(&self) {
        let mut child = self.child.lock().await;
        if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        let _ = tokio::time::timeout(Duration::from_secs(40), child.wait()).await;
    }
}

impl LocalRunner {
    /// Where this runner listens (what [`RunnerSession::runner`] of its sessions says).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Opens a session for `object`.
    ///
    /// # Errors
    /// [`PortError::Unavailable`] when the runner cannot be reached.
    pub async fn session(
        &self,
        object: &TerraformObject,
    ) -> Result<Box<dyn RunnerSession>, PortError> {
        let client = RunnerClient::connect(&self.endpoint, &self.tls)
            .await
            .map_err(|e| PortError::Unavailable(e.to_string()))?;
        let started = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        let prefix = format!(
            "{}-{}-{started}",
            object.metadata.namespace, object.metadata.name
        );
        let mut session = Session::start(client, &prefix)
            .await
            .map_err(|e| PortError::Unavailable(e.to_string()))?
            .named(&self.endpoint);
        if self.printer.logs() {
            let printer = self.printer.clone();
            session.on_line = Box::new(move |l| printer.terraform_line(&l.line));
        }
        Ok(Box::new(Narrated {
            inner: session,
            printer: self.printer.clone(),
            identity: self.identity.clone(),
        }))
    }
}

/// A session that prints each step with its elapsed time.
struct Narrated {
    inner: Session,
    printer: Printer,
    identity: String,
}

#[async_trait]
impl RunnerSession for Narrated {
    fn binary(&self) -> String {
        self.inner.binary()
    }
    fn identity(&self) -> String {
        self.identity.clone()
    }
    async fn setup(&mut self, request: &SetupRequest) -> Result<(), PortError> {
        let (inner, printer) = (&mut self.inner, self.printer.clone());
        Narrated::step_on(printer, "upload and setup", inner.setup(request), |_| {
            String::new()
        })
        .await
    }
    async fn init(&mut self) -> Result<(), PortError> {
        let (inner, printer) = (&mut self.inner, self.printer.clone());
        Narrated::step_on(printer, "init", inner.init(), |_| String::new()).await
    }
    async fn select_workspace(&mut self, workspace: &str) -> Result<(), PortError> {
        let (inner, printer) = (&mut self.inner, self.printer.clone());
        Narrated::step_on(
            printer,
            &format!("workspace {workspace}"),
            inner.select_workspace(workspace),
            |_| String::new(),
        )
        .await
    }
    async fn plan(&mut self, request: &PlanRequest) -> Result<PlanResult, PortError> {
        let what = match request.kind {
            PlanKind::Normal => "plan",
            PlanKind::Destroy => "plan (destroy)",
            PlanKind::RefreshOnly => "drift check",
            PlanKind::Speculative => "plan (speculative, no lock)",
        };
        let refresh = request.kind == PlanKind::RefreshOnly;
        let (inner, printer) = (&mut self.inner, self.printer.clone());
        Narrated::step_on(printer, what, inner.plan(request), move |p| {
            if refresh {
                if p.drifted.is_empty() {
                    "no drift".into()
                } else {
                    format!("drift in {}", p.drifted.join(", "))
                }
            } else if p.has_changes {
                p.summary.to_string()
            } else {
                "no changes".into()
            }
        })
        .await
    }
    async fn show(&mut self) -> Result<ShownPlan, PortError> {
        self.inner.show().await
    }
    fn runner(&self) -> String {
        self.inner.runner()
    }

    fn output_tail(&self) -> String {
        self.inner.output_tail()
    }
    async fn apply(&mut self, run_id: &str) -> Result<(), PortError> {
        let (inner, printer) = (&mut self.inner, self.printer.clone());
        Narrated::step_on(printer, "apply", inner.apply(run_id), |_| String::new()).await
    }
    async fn attach(&mut self, run_id: &str) -> Result<(), PortError> {
        let (inner, printer) = (&mut self.inner, self.printer.clone());
        let what = format!("attach to the interrupted apply {run_id}");
        Narrated::step_on(printer, &what, inner.attach(run_id), |_| "applied".into()).await
    }
    async fn outputs(
        &mut self,
    ) -> Result<std::collections::BTreeMap<String, OutputValue>, PortError> {
        let (inner, printer) = (&mut self.inner, self.printer.clone());
        Narrated::step_on(printer, "outputs", inner.outputs(), |o| {
            o.iter()
                .map(|(k, v)| {
                    if v.sensitive {
                        format!("{k}=(sensitive)")
                    } else {
                        format!("{k}={}", v.value)
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .await
    }
    async fn inventory(&mut self) -> Result<Vec<InventoryEntry>, PortError> {
        self.inner.inventory().await
    }
    async fn force_unlock(&mut self, lock_id: &str) -> Result<(), PortError> {
        let (inner, printer) = (&mut self.inner, self.printer.clone());
        Narrated::step_on(
            printer,
            &format!("force-unlock {lock_id}"),
            inner.force_unlock(lock_id),
            |_| String::new(),
        )
        .await
    }
    async fn cleanup(&mut self) -> Result<(), PortError> {
        self.inner.cleanup().await
    }
}

impl Narrated {
    async fn step_on<T>(
        printer: Printer,
        what: &str,
        f: impl std::future::Future<Output = Result<T, PortError>>,
        done: impl FnOnce(&T) -> String,
    ) -> Result<T, PortError> {
        let start = Instant::now();
        printer.start_spinner(what);
        let result = f.await;
        printer.stop_spinner();
        let elapsed = start.elapsed();
        tracing::debug!(
            command = what,
            elapsed_ms = elapsed.as_secs_f64() * 1000.0,
            ok = result.is_ok(),
            "runner command"
        );
        let time = if elapsed >= Duration::from_millis(500) {
            format!(" ({:.1}s)", elapsed.as_secs_f64())
        } else {
            String::new()
        };
        match &result {
            Ok(v) => {
                let extra = done(v);
                printer.step(&format!(
                    "{what}{}{time}",
                    if extra.is_empty() {
                        String::new()
                    } else {
                        format!(": {extra}")
                    }
                ));
            }
            Err(e) => printer.step(&format!("{what} failed{time}: {e}")),
        }
        result
    }
}

/// A CA made for this session, the runner's certificate written where it reads it (`tls_dir`),
/// and the client's side.
fn session_tls() -> Result<(tempfile::TempDir, ClientTls), RunnerStartError> {
    let now = SystemTime::now();
    let day = Duration::from_secs(86_400);
    let pki = Pki::new(now, day, day, Duration::from_secs(3600))
        .map_err(|e| RunnerStartError::Tls(e.to_string()))?;
    let secret = pki
        .runner_secret("local", now)
        .map_err(|e| RunnerStartError::Tls(e.to_string()))?;
    let client = pki
        .client(now)
        .map_err(|e| RunnerStartError::Tls(e.to_string()))?;
    let tls_dir = tempfile::tempdir().map_err(|e| RunnerStartError::Tls(e.to_string()))?;
    for (name, content) in [
        ("ca.crt", &secret.ca_crt),
        ("tls.crt", &secret.tls_crt),
        ("tls.key", &secret.tls_key),
    ] {
        std::fs::write(tls_dir.path().join(name), content)
            .map_err(|e| RunnerStartError::Tls(e.to_string()))?;
    }
    let tls = ClientTls {
        ca_bundle: pki.trust_bundle(),
        cert: client.cert,
        key: client.key,
        server_name: runner_server_name("local"),
    };
    Ok((tls_dir, tls))
}

/// Waits until the runner accepts connections, at most 20 s; an exit says why from its stderr.
async fn wait_ready(
    child: &mut tokio::process::Child,
    endpoint: &str,
    tls: &ClientTls,
) -> Result<(), RunnerStartError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if RunnerClient::connect(endpoint, tls).await.is_ok() {
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut err).await;
            }
            return Err(RunnerStartError::Process(format!(
                "it exited ({status}): {}",
                err.trim()
            )));
        }
        if Instant::now() > deadline {
            return Err(RunnerStartError::Process(
                "it did not accept connections within 20 s".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}
