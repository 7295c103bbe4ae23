//! The cluster CA and issued certificates: files, modes, refusals, identities.

use std::path::Path;

use tranche_tls::{
    identity_of_cert, init_ca, issue, issue_valid_between, load_certs, revoke, Identity,
    RevokeTarget, Role, TlsError, TlsFiles, CRL_FILE,
};

#[cfg(unix)]
fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn init_ca_writes_the_ca_with_a_private_key_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let ca = init_ca(dir.path(), "lab", false).unwrap();
    assert_eq!(ca, dir.path().join("ca.pem"));
    assert!(ca.exists());
    #[cfg(unix)]
    assert_eq!(mode(&dir.path().join("ca.key")), 0o600);
    let before = std::fs::read(&ca).unwrap();

    let err = init_ca(dir.path(), "lab", false).unwrap_err();
    assert!(matches!(err, TlsError::AlreadyExists { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("refusing to overwrite") && msg.contains("--force"),
        "{msg}"
    );
    assert_eq!(std::fs::read(&ca).unwrap(), before, "the CA is untouched");

    // With force, a new CA replaces the old one, and the key stays private even though
    // it is replaced rather than created.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let key = dir.path().join("ca.key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    init_ca(dir.path(), "lab", true).unwrap();
    assert_ne!(std::fs::read(&ca).unwrap(), before);
    #[cfg(unix)]
    assert_eq!(mode(&dir.path().join("ca.key")), 0o600);
}

#[test]
fn init_ca_refuses_when_only_the_key_exists() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.key"), "x").unwrap();
    let err = init_ca(dir.path(), "lab", false).unwrap_err();
    assert!(err.to_string().contains("ca.key"), "{err}");
}

#[test]
fn issue_writes_cert_key_and_ca_copy_with_the_identity_inside() {
    let ca_dir = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    init_ca(ca_dir.path(), "lab", false).unwrap();
    let files = issue(ca_dir.path(), out.path(), Role::User, "alice", &[], 30).unwrap();
    assert_eq!(files, TlsFiles::in_dir(out.path(), Role::User, "alice"));
    assert_eq!(files.cert, out.path().join("user-alice.pem"));
    assert_eq!(files.key, out.path().join("user-alice.key"));
    assert_eq!(
        std::fs::read(&files.ca).unwrap(),
        std::fs::read(ca_dir.path().join("ca.pem")).unwrap()
    );
    #[cfg(unix)]
    assert_eq!(mode(&files.key), 0o600);
    let der = load_certs(&files.cert).unwrap().remove(0);
    assert_eq!(
        identity_of_cert(&der).unwrap(),
        Identity {
            role: Role::User,
            name: "alice".into()
        }
    );

    // Issued into the CA directory itself: no copy, same layout.
    let files = issue(
        ca_dir.path(),
        ca_dir.path(),
        Role::Agent,
        "gpu-001",
        &[],
        30,
    )
    .unwrap();
    assert_eq!(files.ca, ca_dir.path().join("ca.pem"));
    assert!(files.cert.exists() && files.key.exists());
}

#[test]
fn identity_round_trips_for_every_role() {
    let dir = tempfile::tempdir().unwrap();
    init_ca(dir.path(), "lab", false).unwrap();
    for role in Role::ALL {
        let name = format!("{role}-1.a_b");
        let hosts: Vec<String> = if role == Role::Controller {
            vec!["10.0.0.1".into(), "ctl-1.example.org".into(), "::1".into()]
        } else {
            vec![]
        };
        let files = issue(dir.path(), dir.path(), role, &name, &hosts, 1).unwrap();
        let der = load_certs(&files.cert).unwrap().remove(0);
        let id = identity_of_cert(&der).unwrap();
        assert_eq!(
            id,
            Identity {
                role,
                name: name.clone()
            }
        );
        assert_eq!(id.to_string(), format!("{role}:{name}"));
    }
}

#[test]
fn roles_parse_and_print_lower_case() {
    for role in Role::ALL {
        assert_eq!(role.to_string().parse::<Role>().unwrap(), role);
    }
    assert_eq!("controller".parse::<Role>().unwrap(), Role::Controller);
    let err = "root".parse::<Role>().unwrap_err().to_string();
    assert!(err.contains("role") && err.contains("\"root\""), "{err}");
    for allowed in ["controller", "agent", "admin", "operator", "user"] {
        assert!(err.contains(allowed), "{err}");
    }
    assert!("User".parse::<Role>().is_err());
}

