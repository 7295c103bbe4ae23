//! Shared by the CLI tests: the `tranche` binary, and a `tranche dev` cluster.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// Runs the `tranche` CLI against the cluster config `config`, with its cache (the
/// leader it last used) in `cache/` beside the config rather than the user's.
pub fn tranche(config: &str, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tranche"))
        .args(args)
        .env("TRANCHE_CONFIG", config)
        .env("XDG_CACHE_HOME", cache_dir(config))
        .output()
        .unwrap()
}

/// Runs the `tranche` CLI against `config`, which must succeed; its stdout, trimmed.
pub fn ok(config: &str, args: &[&str]) -> String {
    let out = tranche(config, args);
    assert!(out.status.success(), "tranche {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Runs the `tranche` CLI with no cluster: its exit status, stdout and stderr.
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tranche"))
        .args(args)
        .output()
        .expect("tranche runs");
    (
        out.status.code().expect("exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The cache dir [`tranche`] gives the CLI for `config`.
pub fn cache_dir(config: &str) -> PathBuf {
    std::path::Path::new(config)
        .parent()
        .expect("a config file in a dir")
        .join("cache")
}

/// A running `tranche dev`, interrupted (Ctrl-C) when dropped.
pub struct Dev {
    _serial: std::sync::MutexGuard<'static, ()>,
    pub child: Child,
    /// The config it printed (the user's), and the admin's beside it.
    pub user: String,
    pub admin: String,
    /// Its temporary dir.
    pub dir: PathBuf,
}

impl Dev {
    /// Starts `tranche dev` as the user `user` and waits for its `export` line.
    pub fn start(user: &str) -> Dev {
        Dev::start_with(user, &[])
    }

    /// As [`Dev::start`], with more options for `tranche dev`.
    pub fn start_with(user: &str, args: &[&str]) -> Dev {
        // One `tranche dev` at a time in a test binary: each is 3 controllers and 4
        // agents.
        let serial = tranche_local::rig::serial();
        let mut child = Command::new(env!("CARGO_BIN_EXE_tranche"))
            .arg("dev")
            .args(args)
            .env("USER", user)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The first line comes once the cluster is up; a reader thread lets the wait
        // for it end at a deadline.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(BufReader::new(stdout).lines().next());
        });
        let export = match rx.recv_timeout(std::time::Duration::from_secs(120)) {
            Ok(Some(Ok(line))) => line,
            other => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("tranche dev printed no export line within 120 s: {other:?}");
            }
        };
        let user = export
            .strip_prefix("export TRANCHE_CONFIG=")
            .unwrap_or_else(|| panic!("first line is not the export line: {export}"))
            .to_string();
        let dir = std::path::Path::new(&user).parent().unwrap().to_path_buf();
        let admin = dir.join("admin-admin.toml").display().to_string();
        Dev {
            _serial: serial,
            child,
            user,
            admin,
            dir,
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        tranche_local::interrupt(self.child.id());
        let _ = self.child.wait();
    }
}
