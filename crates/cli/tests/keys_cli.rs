//! `tranche keys`: access keys for the AWS Batch-compatible endpoint, issued, listed
//! and revoked through the real CLI against a `tranche dev` cluster (whose controllers
//! share the key secret file it writes beside its certificates).

mod common;

use common::{tranche, Dev};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn keys_are_issued_listed_and_revoked_per_identity() {
    let dev = Dev::start("alice");
    let (alice, admin) = (dev.user.clone(), dev.admin.clone());
    let secret_file = dev.dir.join("certs").join("key-secret");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&secret_file)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{}", secret_file.display());
    }

    // `tranche dev` issued her a key when it started (the one its exports carry).
    let listed = |who: &str| -> Vec<serde_json::Value> {
        let out = tranche(who, &["keys", "list", "--user", "alice", "--json"]);
        assert!(out.status.success(), "{out:?}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v.as_array().unwrap().clone()
    };
    let before = listed(&admin).len();
    assert_eq!(before, 1);

    // An admin issues one for alice.
    let out = tranche(&admin, &["keys", "issue", "--user", "alice", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let k: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let by_admin = k["access_key_id"].as_str().unwrap().to_string();
    assert!(by_admin.starts_with("TK") && by_admin.len() == 20, "{k}");
    assert_eq!(
        (k["user"].as_str(), k["role"].as_str()),
        (Some("alice"), Some("user"))
    );
    assert_eq!(k["secret_access_key"].as_str().unwrap().len(), 40, "{k}");

    // Alice issues one for herself: the export line on stdout, the rest for people.
    let out = tranche(&alice, &["keys", "issue"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = text(&out.stdout);
    let export = stdout
        .trim()
        .strip_prefix("export AWS_ACCESS_KEY_ID=")
        .unwrap_or_else(|| panic!("{stdout}"));
    let (own, secret) = export.split_once(" AWS_SECRET_ACCESS_KEY=").unwrap();
    assert_eq!(secret.len(), 40, "{stdout}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains(own) && stderr.contains(secret), "{stderr}");
    assert!(stderr.contains("shown only this once"), "{stderr}");

    // She may not issue for bob, nor an operator key.
    let out = tranche(&alice, &["keys", "issue", "--user", "bob"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("only for itself"), "{out:?}");
    let out = tranche(&alice, &["keys", "issue", "--role", "operator"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let out = tranche(&alice, &["keys", "issue", "--role", "root"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    // Her list shows both keys, active; an admin's key for bob is not hers to see.
    let out = tranche(&admin, &["keys", "issue", "--user", "bob", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let out = tranche(&alice, &["keys", "list"]);
    assert!(out.status.success(), "{out:?}");
    let table = text(&out.stdout);
    assert!(table.starts_with("ID "), "{table}");
    for id in [&by_admin, &own.to_string()] {
        let row = table.lines().find(|l| l.starts_with(id.as_str()));
        let row = row.unwrap_or_else(|| panic!("{id} missing:\n{table}"));
        assert!(row.contains("alice") && row.ends_with("active"), "{row}");
    }
    assert!(!table.contains("bob"), "{table}");
    let out = tranche(&alice, &["keys", "list", "--user", "bob"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");

    // She revokes her own; the list says so. She cannot revoke bob's.
    let out = tranche(&alice, &["keys", "revoke", own]);
    assert!(out.status.success(), "{out:?}");
    let keys = listed(&admin);
    assert_eq!(keys.len(), before + 2, "{keys:?}");
    let mine = keys.iter().find(|k| k["access_key_id"] == own).unwrap();
    assert!(mine["revoked_at"].as_u64().is_some(), "{mine}");
    let table = text(&tranche(&alice, &["keys", "list"]).stdout);
    let row = table.lines().find(|l| l.starts_with(own)).unwrap();
    assert!(row.contains("revoked "), "{row}");
    let out = tranche(&admin, &["keys", "list", "--json"]);
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let bobs = all
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["user"] == "bob")
        .unwrap();
    let out = tranche(
        &alice,
        &["keys", "revoke", bobs["access_key_id"].as_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("only its own"), "{out:?}");
}

/// A controller whose key secret file others may read, or which is too short, does not
/// start; its error names the file and the rule.
#[test]
fn a_controller_refuses_an_unsafe_or_short_key_secret_file() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // `tranched` beside the CLI (`cargo build --bins` builds it).
    let tranched = tranche_local::find_tranched();
    let secret = dir.path().join("key-secret");
    let mut opts = tranche_local::LocalOptions::new(tranched);
    opts.http = false;
    opts.extra_config = format!("[aws]\nkey_secret_file = \"{}\"\n", secret.display());
    let mut c = tranche_local::LocalCluster::create(dir.path(), 1, opts).unwrap();
    for (content, mode, rule) in [
        (
            &b"0123456789abcdef0123456789abcdef0123456789"[..],
            0o644,
            "0600",
        ),
        (&b"too short\n"[..], 0o600, "at least 32 bytes"),
    ] {
        std::fs::write(&secret, content).unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(mode)).unwrap();
        let _ = std::fs::remove_file(&c.controllers[0].log);
        c.start(0).unwrap();
        let status = c.controllers[0].child.as_mut().unwrap().wait().unwrap();
        assert!(!status.success(), "started with {mode:o}");
        let log = std::fs::read_to_string(&c.controllers[0].log).unwrap();
        assert!(
            log.contains(&secret.display().to_string()) && log.contains(rule),
            "{log}"
        );
    }
}
