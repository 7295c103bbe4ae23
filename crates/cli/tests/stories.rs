//! Issue-level stories on `tranche dev`, through the real CLI: lend, borrow and
//! reclaim; a loan with its terms and a checkpoint that makes its job the victim;
//! in-share preemption after `tranche update --priority`; one-line errors.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{tranche, Dev};
use tranche_local::wait_until_blocking;

fn job(config: &str, id: &str) -> serde_json::Value {
    let out = tranche(config, &["show", id, "--json"]);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn wait(
    config: &str,
    id: &str,
    what: &str,
    f: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    wait_until_blocking(
        &format!("job {id}: {what}"),
        Duration::from_secs(60),
        || {
            let j = job(config, id);
            match f(&j) {
                true => Ok(j),
                false => Err(j.to_string()),
            }
        },
    )
    .unwrap()
}

/// `tranche explain` of a job, once one of its lines contains every one of `needles`.
fn explain_until(config: &str, id: &str, needles: &[&str]) -> String {
    wait_until_blocking(
        &format!("explain {id}: {needles:?}"),
        Duration::from_secs(60),
        || {
            let out = tranche(config, &["explain", id]);
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            match text.lines().any(|l| needles.iter().all(|n| l.contains(n))) {
                true => Ok(text),
                false => Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr))),
            }
        },
    )
    .unwrap()
}

fn submit(config: &str, args: &[&str]) -> String {
    let mut a = vec!["submit", "--parsable"];
    a.extend_from_slice(args);
    let out = tranche(config, &a);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

const CHECKPOINTER: &str = "trap 'exit 0' TERM; sleep 1000 & wait $!";

#[test]
fn lend_borrow_reclaim_through_the_cli() {
    let dev = Dev::start("una");
    // nlp (LEND_AND_BORROW, 4 A100) fills all 8 A100: 4 of them are vision's idle ones.
    let borrowers: Vec<String> = (0..8)
        .map(|_| {
            submit(
                &dev.user,
                &[
                    "--share",
                    "nlp",
                    "--gpus",
                    "1",
                    "--",
                    "sh",
                    "-c",
                    CHECKPOINTER,
                ],
            )
        })
        .collect();
    for b in &borrowers {
        wait(&dev.user, b, "running", |j| j["status"] == "RUNNING");
    }
    // vision's own job arrives and takes its 4 A100 back.
    let lender = submit(
        &dev.user,
        &[
            "--share", "vision", "--unit", "a100", "--gpus", "4", "--", "sleep", "1",
        ],
    );
    wait(&dev.user, &lender, "success", |j| {
        j["status"] == "SUCCEEDED"
    });
    let preempted: Vec<&String> = borrowers
        .iter()
        .filter(|b| job(&dev.user, b)["preemptions"].as_u64().unwrap() > 0)
        .collect();
    assert_eq!(
        preempted.len(),
        4,
        "reclaim takes exactly the lent capacity back"
    );
    for b in &preempted {
        let j = job(&dev.user, b);
        let first = &j["attempts"][0]["end"];
        assert_eq!(
            first["Stopped"]["code"], 0,
            "exited within its grace: {first}"
        );
        // Requeued, it runs again once the lender is done.
        wait(&dev.user, b, "running again", |j| {
            j["status"] == "RUNNING" && j["attempts"].as_array().unwrap().len() == 2
        });
    }
    // The text forms say the same in the design's words.
    let shown = stdout(&tranche(&dev.user, &["show", preempted[0]]));
    let first = shown
        .lines()
        .find(|l| l.trim_start().starts_with("attempt 1: "))
        .unwrap_or_default();
    assert!(
        first.ends_with(&format!(", reclaimed for job {lender}, exited 0")),
        "{shown}"
    );
    assert!(
        shown.contains("command sh -c 'trap '\\''exit 0'\\'' TERM;"),
        "{shown}"
    );
    assert_no_debug_or_epoch(&shown);
    let shares = stdout(&tranche(&dev.user, &["shares"]));
    let nlp = shares
        .lines()
        .find(|l| l.starts_with("nlp "))
        .unwrap_or_default();
    assert!(nlp.contains(" LEND_AND_BORROW "), "{shares}");
    assert!(
        shares.contains(" RESERVE ") && shares.contains(" LEND "),
        "{shares}"
    );
    assert_no_debug_or_epoch(&shares);
    let explained = stdout(&tranche(&dev.user, &["explain", preempted[0]]));
    assert!(
        explained.contains("strategy LEND_AND_BORROW"),
        "{explained}"
    );
    assert_no_debug_or_epoch(&explained);
    shows_times_in_the_local_zone(&dev.user, &lender);
    let out = tranche(
        &dev.user,
        &["cancel"]
            .into_iter()
            .chain(borrowers.iter().map(|s| s.as_str()))
            .collect::<Vec<_>>(),
    );
    assert!(out.status.success(), "{out:?}");
}

/// The first line of a job's output, once it has one.
fn first_line(config: &str, id: &str) -> String {
    wait_until_blocking(
        &format!("job {id}: its first line of output"),
        Duration::from_secs(60),
        || {
            let out = tranche(config, &["logs", id]);
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            match text.lines().next() {
                Some(l) if !l.is_empty() => Ok(l.to_string()),
                _ => Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr))),
            }
        },
    )
    .unwrap()
}

