//! A state handed to the runner read-only (a pull request's plan): the controller read it and
//! sent it with the setup, so the runner Pod needs no Kubernetes identity at all. Terraform
//! gets a local backend holding that state, outside the source directory, and the runner runs
//! only what reads it: nothing it does can reach the object's real state.

use std::fs;
use std::path::Path;

use crate::proto::{plan, run_request::Command};
use crate::workdir::{Layout, WorkdirError, hcl_string};

/// The backend block of a handed state: Terraform's local backend, its files under
/// `layout.state_dir` (never in the source, whose own `terraform.tfstate` files count for
/// nothing).
pub fn local_backend(layout: &Layout) -> String {
    let dir = &layout.state_dir;
    format!(
        "terraform {{\n  backend \"local\" {{\n    path          = {}\n    workspace_dir = {}\n  }}\n}}\n",
        hcl_string(&dir.join("terraform.tfstate").to_string_lossy()),
        hcl_string(&dir.join("workspaces").to_string_lossy()),
    )
}

/// The largest state unpacked: a Secret holds at most 1 MiB of gzip, and Terraform's JSON
/// compresses well, but not without bound.
pub const MAX_STATE: u64 = 256 * 1024 * 1024;

/// Writes the state `gzip` holds where the local backend of [`local_backend`] reads
/// `workspace` from (empty: the workspace has none yet, and nothing is written). Replaces
/// what an earlier setup left.
///
/// # Errors
/// [`WorkdirError::Io`] (a state that is not gzip, or over [`MAX_STATE`], among them), or
/// [`WorkdirError::Escapes`] for a workspace name that is not one path component.
pub fn write_state(layout: &Layout, workspace: &str, gzip: &[u8]) -> Result<(), WorkdirError> {
    let dir = &layout.state_dir;
    if dir.exists() {
        fs::remove_dir_all(dir).map_err(io(dir))?;
    }
    fs::create_dir_all(dir).map_err(io(dir))?;
    if gzip.is_empty() {
        return Ok(());
    }
    let state = gunzip(gzip).map_err(io(Path::new("the handed state")))?;
    let file = if workspace.is_empty() || workspace == "default" {
        dir.join("terraform.tfstate")
    } else {
        if workspace.contains('/') {
            return Err(WorkdirError::Escapes(workspace.to_string()));
        }
        let ws = crate::workdir::inside(&dir.join("workspaces"), workspace)?;
        fs::create_dir_all(&ws).map_err(io(&ws))?;
        ws.join("terraform.tfstate")
    };
    fs::write(&file, state).map_err(io(&file))
}

fn gunzip(stored: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(stored)
        .take(MAX_STATE + 1)
        .read_to_end(&mut out)?;
    if out.len() as u64 > MAX_STATE {
        return Err(std::io::Error::other(format!(
            "over {MAX_STATE} bytes unpacked"
        )));
    }
    Ok(out)
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorkdirError + '_ {
    move |source| WorkdirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Whether a runner handed its state may run `command`: only what reads the state (`init`,
/// a workspace selection, a speculative plan, showing it, reading outputs and resources).
/// Applying, destroying, unlocking, storing a plan and writing or deleting for the object
/// are refused: the object's real state and stores are not this runner's to touch.
pub fn allows(command: &Command) -> bool {
    match command {
        Command::Init(_)
        | Command::SelectWorkspace(_)
        | Command::Show(_)
        | Command::Output(_)
        | Command::Inventory(_) => true,
        Command::Plan(p) => p.kind == plan::Kind::Speculative as i32,
        Command::Apply(_)
        | Command::Destroy(_)
        | Command::ForceUnlock(_)
        | Command::SavePlan(_)
        | Command::DeletePlan(_)
        | Command::WriteOutputs(_)
        | Command::DeleteOutputs(_)
        | Command::DeleteState(_) => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::proto;

    fn gzip(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(data).unwrap();
        gz.finish().unwrap()
    }

    fn layout(root: &Path) -> Layout {
        Layout::new(root, &root.join("home"), "team-a", "vpc", "").unwrap()
    }

    #[test]
    fn the_state_goes_where_the_local_backend_reads_each_workspace() {
        let root = tempfile::tempdir().unwrap();
        let l = layout(root.path());
        let block = local_backend(&l);
        assert!(block.contains("backend \"local\""), "{block}");
        assert!(
            !l.state_dir.starts_with(&l.source_dir),
            "outside the source"
        );

        write_state(&l, "default", &gzip(b"{\"serial\":1}")).unwrap();
        assert_eq!(
            fs::read(l.state_dir.join("terraform.tfstate")).unwrap(),
            b"{\"serial\":1}"
        );
        write_state(&l, "staging", &gzip(b"{\"serial\":2}")).unwrap();
        assert!(!l.state_dir.join("terraform.tfstate").exists(), "replaced");
        assert_eq!(
            fs::read(l.state_dir.join("workspaces/staging/terraform.tfstate")).unwrap(),
            b"{\"serial\":2}"
        );
        write_state(&l, "default", b"").unwrap();
        assert!(l.state_dir.is_dir() && fs::read_dir(&l.state_dir).unwrap().count() == 0);
        assert!(write_state(&l, "../x", &gzip(b"{}")).is_err());
        assert!(write_state(&l, "a/b", &gzip(b"{}")).is_err());
        let refused = write_state(&l, "default", b"{}").unwrap_err();
        assert!(
            matches!(refused, WorkdirError::Io { .. }),
            "not gzip: {refused}"
        );
    }

    #[test]
    fn only_what_reads_the_state_is_allowed() {
        let plan = |kind: proto::plan::Kind| {
            Command::Plan(proto::Plan {
                kind: kind as i32,
                ..Default::default()
            })
        };
        assert!(allows(&plan(proto::plan::Kind::Speculative)));
        for kind in [
            proto::plan::Kind::Normal,
            proto::plan::Kind::Destroy,
            proto::plan::Kind::RefreshOnly,
        ] {
            assert!(!allows(&plan(kind)), "{kind:?}");
        }
        assert!(allows(&Command::Init(proto::Init {})));
        assert!(allows(&Command::Show(proto::Show {})));
        assert!(!allows(&Command::Apply(proto::Apply {})));
        assert!(!allows(
            &Command::ForceUnlock(proto::ForceUnlock::default())
        ));
        assert!(!allows(
            &Command::DeleteState(proto::DeleteState::default())
        ));
        assert!(!allows(&Command::SavePlan(proto::SavePlan::default())));
    }
}
