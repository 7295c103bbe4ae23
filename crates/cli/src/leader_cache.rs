//! The controller that was leader when this user's CLI last asked, remembered between
//! invocations so that the next command goes to it first.
//!
//! One small file, `$XDG_CACHE_HOME/tranche/leaders` (else `~/.cache/tranche/leaders`),
//! one line per cluster: the cluster's key (its config's controller addresses, sorted,
//! joined by commas), a space, and the leader's client address. The cache is only a
//! hint: an entry names a controller to try first, and only one of the config's own
//! controllers is ever taken from it. A stale entry costs what no cache costs (a
//! follower forwards writes to the leader and serves reads after a barrier); a
//! missing, unreadable or corrupt file is ignored, and failing to write it is not an
//! error. Writes replace the file whole (a temporary file, then a rename), so that
//! concurrent CLIs never see half a file.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// At most this many clusters are remembered (the most recently written first).
const MAX_CLUSTERS: usize = 32;

/// The cache entry of one cluster.
#[derive(Debug, Clone)]
pub struct LeaderCache {
    /// `None`: no cache directory is known (no `$XDG_CACHE_HOME`, no `$HOME`).
    path: Option<PathBuf>,
    key: String,
    controllers: Vec<SocketAddr>,
}

/// `$XDG_CACHE_HOME/tranche/leaders`, else `$HOME/.cache/tranche/leaders`.
fn default_path() -> Option<PathBuf> {
    let abs = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
    let dir = std::env::var_os("XDG_CACHE_HOME")
        .and_then(abs)
        .or_else(|| {
            std::env::var_os("HOME")
                .and_then(abs)
                .map(|h| h.join(".cache"))
        })?;
    Some(dir.join("tranche").join("leaders"))
}

impl LeaderCache {
    /// The entry for the cluster of these controllers, in the user's cache directory.
    pub fn for_cluster(controllers: &[SocketAddr]) -> LeaderCache {
        LeaderCache::at(default_path(), controllers)
    }

    /// The entry for the cluster of these controllers, in the file at `path`.
    pub fn at(path: Option<PathBuf>, controllers: &[SocketAddr]) -> LeaderCache {
        let mut addrs: Vec<String> = controllers.iter().map(|a| a.to_string()).collect();
        addrs.sort();
        addrs.dedup();
        LeaderCache {
            path,
            key: addrs.join(","),
            controllers: controllers.to_vec(),
        }
    }

    #[cfg(test)]
    fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The position in the config's controller list of the remembered leader, if the
    /// file names one of them for this cluster.
    pub fn get(&self) -> Option<usize> {
        let text = std::fs::read_to_string(self.path.as_ref()?).ok()?;
        let addr: SocketAddr = text
            .lines()
            .find_map(|l| l.strip_prefix(self.key.as_str())?.strip_prefix(' '))?
            .trim()
            .parse()
            .ok()?;
        self.controllers.iter().position(|a| *a == addr)
    }

    /// Remembers controller `idx` (a position in the config's list) as this cluster's
    /// leader. Best effort: a cache that cannot be written is left as it is.
    pub fn put(&self, idx: usize) {
        let (Some(path), Some(addr)) = (&self.path, self.controllers.get(idx)) else {
            return;
        };
        let _ = self.write(path, *addr);
    }