#[test]
fn a_loan_is_told_its_terms_and_a_checkpoint_makes_its_job_the_victim() {
    let dev = Dev::start("lou");
    // nlp (LEND_AND_BORROW, 4 A100) gets loan terms: recall notice 3 s; the queue's
    // policy becomes FAIR_SHARE (only nlp borrows, so the orders below are FIFO's too);
    // nlp and vision (LEND, 4 A100) go into a group, ml, inside which nlp borrows.
    let dir = std::path::Path::new(&dev.admin)
        .parent()
        .unwrap()
        .to_path_buf();
    let policy = dir.join("loans.toml");
    let text = String::from(
        "[[policies]]\nname = \"fifo\"\nidle_resource_assignment = \"FAIR_SHARE\"\nusage_half_life_s = 86400\n\n[[shares]]\nname = \"nlp\"\nqueue = \"q\"\ncapacity_limits = [ { unit = \"a100\", max = 4 } ]\nstrategy = \"LEND_AND_BORROW\"\nborrow_limit = -1\nrecall_notice_s = 3\nloan_min_runtime_s = 0\nweight = 2\n\n[[groups]]\nname = \"ml\"\nqueue = \"q\"\nshares = [\"vision\", \"nlp\"]\ncapacity_limits = [ { unit = \"a100\", max = 8 } ]\nstrategy = \"LEND\"\n",
    );
    std::fs::write(&policy, &text).unwrap();
    // A dry run says what the change does: it reorders, and preempts nothing itself.
    let out = tranche(
        &dev.admin,
        &["apply", "--dry-run", "-f", policy.to_str().unwrap()],
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("policy fifo: its idle assignment changes the order of borrowing and reclaim; no running job is preempted by the change itself")
            && said.contains("group ml: its groups' limits bound borrowers"),
        "{out:?}"
    );
    let out = tranche(&dev.admin, &["apply", "-f", policy.to_str().unwrap()]);
    let applied = String::from_utf8_lossy(&out.stdout);
    assert!(
        applied.contains("update share nlp")
            && applied.contains("update policy fifo")
            && applied.contains("create group ml"),
        "{out:?}"
    );
    let nlp = |script: &str| {
        submit(
            &dev.user,
            &["--share", "nlp", "--gpus", "1", "--", "sh", "-c", script],
        )
    };
    let says = "echo on_loan=$TRANCHE_ON_LOAN notice=$TRANCHE_RECALL_NOTICE_S; ";
    // Four jobs within nlp's max, then one on loan that checkpoints when told to,
    // then three more on loan, started later.
    let own: Vec<String> = (0..4)
        .map(|_| nlp(&format!("{says}{CHECKPOINTER}")))
        .collect();
    for j in &own {
        wait(&dev.user, j, "running", |j| j["status"] == "RUNNING");
    }
    let go = dir.join("go");
    let saver = nlp(&format!(
        "{says}while [ ! -e {} ]; do sleep 0.2; done; touch \"$TRANCHE_CHECKPOINT_FILE\"; {CHECKPOINTER}",
        go.display()
    ));
    wait(&dev.user, &saver, "running", |j| j["status"] == "RUNNING");
    let later: Vec<String> = (0..3)
        .map(|_| nlp(&format!("{says}{CHECKPOINTER}")))
        .collect();
    for j in &later {
        wait(&dev.user, j, "running", |j| j["status"] == "RUNNING");
    }
    // Each job knows whether it is on loan, and on what terms.
    assert_eq!(first_line(&dev.user, &own[0]), "on_loan=0 notice=");
    assert_eq!(first_line(&dev.user, &saver), "on_loan=1 notice=3");
    assert_eq!(job(&dev.user, &saver)["attempts"][0]["borrowed"], true);
    // The saver reports a checkpoint (the agent sees its file touched).
    std::fs::write(&go, "").unwrap();
    wait(&dev.user, &saver, "a checkpoint reported", |j| {
        !j["attempts"][0]["checkpointed_at"].is_null()
    });
    // With a loan minimum of an hour in force, a dry run of going back to none names
    // the four jobs on loan that a reclaim could then take at once.
    let hour = dir.join("hour.toml");
    std::fs::write(
        &hour,
        text.replace("loan_min_runtime_s = 0", "loan_min_runtime_s = 3600"),
    )
    .unwrap();
    assert!(
        tranche(&dev.admin, &["apply", "-f", hour.to_str().unwrap()])
            .status
            .success()
    );
    let out = tranche(
        &dev.admin,
        &["apply", "--dry-run", "-f", policy.to_str().unwrap()],
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let named: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("would make reclaimable now: job "))
        .collect();
    assert_eq!(named.len(), 4, "{said}");
    assert!(
        named.iter().any(|l| l.contains(&format!("job {saver} "))
            && l.contains("loan_min_runtime_s 0 (was 3600)")),
        "{said}"
    );
    assert!(
        tranche(&dev.admin, &["apply", "-f", policy.to_str().unwrap()])
            .status
            .success()
    );
    let text = explain_until(&dev.user, &saver, &["on loan:", "recall notice 3s"]);
    assert!(text.contains("last checkpoint reported"), "{text}");
    assert!(text.contains("fair share: share nlp used "), "{text}");
    assert!(
        text.contains("group ml: its shares use 8 of 8 a100 GPU(s), strategy LEND; its borrowers stay within its max"),
        "{text}"
    );
    assert_no_debug_or_epoch(&text);
    // `tranche shares` shows each share's standing under FAIR_SHARE.
    let shares = stdout(&tranche(&dev.user, &["shares"]));
    let nlp_fair = shares
        .lines()
        .skip_while(|l| !l.starts_with("FAIR SHARE"))
        .find(|l| l.starts_with("nlp "))
        .unwrap_or_default();
    assert!(nlp_fair.split_whitespace().nth(2) == Some("2"), "{shares}");
    // ... and the group: its shares use all 8 of its A100s.
    let ml = shares
        .lines()
        .find(|l| l.starts_with("ml "))
        .unwrap_or_default();
    let cols: Vec<&str> = ml.split_whitespace().collect();
    assert_eq!(
        cols.get(1..6),
        Some(&["LEND", "a100", "8", "8", "8"][..]),
        "{shares}"
    );
    assert!(ml.ends_with("vision, nlp"), "{shares}");
    assert_no_debug_or_epoch(&shares);
    // vision takes one A100 back: of nlp's eight jobs, the one that loses the least
    // work is the saver, though three jobs started after it.
    let lender = submit(
        &dev.user,
        &[
            "--share", "vision", "--unit", "a100", "--gpus", "1", "--", "sleep", "1",
        ],
    );
    wait(&dev.user, &saver, "reclaimed", |j| j["preemptions"] == 1);
    for j in own.iter().chain(&later) {
        assert_eq!(job(&dev.user, j)["preemptions"], 0, "job {j}");
    }
    let s = job(&dev.user, &saver);
    let stopping = s["transitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["reason"].as_str().unwrap_or("").starts_with("stopping"))
        .cloned()
        .unwrap_or_default();
    assert!(
        stopping["reason"]
            .as_str()
            .unwrap_or("")
            .contains("recall notice 3 s, then grace 30 s"),
        "{s}"
    );
    wait(&dev.user, &lender, "success", |j| {
        j["status"] == "SUCCEEDED"
    });
    // The admin takes the group away again; its shares stay, in no group.
    let out = tranche(&dev.admin, &["apply", "--delete-group", "ml"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("delete group ml") && said.contains("1 deleted"),
        "{out:?}"
    );
    let shares = stdout(&tranche(&dev.user, &["shares"]));
    assert!(!shares.lines().any(|l| l.starts_with("ml ")), "{shares}");
    assert!(shares.lines().any(|l| l.starts_with("nlp ")), "{shares}");
    let out = tranche(&dev.admin, &["apply", "--delete-group", "ml"]);
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("group ml does not exist"),
        "{out:?}"
    );
    let out = tranche(
        &dev.user,
        &["cancel"]
            .into_iter()
            .chain(own.iter().chain(&later).map(|s| s.as_str()))
            .chain([saver.as_str()])
            .collect::<Vec<_>>(),
    );
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn in_share_preemption_after_a_priority_update() {
    let dev = Dev::start("vic");
    // research (RESERVE, 4 H100) may preempt inside the share.
    let policy = std::path::Path::new(&dev.admin)
        .parent()
        .unwrap()
        .join("inshare.toml");
    std::fs::write(
        &policy,
        "[[shares]]\nname = \"research\"\nqueue = \"q\"\ncapacity_limits = [ { unit = \"h100\", max = 4 } ]\nstrategy = \"RESERVE\"\nin_share_preemption = true\n",
    )
    .unwrap();
    let out = tranche(&dev.admin, &["apply", "-f", policy.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("update share research"),
        "{out:?}"
    );
    let low = submit(
        &dev.user,
        &[
            "--share",
            "research",
            "--gpus",
            "4",
            "--priority",
            "1",
            "--",
            "sh",
            "-c",
            CHECKPOINTER,
        ],
    );
    wait(&dev.user, &low, "running", |j| j["status"] == "RUNNING");
    let high = submit(
        &dev.user,
        &[
            "--share",
            "research",
            "--gpus",
            "4",
            "--priority",
            "1",
            "--",
            "sleep",
            "1",
        ],
    );
    // explain names the real cause, with numbers, and what would let it start, once
    // a pass has looked at the job: the pass that gave this reason did not preempt,
    // since equal priority does not preempt.
    let text = explain_until(
        &dev.user,
        &high,
        &["starts when: share research has 4 h100 GPU(s) free"],
    );
    assert!(text.contains("research") && text.contains("4/4"), "{text}");
    assert_eq!(job(&dev.user, &high)["status"], "RUNNABLE");
    let l = job(&dev.user, &low);
    assert!(l["status"] == "RUNNING" && l["preemptions"] == 0, "{l}");
    let out = tranche(&dev.user, &["update", &high, "--priority", "9"]);
    assert!(out.status.success(), "{out:?}");
    wait(&dev.user, &high, "success", |j| j["status"] == "SUCCEEDED");
    let l = job(&dev.user, &low);
    assert_eq!(l["preemptions"], 1, "{l}");
    assert!(
        l["attempts"][0]["end"]["Stopped"]["kind"]["InShare"].is_object(),
        "{l}"
    );
    let shown = stdout(&tranche(&dev.user, &["show", &low]));
    assert!(
        shown.contains(&format!("preempted by job {high} in its share, exited 0")),
        "{shown}"
    );
    assert_no_debug_or_epoch(&shown);
    let _ = tranche(&dev.user, &["cancel", &low]);
}

#[test]
fn every_error_is_one_line_with_a_non_zero_exit() {
    let dev = Dev::start("wes");
    let dir = std::path::Path::new(&dev.user)
        .parent()
        .unwrap()
        .to_path_buf();
    let check = |config: &str, args: &[&str], code: i32, needle: &str| {
        let out = tranche(config, args);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(code), "{args:?}: {out:?}");
        assert_eq!(
            err.trim_end().lines().count(),
            1,
            "{args:?}: not one line: {err}"
        );
        assert!(err.contains(needle), "{args:?}: {err}");
    };
    check(
        &dev.user,
        &["submit", "--share", "nope", "--gpus", "1", "--", "true"],
        1,
        "--share nope",
    );
    // Not a member: a share open only to someone else.
    let policy = dir.join("members.toml");
    std::fs::write(
        &policy,
        "[[shares]]\nname = \"private\"\nqueue = \"q\"\ncapacity_limits = [ { unit = \"h100\", max = 1 } ]\nstrategy = \"LEND\"\nmembers = [\"someone\"]\n",
    )
    .unwrap();
    assert!(
        tranche(&dev.admin, &["apply", "-f", policy.to_str().unwrap()])
            .status
            .success()
    );
    check(
        &dev.user,
        &["submit", "--share", "private", "--gpus", "1", "--", "true"],
        1,
        "not a member of share private",
    );
    // An invalid spec: more GPUs per node than any node has is refused by the rules.
    check(
        &dev.user,
        &["submit", "--share", "vision", "--gpus", "0", "--", "true"],
        1,
        "gpus",
    );
    check(
        &dev.user,
        &[
            "submit", "--share", "vision", "--gpus", "1", "--time", "soon", "--", "true",
        ],
        2,
        "--time",
    );
    check(&dev.user, &["show", "999999"], 1, "999999");
    // An unreachable cluster.
    let dead = dir.join("dead.toml");
    let text = std::fs::read_to_string(&dev.user).unwrap();
    // A port held here and never answered: no process can take it meanwhile.
    let dead_socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = dead_socket.local_addr().unwrap().port();
    let controllers_line = text
        .lines()
        .find(|l| l.starts_with("controllers"))
        .unwrap()
        .to_string();
    std::fs::write(
        &dead,
        text.replace(
            &controllers_line,
            &format!("controllers = [\"127.0.0.1:{port}\"]"),
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tranche"))
        .args(["jobs"])
        .env("TRANCHE_CONFIG", &dead)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr)
            .trim_end()
            .lines()
            .count(),
        1,
        "{out:?}"
    );
    check("/nonexistent/config.toml", &["jobs"], 2, "cannot read");
}

fn stdout(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// No Rust `Debug` forms (`Some(..)`, `Exited { .. }`, `LendAndBorrow`) and no bare
/// epoch milliseconds in text meant for people.
fn assert_no_debug_or_epoch(text: &str) {
    for debug in [
        "Some(",
        "None",
        "{ ",
        "JobId(",
        "LendAndBorrow",
        "Reserve ",
        "[\"",
    ] {
        assert!(!text.contains(debug), "`{debug}` in:\n{text}");
    }
    let longest_number = text
        .split(|c: char| !c.is_ascii_digit())
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(longest_number < 10, "an epoch time in:\n{text}");
}

/// `tranche show` writes times in the zone of `$TZ`: one instant, two hours apart in
/// UTC and in UTC+2 (`XYZ-2` in POSIX's spelling), and in UTC exactly as the job record
/// says.
fn shows_times_in_the_local_zone(config: &str, id: &str) {
    let show_in = |tz: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_tranche"))
            .args(["show", id])
            .env("TRANCHE_CONFIG", config)
            .env("TZ", tz)
            .output()
            .unwrap();
        let text = stdout(&out);
        text.lines()
            .find_map(|l| l.trim().strip_prefix("submitted "))
            .unwrap_or_else(|| panic!("no submitted line:\n{text}"))
            .to_string()
    };
    let submitted_ms = job(config, id)["submitted_at"].as_u64().unwrap();
    assert_eq!(show_in("UTC"), utc_text(submitted_ms / 1000));
    assert_eq!(show_in("XYZ-2"), utc_text(submitted_ms / 1000 + 2 * 3600));
}

/// Seconds since the epoch as `YYYY-MM-DD HH:MM:SS` in UTC (the proleptic Gregorian
/// calendar's days from civil, inverted).
fn utc_text(secs: u64) -> String {
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[test]
fn utc_text_of_known_instants() {
    assert_eq!(utc_text(0), "1970-01-01 00:00:00");
    assert_eq!(utc_text(951_782_400), "2000-02-29 00:00:00");
    assert_eq!(utc_text(1_796_131_900), "2026-12-01 13:31:40");
}

#[test]
fn drain_then_resume_on_the_dev_cluster() {
    let dev = Dev::start("xia");
    let ops = std::path::Path::new(&dev.admin)
        .parent()
        .unwrap()
        .join("operator-ops.toml")
        .display()
        .to_string();
    // Drain every A100 node: an A100 job waits, and says why.
    for n in ["n3", "n4"] {
        let out = tranche(&ops, &["drain", n, "--reason", "cooling maintenance"]);
        assert!(out.status.success(), "{out:?}");
    }
    let out = tranche(&dev.user, &["nodes", "-R"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .matches("cooling maintenance")
            .count(),
        2,
        "{out:?}"
    );
    let id = submit(&dev.user, &["--share", "nlp", "--gpus", "1", "--", "true"]);
    // Once a pass has looked at it, the reason it waits names the drained unit.
    explain_until(&dev.user, &id, &["waiting: ", "a100"]);
    let j = job(&dev.user, &id);
    assert_eq!(j["status"], "RUNNABLE", "{j}");
    for n in ["n3", "n4"] {
        assert!(tranche(&ops, &["resume", n]).status.success());
    }
    wait(&dev.user, &id, "success after resume", |j| {
        j["status"] == "SUCCEEDED"
    });
}
