//! The working directory of a run: the extracted source and the files tfops generates.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Component, Path, PathBuf};

use tfops_core::source::{ExtractLimits, extract};

/// Why the working directory could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum WorkdirError {
    /// The archive was refused or could not be extracted.
    #[error("extracting the source archive")]
    Extract(#[from] tfops_core::source::ExtractError),
    /// `spec.path` does not exist in the source.
    #[error("path {0:?} does not exist in the source")]
    MissingPath(String),
    /// A file mapping or path leaves its directory.
    #[error("path {0:?} must be relative and stay inside its directory")]
    Escapes(String),
    /// The variables are not a JSON object.
    #[error("variables must be a JSON object: {0}")]
    BadVars(String),
    /// Writing a file failed.
    #[error("writing {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> WorkdirError + '_ {
    move |source| WorkdirError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A relative path that stays inside its base, or an error naming it.
pub fn inside(base: &Path, relative: &str) -> Result<PathBuf, WorkdirError> {
    let p = Path::new(relative);
    if relative.is_empty()
        || p.components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(WorkdirError::Escapes(relative.to_string()));
    }
    Ok(base.join(p))
}

/// Quotes a string for HCL: JSON escapes plus `${` and `%{`, which HCL would interpolate.
pub fn hcl_string(value: &str) -> String {
    let json = serde_json::Value::String(value.to_string()).to_string();
    json.replace("${", "$${").replace("%{", "%%{")
}

/// The Kubernetes backend block: state in `tfstate-<workspace>-<suffix>` in `namespace`;
/// with `in_cluster`, the Pod's in-cluster configuration, or `kubeconfig` when the runner was
/// given one in its place.
pub fn kubernetes_backend(
    suffix: &str,
    namespace: &str,
    in_cluster: bool,
    kubeconfig: Option<&Path>,
    labels: &BTreeMap<String, String>,
) -> String {
    let mut out = String::from("terraform {\n  backend \"kubernetes\" {\n");
    out.push_str(&format!("    secret_suffix     = {}\n", hcl_string(suffix)));
    out.push_str(&format!(
        "    namespace         = {}\n",
        hcl_string(namespace)
    ));
    match kubeconfig.filter(|_| in_cluster) {
        Some(path) => out.push_str(&format!(
            "    config_path       = {}\n",
            hcl_string(&path.to_string_lossy())
        )),
        None => out.push_str(&format!("    in_cluster_config = {in_cluster}\n")),
    }
    if !labels.is_empty() {
        out.push_str("    labels = {\n");
        for (k, v) in labels {
            out.push_str(&format!("      {} = {}\n", hcl_string(k), hcl_string(v)));
        }
        out.push_str("    }\n");
    }
    out.push_str("  }\n}\n");
    out
}

/// Where a run's files go.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `<root>/<namespace>_<name>`: the extracted source (`_` occurs in neither a namespace
    /// nor a name, so no two objects share a directory).
    pub source_dir: PathBuf,
    /// The configuration directory (`source_dir/<path>`).
    pub config_dir: PathBuf,
    /// The runner's home directory (file mappings with `location: home`).
    pub home_dir: PathBuf,
    /// The CLI configuration file, when one is given.
    pub cli_config: PathBuf,
    /// `<root>/<namespace>_<name>.state`: a state handed to the runner
    /// ([`crate::handed`]), outside the source.
    pub state_dir: PathBuf,
}

impl Layout {
    /// The layout for an object under `root`.
    ///
    /// # Errors
    /// [`WorkdirError::Escapes`] when `path` leaves the source.
    pub fn new(
        root: &Path,
        home: &Path,
        namespace: &str,
        name: &str,
        path: &str,
    ) -> Result<Self, WorkdirError> {
        let source_dir = root.join(format!("{namespace}_{name}"));
        let config_dir = if path.is_empty() {
            source_dir.clone()
        } else {
            inside(&source_dir, path)?
        };
        Ok(Self {
            cli_config: root.join(format!("{namespace}_{name}.tfrc")),
            state_dir: root.join(format!("{namespace}_{name}.state")),
            source_dir,
            config_dir,
            home_dir: home.to_path_buf(),
        })
    }
}

/// A file to write, from a file mapping.
pub struct MappedFile<'a> {
    /// In the home directory instead of the configuration directory.
    pub home: bool,
    /// Relative path.
    pub path: &'a str,
    /// Content.
    pub content: &'a [u8],
}

/// Extracts the archive and writes the generated files. Replaces a previous working directory.
///
/// # Errors
/// A [`WorkdirError`] naming what failed.
pub fn prepare(
    layout: &Layout,
    archive: &Path,
    backend_override: Option<&str>,
    vars_json: &str,
    files: &[MappedFile<'_>],
    cli_config: &[u8],
) -> Result<(), WorkdirError> {
    if layout.source_dir.exists() {
        fs::remove_dir_all(&layout.source_dir).map_err(io(&layout.source_dir))?;
    }
    let file = fs::File::open(archive).map_err(io(archive))?;
    extract(file, &layout.source_dir, ExtractLimits::default())?;
    if !layout.config_dir.is_dir() {
        let shown = layout
            .config_dir
            .strip_prefix(&layout.source_dir)
            .unwrap_or(&layout.config_dir);
        return Err(WorkdirError::MissingPath(shown.display().to_string()));
    }
    if let Some(block) = backend_override {
        let p = layout.config_dir.join("backend_override.tf");
        fs::write(&p, block).map_err(io(&p))?;
    }
    let vars: serde_json::Value = if vars_json.trim().is_empty() {
        serde_json::Value::Object(Default::default())
    } else {
        serde_json::from_str(vars_json).map_err(|e| WorkdirError::BadVars(e.to_string()))?
    };
    if !vars.is_object() {
        return Err(WorkdirError::BadVars("not an object".into()));
    }
    let p = layout.config_dir.join("generated.auto.tfvars.json");
    fs::write(&p, vars.to_string()).map_err(io(&p))?;
    for f in files {
        let base = if f.home {
            &layout.home_dir
        } else {
            &layout.config_dir
        };
        let p = inside(base, f.path)?;
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).map_err(io(parent))?;
        }
        write_private(&p, f.content)?;
    }
    if !cli_config.is_empty() {
        write_private(&layout.cli_config, cli_config)?;
    }
    Ok(())
}

