//! A controller started before its certificates are installed (a package's first
//! start, say) stops without making anything in its data dir: the founding members are
//! read only while the data dir is empty, so a data dir bootstrapped from a config not
//! yet complete would keep them after the admin corrects the config.

use std::process::Command;

#[test]
fn missing_certificate_stops_the_controller_before_it_bootstraps_a_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    tranche_tls::init_ca(&certs, "first-start", false).unwrap();
    let data = dir.path().join("data");
    let cfg = dir.path().join("controller.toml");
    let (certs, data_s) = (certs.display(), data.display());
    std::fs::write(
        &cfg,
        format!(
            r#"id = 1
name = "ctl1"
peer_addr = "127.0.0.1:7101"
client_addr = "127.0.0.1:7100"
data_dir = "{data_s}"

[tls]
ca = "{certs}/ca.pem"
cert = "{certs}/controller-ctl1.pem"
key = "{certs}/controller-ctl1.key"

[[peers]]
id = 1
name = "ctl1"
peer_addr = "127.0.0.1:7101"
client_addr = "127.0.0.1:7100"
"#
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tranched"))
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    // The log goes to stdout, the last word to stderr.
    let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "tranched started: {said}");
    assert!(
        said.contains(&format!(
            "cannot read certificate {certs}/controller-ctl1.pem"
        )),
        "the refusal does not name the missing certificate: {said}"
    );
    assert!(
        !data.join("raft.redb").exists(),
        "the data dir was bootstrapped before the certificates were read: {said}"
    );
}
