//! `tranche token issue`: a token for the config's certificate that a controller's
//! verifier accepts as that identity, for the asked time; bad asks refused with a
//! message.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use tranche_tls::{token, CertVerifier, Role};

#[test]
fn issue_prints_a_token_for_the_configs_identity() {
    let tmp = tempfile::tempdir().unwrap();
    let certs = tmp.path();
    tranche_tls::init_ca(certs, "t", false).unwrap();
    let ctl = tranche_tls::issue(certs, certs, Role::Controller, "c1", &[], 1).unwrap();
    let alice = tranche_tls::issue(certs, certs, Role::User, "alice", &[], 1).unwrap();
    let cfg = tmp.path().join("alice.toml");
    std::fs::write(
        &cfg,
        format!(
            "controllers = [\"127.0.0.1:7100\"]\nhttp = [\"https://127.0.0.1:7443\"]\n[tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
            alice.ca.display(),
            alice.cert.display(),
            alice.key.display()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_tranche"))
            .args(args)
            .env("TRANCHE_CONFIG", &cfg)
            .output()
            .unwrap()
    };
    let out = run(&["token", "issue", "--ttl", "2h"]);
    assert!(out.status.success(), "{out:?}");
    let t = String::from_utf8(out.stdout).unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let v = CertVerifier::new(&ctl).unwrap();
    let h = token::verify_token(&v, t.trim(), now).unwrap();
    assert_eq!(h.identity.to_string(), "user:alice");
    assert!((now + 7200 - 5..=now + 7200 + 5).contains(&h.expires));
    assert!(token::verify_token(&v, t.trim(), now + 7201).is_err());

    let out = run(&["token", "issue", "--ttl", "8d"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("at most 7 days"),
        "{out:?}"
    );
    let out = run(&["token", "issue", "--ttl", "soon"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--ttl"),
        "{out:?}"
    );
}
