//! `tranche certs init` and `tranche certs issue` as an admin runs them: files, modes,
//! printed paths and exit statuses.

use std::path::Path;
use std::process::Command;

fn tranche(args: &[&str], certs_env: Option<&Path>) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tranche"));
    cmd.args(args).env_remove("TRANCHE_CERTS");
    if let Some(dir) = certs_env {
        cmd.env("TRANCHE_CERTS", dir);
    }
    let out = cmd.output().expect("tranche runs");
    (
        out.status.code().expect("exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[cfg(unix)]
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn init_then_issue_writes_the_files_and_prints_their_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let ca_dir = tmp.path().join("ca");
    let ca = ca_dir.to_str().unwrap();

    let (code, out, err) = tranche(&["certs", "init", "--dir", ca, "--cluster", "lab"], None);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            ca_dir.join("ca.pem").to_str().unwrap(),
            ca_dir.join("ca.key").to_str().unwrap()
        ]
    );
    #[cfg(unix)]
    assert_eq!(mode(&ca_dir.join("ca.key")), 0o600);

    // A second init is refused (exit 2, message on stderr) until --force.
    let (code, out, err) = tranche(&["certs", "init", "--dir", ca], None);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert!(
        err.starts_with("error: refusing to overwrite") && err.contains("--force"),
        "{err}"
    );
    let (code, _, err) = tranche(&["certs", "init", "--dir", ca, "--force"], None);
    assert_eq!(code, 0, "{err}");

    // A controller certificate into another directory: cert, key and a copy of ca.pem.
    let node_dir = tmp.path().join("node");
    let node = node_dir.to_str().unwrap();
    let (code, out, err) = tranche(
        &[
            "certs",
            "issue",
            "--role",
            "controller",
            "--name",
            "c1",
            "--host",
            "10.0.0.1",
            "--host",
            "ctl1.example.org",
            "--dir",
            ca,
            "--out",
            node,
            "--days",
            "30",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let expect = ["controller-c1.pem", "controller-c1.key", "ca.pem"].map(|f| node_dir.join(f));
    assert_eq!(
        lines,
        expect
            .iter()
            .map(|p| p.to_str().unwrap())
            .collect::<Vec<_>>()
    );
    for p in &expect {
        assert!(p.is_file(), "{}", p.display());
    }
    #[cfg(unix)]
    assert_eq!(mode(&expect[1]), 0o600);
    assert_eq!(
        std::fs::read(&expect[2]).unwrap(),
        std::fs::read(ca_dir.join("ca.pem")).unwrap()
    );

    // $TRANCHE_CERTS is the default directory; the output defaults to it too.
    let (code, out, err) = tranche(
        &["certs", "issue", "--role", "user", "--name", "alice"],
        Some(&ca_dir),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            ca_dir.join("user-alice.pem").to_str().unwrap(),
            ca_dir.join("user-alice.key").to_str().unwrap(),
        ]
    );
    #[cfg(unix)]
    assert_eq!(mode(&ca_dir.join("user-alice.key")), 0o600);
}

#[test]
fn invalid_arguments_exit_2_naming_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().to_str().unwrap();
    assert_eq!(tranche(&["certs", "init", "--dir", ca], None).0, 0);

    let (code, _, err) = tranche(
        &[
            "certs", "issue", "--role", "root", "--name", "x", "--dir", ca,
        ],
        None,
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("controller, agent, admin, operator, user"),
        "{err}"
    );

    let (code, _, err) = tranche(
        &[
            "certs", "issue", "--role", "user", "--name", "Alice", "--dir", ca,
        ],
        None,
    );
    assert_eq!(code, 2);
    assert!(err.starts_with("error: invalid name \"Alice\""), "{err}");

    let (code, _, err) = tranche(
        &[
            "certs", "issue", "--role", "agent", "--name", "n1", "--host", "10.0.0.9", "--dir", ca,
        ],
        None,
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("invalid host") && err.contains("only for controller"),
        "{err}"
    );

    let missing = tmp.path().join("nowhere");
    let (code, _, err) = tranche(
        &[
            "certs",
            "issue",
            "--role",
            "user",
            "--name",
            "bob",
            "--dir",
            missing.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, 2);
    assert!(
        err.starts_with("error: cannot read certificate") && err.contains("ca.pem"),
        "{err}"
    );
}

#[test]
fn completions_cover_every_command() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tranche"))
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for cmd in [
        "submit",
        "jobs",
        "show",
        "cancel",
        "logs",
        "drain",
        "apply",
        "controllers",
        "dev",
    ] {
        assert!(text.contains(cmd), "no completion for {cmd}");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tranche"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn revoke_writes_the_crl_keeps_entries_and_refuses_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().to_str().unwrap();
    let crl = tmp.path().join("crl.pem");
    assert_eq!(tranche(&["certs", "init", "--dir", ca], None).0, 0);
    for name in ["alice", "bob"] {
        let (code, _, err) = tranche(
            &[
                "certs", "issue", "--dir", ca, "--role", "user", "--name", name,
            ],
            None,
        );
        assert_eq!(code, 0, "{err}");
    }
    let alice = tmp.path().join("user-alice.pem");
    let (code, out, err) = tranche(
        &[
            "certs",
            "revoke",
            "--ca-dir",
            ca,
            "--cert",
            alice.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), crl.to_str().unwrap());
    assert!(
        err.contains("user:alice") && err.contains("1 certificate(s), CRL number 1"),
        "{err}"
    );
    // The second revocation keeps the first; $TRANCHE_CERTS names the CA directory.
    let bob = tmp.path().join("user-bob.pem");
    let (code, _, err) = tranche(
        &["certs", "revoke", "--cert", bob.to_str().unwrap()],
        Some(tmp.path()),
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("2 certificate(s), CRL number 2"), "{err}");
    let (code, _, err) = tranche(
        &[
            "certs",
            "revoke",
            "--dir",
            ca,
            "--cert",
            alice.to_str().unwrap(),
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("revoked already"), "{err}");

    // Bad input: exit 2, the field and its rule named, the list untouched.
    let before = std::fs::read(&crl).unwrap();
    let (code, out, err) = tranche(&["certs", "revoke", "--dir", ca, "--serial", "xyz"], None);
    assert_eq!((code, out.as_str()), (2, ""));
    assert!(
        err.contains("invalid serial \"xyz\"") && err.contains("hex"),
        "{err}"
    );
    let (code, _, err) = tranche(&["certs", "revoke", "--dir", ca], None);
    assert_eq!(code, 2);
    assert!(err.contains("--cert") && err.contains("--serial"), "{err}");
    let (code, _, err) = tranche(
        &["certs", "revoke", "--dir", ca, "--cert", "/nonexistent.pem"],
        None,
    );
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent.pem"), "{err}");
    assert_eq!(std::fs::read(&crl).unwrap(), before);
}
