//! The agent's config file: the shipped example parses; bad input names the field.

use tranche_agent::config::AgentConfig;

fn example() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/agent.toml");
    std::fs::read_to_string(path).expect("config/agent.toml")
}

#[test]
fn the_example_config_parses() {
    let cfg = AgentConfig::parse(&example(), "agent.toml").unwrap();
    assert_eq!(cfg.node, "gpu01");
    assert_eq!(cfg.controller_addrs().len(), 3);
    assert_eq!(cfg.fence_after_s, 30);
    assert_eq!(
        cfg.units.get("NVIDIA H200").map(String::as_str),
        Some("h200")
    );
}

#[test]
fn bad_configs_name_the_field() {
    let base = example();
    let refused = |text: String| match AgentConfig::parse(&text, "a.toml") {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    };
    let e = refused(base.replace("inventory = \"nvml\"", "inventory = \"fake\""));
    assert!(e.contains("`fake`"), "{e}");
    let e = refused(base.replace("\"10.0.0.12:7100\"", "\"nowhere\""));
    assert!(e.contains("`controllers`"), "{e}");
    let e = refused(base.replace("fence_after_s = 30", "fence_after_s = 1"));
    assert!(e.contains("`fence_after_s`"), "{e}");
    let e = refused(base.replace("node = \"gpu01\"", "node = \"GPU 01\""));
    assert!(e.contains("`node`"), "{e}");
    for dir in ["run/tranche-agent", "/var/spool/tranche/logs"] {
        let e = refused(base.replace(
            "# attempts_dir = \"/run/tranche-agent\"",
            &format!("attempts_dir = \"{dir}\""),
        ));
        assert!(e.contains("`attempts_dir`"), "{dir}: {e}");
    }
}

#[test]
fn attempts_may_be_kept_outside_the_spool() {
    let base = example();
    assert_eq!(
        AgentConfig::parse(&base, "a.toml").unwrap().attempts_dir,
        None
    );
    let cfg = AgentConfig::parse(
        &base.replace(
            "# attempts_dir = \"/run/tranche-agent\"",
            "attempts_dir = \"/run/tranche-agent\"",
        ),
        "a.toml",
    )
    .unwrap();
    assert_eq!(
        cfg.attempts_dir.as_deref(),
        Some(std::path::Path::new("/run/tranche-agent"))
    );
}

#[test]
fn the_tls_table_takes_an_optional_revocation_list() {
    let base = example();
    assert_eq!(AgentConfig::parse(&base, "a.toml").unwrap().tls.crl, None);
    let cfg = AgentConfig::parse(&base.replace("# crl = ", "crl = "), "a.toml").unwrap();
    assert_eq!(
        cfg.tls.crl.as_deref(),
        Some(std::path::Path::new("/etc/tranche/certs/crl.pem"))
    );
    let e = AgentConfig::parse(&base.replace("# crl = ", "crls = "), "a.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `crls`"), "{e}");
}

#[test]
fn the_cgroup_setting_picks_the_tracking_hierarchy() {
    use tranche_agent::exec::CgroupMode;
    let base = example();
    let cfg = AgentConfig::parse(&base, "a.toml").unwrap();
    assert_eq!(cfg.cgroup_mode(), CgroupMode::Auto);
    for (value, mode) in [
        ("auto", CgroupMode::Auto),
        ("v1", CgroupMode::V1),
        ("v2", CgroupMode::V2),
    ] {
        let text = base.replace("# cgroup = \"auto\"", &format!("cgroup = \"{value}\""));
        assert_eq!(
            AgentConfig::parse(&text, "a.toml").unwrap().cgroup_mode(),
            mode
        );
    }
    let e = AgentConfig::parse(
        &base.replace("# cgroup = \"auto\"", "cgroup = \"v3\""),
        "a.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("`cgroup`") && e.contains("\"v2\""), "{e}");
}

#[test]
fn root_jobs_are_refused_unless_allowed_and_users_map_to_accounts() {
    let base = example();
    let cfg = AgentConfig::parse(&base, "a.toml").unwrap();
    assert!(!cfg.allow_root);
    assert_eq!(cfg.users.get("alice").map(String::as_str), Some("asmith"));
    let text = base.replace("# allow_root = false", "allow_root = true");
    assert!(AgentConfig::parse(&text, "a.toml").unwrap().allow_root);

    let refused = |text: String| match AgentConfig::parse(&text, "a.toml") {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    };
    let e = refused(base.replace("alice = \"asmith\"", "alice = \"root\""));
    assert!(
        e.contains("`users`") && e.contains("\"alice\" = \"root\"") && e.contains("allow_root"),
        "{e}"
    );
    let ok = base
        .replace("alice = \"asmith\"", "alice = \"root\"")
        .replace("# allow_root = false", "allow_root = true");
    AgentConfig::parse(&ok, "a.toml").unwrap();
    let e = refused(base.replace("alice = \"asmith\"", "alice = \"a smith\""));
    assert!(e.contains("`users`") && e.contains("whitespace"), "{e}");
    let e = refused(base.replace("alice = \"asmith\"", "alice = \"\""));
    assert!(e.contains("`users`") && e.contains("empty"), "{e}");
    let e = refused(base.replace("alice = \"asmith\"", "\"al ice\" = \"asmith\""));
    assert!(e.contains("`users`") && e.contains("\"al ice\""), "{e}");
    let e = refused(base.replace("# allow_root = false", "allow_root = \"yes\""));
    assert!(e.contains("allow_root"), "{e}");
}

