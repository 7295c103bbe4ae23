//! `tranche apply -f`: idempotent, prints what changed, `--dry-run` changes nothing and
//! names the jobs a smaller share would make preemptible; only admins may apply.

mod common;

use std::time::Duration;

use tranche_local::wait_until_blocking;

use common::{tranche, Dev};

#[test]
fn apply_is_idempotent_and_dry_run_names_what_would_be_preempted() {
    let d = Dev::start("alice");
    let user = d.user.clone();
    let admin = d.admin.clone();
    let dir = d.dir.as_path();
    let policy = concat!(env!("CARGO_MANIFEST_DIR"), "/../../config/policy.toml");
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();

    let out = tranche(&user, &["apply", "-f", policy]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a user applied a policy: {out:?}"
    );

    let out = tranche(&admin, &["apply", "-f", policy]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text(&out).contains("create share robotics"),
        "{}",
        text(&out)
    );
    assert!(text(&out).contains("create group ml"), "{}", text(&out));
    assert!(
        text(&out).contains("7 created, 0 updated, 1 unchanged"),
        "{}",
        text(&out)
    );
    let out = tranche(&admin, &["apply", "-f", policy]);
    assert!(
        text(&out).contains("0 created, 0 updated, 8 unchanged"),
        "{}",
        text(&out)
    );

    // alice runs two 2-GPU jobs in the dev policy's `vision` share (max 4 H100).
    for _ in 0..2 {
        let out = tranche(
            &user,
            &[
                "submit",
                "--share",
                "vision",
                "--gpus",
                "2",
                "--parsable",
                "--",
                "sleep",
                "60",
            ],
        );
        assert!(out.status.success(), "{out:?}");
    }
    wait_until_blocking("both jobs RUNNING", Duration::from_secs(60), || {
        let out = tranche(
            &user,
            &["jobs", "--share", "vision", "--state", "RUNNING", "--json"],
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        match v.as_array().unwrap().len() == 2 {
            true => Ok(()),
            false => Err(v.to_string()),
        }
    })
    .unwrap();
    // Shrinking `vision` to 2 H100 would leave one of them over max.
    let smaller = dir.join("smaller.toml");
    std::fs::write(
        &smaller,
        "[[shares]]\nname = \"vision\"\nqueue = \"q\"\ncapacity_limits = [ { unit = \"h100\", max = 2 }, { unit = \"a100\", max = 4 } ]\nstrategy = \"LEND\"\n",
    )
    .unwrap();
    let out = tranche(
        &admin,
        &["apply", "-f", smaller.to_str().unwrap(), "--dry-run"],
    );
    assert!(out.status.success(), "{out:?}");
    let t = text(&out);
    assert!(t.contains("would update share vision"), "{t}");
    assert_eq!(t.matches("would make preemptible").count(), 1, "{t}");
    assert!(t.contains("(dry run: nothing changed)"), "{t}");
    // Nothing changed: the share still has its max of 4.
    let out = tranche(&admin, &["shares", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let vision = v
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "vision")
        .unwrap();
    assert_eq!(vision["units"][0]["max"], 4, "{vision}");
    // A share cannot move to another queue: refused before anything is written.
    std::fs::write(
        &smaller,
        "[[environments]]\nname = \"extra\"\ncapacity_limits = [ { unit = \"h100\", max = 1 } ]\n[[shares]]\nname = \"vision\"\nqueue = \"training\"\ncapacity_limits = [ { unit = \"h100\", max = 2 } ]\nstrategy = \"LEND\"\n",
    )
    .unwrap();
    let out = tranche(&admin, &["apply", "-f", smaller.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot move to another queue"),
        "{out:?}"
    );
    // The environment listed before the share was not written either.
    let only_env = dir.join("only-env.toml");
    std::fs::write(
        &only_env,
        "[[environments]]\nname = \"extra\"\ncapacity_limits = [ { unit = \"h100\", max = 1 } ]\n",
    )
    .unwrap();
    let out = tranche(
        &admin,
        &["apply", "-f", only_env.to_str().unwrap(), "--dry-run"],
    );
    assert!(
        text(&out).contains("would create environment extra"),
        "{}",
        text(&out)
    );
    // A bad file names the problem and changes nothing.
    std::fs::write(
        &smaller,
        "[[shares]]\nname = \"x\"\nstrategy = \"SHARE_ALIKE\"\n",
    )
    .unwrap();
    let out = tranche(&admin, &["apply", "-f", smaller.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("smaller.toml"),
        "{out:?}"
    );
}
