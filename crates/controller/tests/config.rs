//! The controller's config file: the shipped example parses, and bad input is refused
//! with the field and the rule.

use tranche_controller::Config;

fn example() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/controller.toml");
    std::fs::read_to_string(path).expect("config/controller.toml")
}

#[test]
fn the_example_config_parses() {
    let cfg = Config::parse(&example(), "controller.toml").unwrap();
    assert_eq!(cfg.id, 1);
    assert_eq!(cfg.peers.len(), 3);
    assert_eq!(cfg.raft.snapshot_entries, 100_000);
    assert_eq!(cfg.sched.max_busy_percent, 10);
    assert!(
        !cfg.raft.unsafe_no_fsync,
        "fsync is on unless asked otherwise"
    );
    let unsafe_cfg = example().replace("unsafe_no_fsync = false", "unsafe_no_fsync = true");
    let cfg = Config::parse(&unsafe_cfg, "controller.toml").unwrap();
    assert!(cfg.raft.unsafe_no_fsync);
    assert_eq!(
        (
            cfg.retention.job_hot_s,
            cfg.retention.job_hot_max,
            cfg.retention.history_days
        ),
        (86_400, 200_000, 400)
    );
}

fn refused(text: &str) -> String {
    match Config::parse(text, "c.toml") {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_configs_name_the_field() {
    let base = example();
    let e = refused(&base.replace("id = 1                 ", "id = 0                 "));
    assert!(e.contains("`id`"), "{e}");
    let e = refused(&base.replace(
        "client_addr = \"10.0.0.11:7100\"          #",
        "client_addr = \"nowhere\" #",
    ));
    assert!(e.contains("`client_addr`"), "{e}");
    let e = refused(&base.replace("election_ticks = 10", "election_ticks = 1"));
    assert!(e.contains("`raft`"), "{e}");
    let e = refused(&base.replace("max_busy_percent = 10", "max_busy_percent = 0"));
    assert!(e.contains("max_busy_percent"), "{e}");
    let e = refused(&base.replace("history_days = 400", "history_days = 0"));
    assert!(
        e.contains("`retention.history_days`: must be at least 1"),
        "{e}"
    );
    let e = refused(&format!("{base}\nunknown_key = 1\n"));
    assert!(e.contains("unknown field"), "{e}");
    // Founders must include this controller.
    let e = refused(&base.replace(
        "id = 1\nname = \"ctl1\"\npeer_addr",
        "id = 9\nname = \"ctl1\"\npeer_addr",
    ));
    assert!(e.contains("`peers`"), "{e}");
}

#[test]
fn the_tls_table_takes_an_optional_revocation_list() {
    let base = example();
    assert_eq!(Config::parse(&base, "c.toml").unwrap().tls.crl, None);
    let with = base.replace("# crl = ", "crl = ");
    let cfg = Config::parse(&with, "c.toml").unwrap();
    assert_eq!(
        cfg.tls.crl.as_deref(),
        Some(std::path::Path::new("/etc/tranche/certs/crl.pem"))
    );
    let e = refused(&base.replace("# crl = ", "crls = "));
    assert!(e.contains("unknown field `crls`"), "{e}");
}

#[test]
fn the_peer_port_may_listen_apart_from_its_advertised_address() {
    let base = example();
    let cfg = Config::parse(&base, "c.toml").unwrap();
    assert_eq!(cfg.peer_listen(), "10.0.0.11:7101", "defaults to peer_addr");
    let with = base.replace("# peer_listen = ", "peer_listen = ");
    let cfg = Config::parse(&with, "c.toml").unwrap();
    assert_eq!(cfg.peer_listen(), "0.0.0.0:7101");
    assert_eq!(
        cfg.me().peer_addr,
        "10.0.0.11:7101",
        "the others still dial peer_addr"
    );
    let e = refused(&base.replace(
        "# peer_listen = \"0.0.0.0:7101\"",
        "peer_listen = \"anywhere\"",
    ));
    assert!(e.contains("`peer_listen`"), "{e}");
}

#[test]
fn the_image_catalog_takes_patterns_and_names_a_malformed_one() {
    let base = example();
    let with = format!(
        "{base}\n[aws.images]\n\"763104351884.dkr.ecr.*.amazonaws.com/pytorch-training:*\" = \"/images/pytorch\"\n\"reg.io/exact:1\" = \"/images/exact\"\n"
    );
    let cfg = Config::parse(&with, "c.toml").unwrap();
    assert_eq!(
        cfg.aws
            .image("763104351884.dkr.ecr.eu-central-1.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker")
            .map(String::as_str),
        Some("/images/pytorch")
    );
    assert_eq!(
        cfg.aws.image("reg.io/exact:1").map(String::as_str),
        Some("/images/exact")
    );
    let bad = format!("{base}\n[aws.images]\n\"reg.io/pytorch-*:1\" = \"/images/x\"\n");
    let e = refused(&bad);
    assert!(
        e.contains("field `aws.images`: `reg.io/pytorch-*:1`: the repository must be given exactly, without `*`"),
        "{e}"
    );
}
