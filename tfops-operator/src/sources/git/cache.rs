//! The cache of bare repositories, bounded in size: the least recently used go first.

use std::path::{Path, PathBuf};

use super::GitSource;

pub(super) fn dir_size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

impl GitSource {
    /// Removes least recently used repositories until the cache fits its limit, never `keep`
    /// nor one in use by another fetch.
    pub(super) fn evict(&self, keep: &Path) {
        let Ok(entries) = std::fs::read_dir(&self.cache_root) else {
            return;
        };
        let mut repos: Vec<(std::time::SystemTime, u64, PathBuf)> = entries
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| {
                let used = std::fs::metadata(e.path().join(".last-used"))
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                (used, dir_size(&e.path()), e.path())
            })
            .collect();
        let mut total: u64 = repos.iter().map(|r| r.1).sum();
        repos.sort();
        let busy: Vec<PathBuf> = {
            let locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
            locks
                .iter()
                .filter(|(_, l)| l.try_lock().is_err())
                .map(|(url, _)| self.repo_dir(url))
                .collect()
        };
        for (_, size, path) in repos {
            if total <= self.limit {
                break;
            }
            if path == keep || busy.contains(&path) {
                continue;
            }
            if std::fs::remove_dir_all(&path).is_ok() {
                total = total.saturating_sub(size);
            }
        }
    }
}