#[test]
fn invalid_names_hosts_and_days_are_rejected_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    init_ca(dir.path(), "lab", false).unwrap();
    for bad in [
        "",
        "Alice",
        "-x",
        ".x",
        "a/b",
        "a b",
        &"a".repeat(64),
        "tranche://x",
    ] {
        let err = issue(dir.path(), dir.path(), Role::User, bad, &[], 30).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, TlsError::InvalidField { field: "name", .. }),
            "{bad:?}: {msg}"
        );
        assert!(
            msg.starts_with("invalid name") && msg.contains("a-z, 0-9"),
            "{msg}"
        );
    }
    issue(dir.path(), dir.path(), Role::User, &"a".repeat(63), &[], 30).unwrap();

    let err = issue(
        dir.path(),
        dir.path(),
        Role::Agent,
        "n1",
        &["10.0.0.1".into()],
        30,
    )
    .unwrap_err();
    assert!(
        matches!(err, TlsError::InvalidField { field: "host", .. }),
        "{err}"
    );
    assert!(err.to_string().contains("only for controller"), "{err}");

    let err = issue(
        dir.path(),
        dir.path(),
        Role::Controller,
        "c1",
        &["bad host!".into()],
        30,
    )
    .unwrap_err();
    assert!(
        matches!(err, TlsError::InvalidField { field: "host", .. }),
        "{err}"
    );

    let err = issue(dir.path(), dir.path(), Role::User, "bob", &[], 0).unwrap_err();
    assert!(
        matches!(
            err,
            TlsError::InvalidField {
                field: "valid_days",
                ..
            }
        ),
        "{err}"
    );
    let err = issue(dir.path(), dir.path(), Role::User, "bob", &[], 100_000).unwrap_err();
    assert!(err.to_string().contains("outlive the CA"), "{err}");

    let err = init_ca(&dir.path().join("x"), "Bad Cluster", false).unwrap_err();
    assert!(err.to_string().starts_with("invalid cluster"), "{err}");
}

#[test]
fn issue_without_a_ca_names_the_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = issue(dir.path(), dir.path(), Role::User, "alice", &[], 30).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with("cannot read certificate ") && msg.contains("ca.pem"),
        "{msg}"
    );
}

#[test]
fn a_ca_key_that_does_not_match_the_ca_certificate_is_refused() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    init_ca(a.path(), "a", false).unwrap();
    init_ca(b.path(), "b", false).unwrap();
    std::fs::copy(b.path().join("ca.key"), a.path().join("ca.key")).unwrap();
    let err = issue(a.path(), a.path(), Role::User, "alice", &[], 30).unwrap_err();
    assert!(
        err.to_string()
            .contains("is not the key of the CA certificate"),
        "{err}"
    );
}

#[test]
fn a_certificate_without_a_role_san_has_no_identity() {
    let dir = tempfile::tempdir().unwrap();
    init_ca(dir.path(), "lab", false).unwrap();
    let ca = load_certs(&dir.path().join("ca.pem")).unwrap().remove(0);
    let err = identity_of_cert(&ca).unwrap_err().to_string();
    assert_eq!(err, "certificate has no tranche:// role SAN");
    let err = identity_of_cert(b"not der").unwrap_err().to_string();
    assert!(err.starts_with("cannot parse certificate"), "{err}");
}

#[test]
fn missing_files_are_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let files = TlsFiles::in_dir(dir.path(), Role::Controller, "c1");
    let err = tranche_tls::server_config(&files).unwrap_err().to_string();
    assert!(
        err.starts_with("cannot read certificate ") && err.contains("controller-c1.pem"),
        "{err}"
    );
    let err = tranche_tls::client_config(&files).unwrap_err().to_string();
    assert!(err.contains("controller-c1.pem"), "{err}");
}

/// The serials a PEM revocation list names, in hex, and its CRL number.
fn listed(crl: &Path) -> (Vec<String>, u64) {
    let ders = tranche_tls::load_crls(crl).unwrap();
    assert_eq!(ders.len(), 1);
    let (_, parsed) = x509_parser::parse_x509_crl(&ders[0]).unwrap();
    let serials = parsed
        .iter_revoked_certificates()
        .map(|r| r.user_certificate.to_str_radix(16))
        .collect();
    let number = parsed.crl_number().unwrap().to_u64_digits();
    (serials, number.first().copied().unwrap_or(0))
}

fn serial_of(cert: &Path) -> String {
    let der = load_certs(cert).unwrap().swap_remove(0);
    let (_, c) = x509_parser::parse_x509_certificate(&der).unwrap();
    c.serial.to_str_radix(16)
}