    fn write(&self, path: &Path, addr: SocketAddr) -> std::io::Result<()> {
        let old = std::fs::read_to_string(path).unwrap_or_default();
        let mine = format!("{} {addr}", self.key);
        if old.lines().next() == Some(mine.as_str()) {
            return Ok(());
        }
        let mut lines = vec![mine];
        lines.extend(
            old.lines()
                .filter(|l| {
                    // Other clusters' well-formed entries are kept; this cluster's old
                    // entry and anything unreadable are dropped.
                    matches!(l.split_once(' '), Some((k, a))
                        if k != self.key && !k.is_empty() && a.parse::<SocketAddr>().is_ok())
                })
                .take(MAX_CLUSTERS - 1)
                .map(str::to_string),
        );
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".leaders.{}.tmp", std::process::id()));
        std::fs::write(&tmp, lines.join("\n") + "\n")?;
        std::fs::rename(&tmp, path).inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs(ports: &[u16]) -> Vec<SocketAddr> {
        ports
            .iter()
            .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
            .collect()
    }

    fn cache(dir: &Path, ports: &[u16]) -> LeaderCache {
        LeaderCache::at(Some(dir.join("tranche/leaders")), &addrs(ports))
    }

    #[test]
    fn remembers_the_leader_of_each_cluster() {
        let d = tempfile::tempdir().unwrap();
        let a = cache(d.path(), &[7101, 7102, 7103]);
        let b = cache(d.path(), &[8101, 8102]);
        assert_eq!(a.get(), None);
        a.put(2);
        b.put(0);
        assert_eq!(a.get(), Some(2));
        assert_eq!(b.get(), Some(0));
        // The same cluster listed in another order is the same cluster.
        assert_eq!(cache(d.path(), &[7103, 7101, 7102]).get(), Some(0));
        a.put(1);
        assert_eq!(a.get(), Some(1));
        assert_eq!(b.get(), Some(0));
        let text = std::fs::read_to_string(a.path().unwrap()).unwrap();
        assert_eq!(text.lines().count(), 2, "one line per cluster: {text}");
    }

    #[test]
    fn an_entry_naming_no_controller_of_the_config_is_ignored() {
        let d = tempfile::tempdir().unwrap();
        let c = cache(d.path(), &[7101, 7102, 7103]);
        std::fs::create_dir_all(c.path().unwrap().parent().unwrap()).unwrap();
        // The key is right, but the address is not one of the config's controllers
        // (the config changed, or someone wrote the file by hand).
        std::fs::write(c.path().unwrap(), format!("{} 10.9.9.9:7100\n", c.key)).unwrap();
        assert_eq!(c.get(), None);
    }

    #[test]
    fn a_corrupt_file_is_harmless_and_is_replaced() {
        let d = tempfile::tempdir().unwrap();
        let c = cache(d.path(), &[7101, 7102, 7103]);
        let path = c.path().unwrap().to_path_buf();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        for junk in [
            &b"\xff\xfe not utf-8"[..],
            b"",
            b"\n\n",
            b"127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103",
            b"127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103 not-an-address",
            b"127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103127.0.0.1:7101",
        ] {
            std::fs::write(&path, junk).unwrap();
            assert_eq!(c.get(), None, "{:?}", String::from_utf8_lossy(junk));
            c.put(1);
            assert_eq!(c.get(), Some(1));
        }
        // Unreadable lines are dropped when the file is written.
        std::fs::write(&path, "garbage\nmore garbage here\n").unwrap();
        c.put(2);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("{} 127.0.0.1:7103\n", c.key));
    }

    #[test]
    fn a_cache_that_cannot_be_written_is_not_an_error() {
        let d = tempfile::tempdir().unwrap();
        // The cache's directory is a file.
        std::fs::write(d.path().join("tranche"), "").unwrap();
        let c = cache(d.path(), &[7101]);
        c.put(0);
        assert_eq!(c.get(), None);
        // No cache directory at all.
        let none = LeaderCache::at(None, &addrs(&[7101]));
        none.put(0);
        assert_eq!(none.get(), None);
    }

    #[test]
    fn a_position_outside_the_list_is_not_written() {
        let d = tempfile::tempdir().unwrap();
        let c = cache(d.path(), &[7101, 7102]);
        c.put(5);
        assert_eq!(c.get(), None);
        assert!(!c.path().unwrap().exists());
    }

    #[test]
    fn the_file_keeps_a_bounded_number_of_clusters() {
        let d = tempfile::tempdir().unwrap();
        for p in 0..(MAX_CLUSTERS as u16 + 10) {
            cache(d.path(), &[9000 + p]).put(0);
        }
        let newest = cache(d.path(), &[9000 + MAX_CLUSTERS as u16 + 9]);
        assert_eq!(newest.get(), Some(0));
        let text = std::fs::read_to_string(newest.path().unwrap()).unwrap();
        assert_eq!(text.lines().count(), MAX_CLUSTERS);
        assert_eq!(
            cache(d.path(), &[9000]).get(),
            None,
            "the oldest is forgotten"
        );
    }
}
