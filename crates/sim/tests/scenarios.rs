//! Every shipped scenario under `tests/scenarios/` runs and all its expectations hold;
//! malformed files are refused with the field named.

use std::path::PathBuf;

fn scenario_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/scenarios")
}

#[test]
fn every_shipped_scenario_passes() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(scenario_dir())
        .expect("tests/scenarios exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 10,
        "expected a scenario per rule, found {}",
        files.len()
    );
    let mut failed = vec![];
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let sc =
            tranche_sim::Scenario::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(
            !sc.expect.is_empty(),
            "{} states no expectation",
            f.display()
        );
        let report = tranche_sim::run(&sc).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        if !report.passed() {
            failed.push(format!(
                "{}:\n{}",
                f.display(),
                tranche_sim::render_text(&report)
            ));
        }
    }
    assert!(
        failed.is_empty(),
        "{} scenario(s) failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
}

fn parse_err(text: &str) -> String {
    tranche_sim::Scenario::parse(text)
        .expect_err("must be refused")
        .to_string()
}

const BASE: &str = r#"
[[nodes]]
name = "n"
unit = "h100"
gpus = 8
[[shares]]
name = "s"
capacity_limits = [ { unit = "h100", max = 8 } ]
strategy = "LEND"
"#;

#[test]
fn unknown_keys_are_errors_with_their_line() {
    let e = parse_err(&format!(
        "{BASE}\n[[events]]\nat = 0\nsubmitt = {{ name = \"a\" }}\n"
    ));
    assert!(e.contains("unknown field `submitt`"), "{e}");
    assert!(e.contains("line"), "{e}");
}

#[test]
fn an_event_needs_exactly_one_action() {
    let e = parse_err(&format!(
        "{BASE}\n[[events]]\nat = 0\ncancel = \"a\"\nresume = \"n\"\n"
    ));
    assert!(
        e.contains("`events[0]`") && e.contains("exactly one action"),
        "{e}"
    );
    let e = parse_err(&format!("{BASE}\n[[events]]\nat = 0\n"));
    assert!(e.contains("found 0"), "{e}");
}

#[test]
fn references_to_unknown_jobs_nodes_and_shares_are_named() {
    let e = parse_err(&format!("{BASE}\n[[events]]\nat = 0\ncancel = \"ghost\"\n"));
    assert!(
        e.contains("`events[0].cancel`") && e.contains("ghost"),
        "{e}"
    );
    let e = parse_err(&format!(
        "{BASE}\n[[events]]\nat = 0\ndrain = {{ node = \"m\", reason = \"x\" }}\n"
    ));
    assert!(e.contains("`events[0].drain.node`"), "{e}");
    let e = parse_err(&format!(
        "{BASE}\n[[expect]]\nat = 0\nshare = \"t\"\nused = {{ h100 = 1 }}\n"
    ));
    assert!(e.contains("`expect[0].share`"), "{e}");
    let e = parse_err(&format!(
        "{BASE}\n[[events]]\nat = 0\nsubmit = {{ name = \"a\", share = \"s\", unit = \"h100\", gpus = 1, on_signal = \"wait\" }}\n"
    ));
    assert!(
        e.contains("`events[0].submit.on_signal`") && e.contains("exit_after:N"),
        "{e}"
    );
}

/// A scenario that parses but whose LEND share has a borrow limit, which the state
/// machine refuses.
fn lend_share_with_borrow_limit() -> tranche_sim::Scenario {
    let text = BASE.replace(
        "strategy = \"LEND\"",
        "strategy = \"LEND\"\nborrow_limit = 10",
    );
    tranche_sim::Scenario::parse(&text).unwrap()
}

#[test]
fn an_invalid_share_is_reported_with_its_field() {
    let sc = lend_share_with_borrow_limit();
    let e = tranche_sim::run(&sc).unwrap_err().to_string();
    assert!(
        e.contains("shares[0]") && e.contains("resource_sharing.borrow_limit"),
        "{e}"
    );
    let e = parse_err(&BASE.replace("\"LEND\"", "\"SHARE_ALIKE\""));
    assert!(e.contains("unknown variant `SHARE_ALIKE`"), "{e}");
}

#[test]
fn a_share_the_state_machine_refuses_is_a_setup_error_of_its_field() {
    let sc = lend_share_with_borrow_limit();
    match tranche_sim::run(&sc).unwrap_err() {
        tranche_sim::RunError::Setup(tranche_sim::SetupError { field, error }) => {
            assert_eq!(field, "shares[0]");
            assert!(error.to_string().contains("borrow_limit"), "{error}");
        }
        e => panic!("not a setup error: {e:?}"),
    }
    assert!(matches!(
        tranche_sim::Sim::new(&sc),
        Err(tranche_sim::SetupError { .. })
    ));
}

#[test]
fn queues_and_the_shares_that_name_them_are_checked() {
    let queues = "[[queues]]\nname = \"prod\"\npriority = 10\n";
    // With [[queues]], every share names one.
    let e = parse_err(&format!("{queues}{BASE}"));
    assert_eq!(
        e,
        "invalid `shares[0].queue`: required when [[queues]] are given"
    );
    let named = BASE.replace("name = \"s\"", "name = \"s\"\nqueue = \"prod\"");
    assert!(tranche_sim::Scenario::parse(&format!("{queues}{named}")).is_ok());
    let e = parse_err(&format!("{queues}{}", named.replace("\"prod\"", "\"dev\"")));
    assert_eq!(e, "invalid `shares[0].queue`: no queue named dev");
    // Without [[queues]], the one queue is `default`.
    let e = parse_err(&named);
    assert!(
        e.starts_with("invalid `shares[0].queue`: no queue named prod"),
        "{e}"
    );
    let e = parse_err(&format!("{queues}{queues}{named}"));
    assert_eq!(e, "invalid `queues[1].name`: queue prod is defined twice");
    let e = parse_err(&format!(
        "{}{named}",
        queues.replace("priority = 10", "priority = 1001")
    ));
    assert_eq!(e, "invalid `queues[0].priority`: must be 0-1000, got 1001");
}

#[test]
fn an_environment_selector_keeps_jobs_on_its_nodes() {
    // Two nodes, only one labelled for the environment; the job waits rather than use
    // the other, and the reason counts only the environment's GPUs.
    let text = r#"
[environment]
selector = { pool = "train" }
[[nodes]]
name = "t1"
unit = "h100"
gpus = 8
labels = { pool = "train" }
[[nodes]]
name = "x1"
unit = "h100"
gpus = 8
[[shares]]
name = "s"
capacity_limits = [ { unit = "h100", max = 16 } ]
strategy = "LEND"
[[events]]
at = 0
submit = { name = "a", share = "s", unit = "h100", gpus = 8 }
[[events]]
at = 0
submit = { name = "b", share = "s", unit = "h100", gpus = 8 }
[[expect]]
at = 0
job = "a"
state = "RUNNING"
node = "t1"
[[expect]]
at = 0
job = "b"
state = "RUNNABLE"
reason = "0 free"
"#;
    let sc = tranche_sim::Scenario::parse(text).unwrap();
    let report = tranche_sim::run(&sc).unwrap();
    assert!(report.passed(), "{}", tranche_sim::render_text(&report));
    // The same cluster without the selector runs both.
    let open = text.replace("selector = { pool = \"train\" }", "");
    let report = tranche_sim::run(&tranche_sim::Scenario::parse(&open).unwrap()).unwrap();
    assert!(!report.passed(), "without a selector b must start on x1");
}