#[test]
fn revoke_keeps_earlier_entries_and_bumps_the_crl_number() {
    let ca = tempfile::tempdir().unwrap();
    init_ca(ca.path(), "lab", false).unwrap();
    let alice = issue(ca.path(), ca.path(), Role::User, "alice", &[], 30).unwrap();
    let bob = issue(ca.path(), ca.path(), Role::User, "bob", &[], 30).unwrap();

    let r = revoke(ca.path(), &RevokeTarget::Cert(alice.cert.clone())).unwrap();
    assert_eq!(r.crl, ca.path().join(CRL_FILE));
    assert_eq!(r.serial, serial_of(&alice.cert));
    assert_eq!(
        r.identity,
        Some(Identity {
            role: Role::User,
            name: "alice".into()
        })
    );
    assert!(!r.already_revoked);
    assert_eq!((r.revoked, r.crl_number), (1, 1));
    assert_eq!(listed(&r.crl), (vec![serial_of(&alice.cert)], 1));

    // By serial, with colons and upper case, as openssl prints it.
    let bob_serial = serial_of(&bob.cert);
    let padded = format!("{bob_serial:0>40}").to_uppercase();
    let colons: Vec<String> = padded
        .as_bytes()
        .chunks(2)
        .map(|c| String::from_utf8(c.to_vec()).unwrap())
        .collect();
    let r = revoke(ca.path(), &RevokeTarget::Serial(colons.join(":"))).unwrap();
    assert_eq!((r.revoked, r.crl_number), (2, 2));
    assert_eq!(r.identity, None);
    assert_eq!(
        listed(&r.crl),
        (vec![serial_of(&alice.cert), bob_serial.clone()], 2)
    );

    // Again: nothing changes, not even the file.
    let before = std::fs::read(&r.crl).unwrap();
    let again = revoke(ca.path(), &RevokeTarget::Cert(bob.cert.clone())).unwrap();
    assert!(again.already_revoked);
    assert_eq!((again.revoked, again.crl_number), (2, 2));
    assert_eq!(std::fs::read(&r.crl).unwrap(), before);
}

#[test]
fn revoke_refuses_bad_input_naming_the_field_and_rule() {
    let ca = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    init_ca(ca.path(), "lab", false).unwrap();
    init_ca(other.path(), "other", false).unwrap();
    let stranger = issue(other.path(), other.path(), Role::User, "eve", &[], 30).unwrap();

    for bad in ["", "xyz", "0", "0x", &"ab".repeat(21)] {
        let err = revoke(ca.path(), &RevokeTarget::Serial(bad.into())).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(
                err,
                TlsError::InvalidField {
                    field: "serial",
                    ..
                }
            ) && msg.contains("serial number in hex"),
            "{bad:?}: {msg}"
        );
    }
    let err = revoke(ca.path(), &RevokeTarget::Cert(stranger.cert.clone())).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, TlsError::InvalidField { field: "cert", .. })
            && msg.contains("was not issued by the CA"),
        "{msg}"
    );
    let err = revoke(ca.path(), &RevokeTarget::Cert(ca.path().join("nope.pem"))).unwrap_err();
    assert!(err.to_string().contains("nope.pem"), "{err}");
    // A crl.pem signed by another CA is not extended.
    revoke(other.path(), &RevokeTarget::Cert(stranger.cert.clone())).unwrap();
    std::fs::copy(other.path().join(CRL_FILE), ca.path().join(CRL_FILE)).unwrap();
    let err = revoke(ca.path(), &RevokeTarget::Serial("1234".into())).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("crl.pem") && msg.contains("not issued by the CA"),
        "{msg}"
    );
    // Nothing was written for any of these.
    assert_eq!(
        std::fs::read(ca.path().join(CRL_FILE)).unwrap(),
        std::fs::read(other.path().join(CRL_FILE)).unwrap()
    );
    // Without a CA there is nothing to sign with.
    let empty = tempfile::tempdir().unwrap();
    let err = revoke(empty.path(), &RevokeTarget::Serial("12".into())).unwrap_err();
    assert!(err.to_string().contains("ca.pem"), "{err}");
}

#[test]
fn issue_valid_between_sets_the_window_and_checks_it() {
    use std::time::{Duration, SystemTime};
    let ca = tempfile::tempdir().unwrap();
    init_ca(ca.path(), "lab", false).unwrap();
    let day = Duration::from_secs(86_400);
    let now = SystemTime::now();
    let files = issue_valid_between(
        ca.path(),
        ca.path(),
        Role::User,
        "old",
        now - 3 * day,
        now - day,
    )
    .unwrap();
    let der = load_certs(&files.cert).unwrap().swap_remove(0);
    let (_, c) = x509_parser::parse_x509_certificate(&der).unwrap();
    assert!(!c.validity().is_valid(), "expired");
    let err =
        issue_valid_between(ca.path(), ca.path(), Role::User, "x", now, now - day).unwrap_err();
    assert!(
        matches!(
            err,
            TlsError::InvalidField {
                field: "not_after",
                ..
            }
        ),
        "{err}"
    );
}