/// The node's rules for jobs: defaults, the policy they make (limits in proportion to
/// the node's GPUs), and bad values refused by field, rule and number.
#[test]
fn the_job_rules_default_and_refuse_bad_values() {
    let base = example();
    let cfg = AgentConfig::parse(&base, "a.toml").unwrap();
    assert_eq!(cfg.min_uid, 1000);
    assert!(cfg.deny_groups.iter().any(|g| g == "sudo"));
    assert!(cfg.allow_setuid_shares.is_empty());
    let p = cfg.job_policy(96, 800_000, 8);
    assert_eq!(
        (
            p.default_cpus_per_gpu,
            p.default_memory_mb_per_gpu,
            p.pids_max_per_gpu
        ),
        (12, 100_000, 4096)
    );
    assert_eq!(
        p.work_dir, None,
        "beside the spool unless set (`<spool_dir>.work`)"
    );
    let set = |line: &str| base.replace("# allow_root = false", line);
    let cfg = AgentConfig::parse(
        &set("allow_setuid_shares = [\"ops\"]\ndefault_memory_mb_per_gpu = 0\nmin_uid = 5000"),
        "a.toml",
    )
    .unwrap();
    assert_eq!(cfg.job_policy(96, 800_000, 8).default_memory_mb_per_gpu, 0);
    assert_eq!(cfg.min_uid, 5000);
    let refused = |text: String| AgentConfig::parse(&text, "a.toml").unwrap_err().to_string();
    let e = refused(set("pids_max_per_gpu = 0"));
    assert!(
        e.contains("`pids_max_per_gpu`") && e.contains("is 0; must be 1 to 4194304"),
        "{e}"
    );
    let e = refused(set("work_dir = \"/var/spool/tranche/work\""));
    assert!(
        e.contains("`work_dir`") && e.contains("outside `spool_dir`"),
        "{e}"
    );
    let e = refused(set("job_devices = [\"dev/infiniband\"]"));
    assert!(e.contains("`job_devices`") && e.contains("absolute"), "{e}");
    let e = refused(set("deny_groups = [\"a:b\"]"));
    assert!(e.contains("`deny_groups`") && e.contains("\"a:b\""), "{e}");
}

#[test]
fn the_images_table_sets_roots_and_limits() {
    let base = example();
    let policy = AgentConfig::parse(&base, "a.toml").unwrap().image_policy();
    assert!(policy.roots.is_empty());
    assert_eq!(policy.max_blob_bytes, 16 << 30);
    assert_eq!(policy.max_entries, 2_000_000);
    let set = |from: &str, to: &str| base.replace(from, to);
    let cfg = AgentConfig::parse(
        &set("# roots = [\"/srv/rootfs\"]", "roots = [\"/srv/rootfs\"]")
            .replace("# max_unpacked_mb = 131072", "max_unpacked_mb = 100"),
        "a.toml",
    )
    .unwrap();
    let policy = cfg.image_policy();
    assert_eq!(policy.roots, vec![std::path::PathBuf::from("/srv/rootfs")]);
    assert_eq!(policy.max_unpacked_bytes, 100 << 20);
    let refused = |text: String| match AgentConfig::parse(&text, "a.toml") {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    };
    let e = refused(set("# roots = [\"/srv/rootfs\"]", "roots = [\"srv\"]"));
    assert!(
        e.contains("`images.roots`") && e.contains("absolute"),
        "{e}"
    );
    let e = refused(set("# max_blob_mb = 16384", "max_blob_mb = 0"));
    assert!(
        e.contains("`images.max_blob_mb`") && e.contains("not 0"),
        "{e}"
    );
    let e = refused(set("# max_blob_mb = 16384", "max_blob_mb = 70000"));
    assert!(
        e.contains("at most images.max_image_mb (65536), not 70000"),
        "{e}"
    );
    let e = refused(set("# max_entries = 2000000", "max_entries = 0"));
    assert!(e.contains("`images.max_entries`"), "{e}");
}