fn write_private(path: &Path, content: &[u8]) -> Result<(), WorkdirError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io(path))?;
    f.write_all(content).map_err(io(path))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn objects_whose_dashed_names_agree_get_different_directories() {
        let root = Path::new("/w");
        let home = Path::new("/h");
        let a = Layout::new(root, home, "team-a", "vpc", "").unwrap();
        let b = Layout::new(root, home, "team", "a-vpc", "").unwrap();
        assert_ne!(a.source_dir, b.source_dir);
        assert_ne!(a.cli_config, b.cli_config);
    }

    #[test]
    fn hcl_strings_cannot_interpolate_or_break_out() {
        assert_eq!(hcl_string("a\"b"), "\"a\\\"b\"");
        assert_eq!(hcl_string("${x}"), "\"$${x}\"");
        assert_eq!(hcl_string("%{if}"), "\"%%{if}\"");
    }

    #[test]
    fn mapped_paths_stay_inside() {
        let base = Path::new("/w");
        assert!(inside(base, "creds/a.json").is_ok());
        for bad in ["../x", "/etc/passwd", "a/../../x", ""] {
            assert!(inside(base, bad).is_err(), "{bad}");
        }
    }
}

#[cfg(test)]
mod prepare_tests {
    use super::*;

    fn archive(tree: &Path) -> tempfile::NamedTempFile {
        let mut out = tempfile::NamedTempFile::new().unwrap_or_else(|e| panic!("{e}"));
        tfops_core::source::build_archive(tree, None, out.as_file_mut())
            .unwrap_or_else(|e| panic!("{e}"));
        out
    }

    #[test]
    fn writes_backend_variables_files_and_cli_config() {
        let tree = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fs::create_dir(tree.path().join("infra")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(tree.path().join("infra/main.tf"), "").unwrap_or_else(|e| panic!("{e}"));
        let a = archive(tree.path());
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let home = root.path().join("home");
        let layout = Layout::new(root.path(), &home, "team-a", "vpc", "infra")
            .unwrap_or_else(|e| panic!("{e}"));
        let backend = kubernetes_backend(
            "vpc",
            "team-a",
            true,
            None,
            &BTreeMap::from([("team".to_string(), "net".to_string())]),
        );
        // A kubeconfig given to the runner replaces the in-cluster configuration.
        let given = kubernetes_backend(
            "vpc",
            "team-a",
            true,
            Some(Path::new("/pod/kubeconfig")),
            &BTreeMap::new(),
        );
        assert!(given.contains("config_path       = \"/pod/kubeconfig\""));
        assert!(!given.contains("in_cluster_config"));
        let files = [
            MappedFile {
                home: false,
                path: "creds/sa.json",
                content: b"{}",
            },
            MappedFile {
                home: true,
                path: ".kube/config",
                content: b"kubeconfig",
            },
        ];
        prepare(
            &layout,
            a.path(),
            Some(&backend),
            r#"{"size": 3, "tags": {"a": "b"}}"#,
            &files,
            b"credentials {}",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let dir = root.path().join("team-a_vpc/infra");
        let written = fs::read_to_string(dir.join("backend_override.tf")).unwrap_or_default();
        assert!(written.contains("backend \"kubernetes\""));
        assert!(written.contains("secret_suffix     = \"vpc\""));
        assert!(written.contains("in_cluster_config = true"));
        assert!(written.contains("\"team\" = \"net\""));
        let vars: serde_json::Value = serde_json::from_str(
            &fs::read_to_string(dir.join("generated.auto.tfvars.json")).unwrap_or_default(),
        )
        .unwrap_or_default();
        assert_eq!(vars["tags"]["a"], "b");
        assert_eq!(
            fs::read(dir.join("creds/sa.json")).unwrap_or_default(),
            b"{}"
        );
        assert_eq!(
            fs::read(home.join(".kube/config")).unwrap_or_default(),
            b"kubeconfig"
        );
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&layout.cli_config)
            .map(|m| m.permissions().mode() & 0o777)
            .unwrap_or(0);
        assert_eq!(mode, 0o600, "secrets are written private");
    }

    #[test]
    fn refuses_what_it_cannot_do_safely() {
        let tree = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        fs::write(tree.path().join("main.tf"), "").unwrap_or_else(|e| panic!("{e}"));
        let a = archive(tree.path());
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let layout = Layout::new(root.path(), root.path(), "ns", "x", "missing")
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            matches!(prepare(&layout, a.path(), None, "{}", &[], b""), Err(WorkdirError::MissingPath(p)) if p == "missing")
        );
        let layout =
            Layout::new(root.path(), root.path(), "ns", "x", "").unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            prepare(&layout, a.path(), None, "[1]", &[], b""),
            Err(WorkdirError::BadVars(_))
        ));
        let escape = [MappedFile {
            home: true,
            path: "../../etc/cron.d/x",
            content: b"",
        }];
        assert!(matches!(
            prepare(&layout, a.path(), None, "{}", &escape, b""),
            Err(WorkdirError::Escapes(_))
        ));
        assert!(Layout::new(root.path(), root.path(), "ns", "x", "../up").is_err());
    }
}
