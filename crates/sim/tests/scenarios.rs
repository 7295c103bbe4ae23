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

#[test]
fn an_invalid_share_is_reported_with_its_field() {
    let text = BASE.replace(
        "strategy = \"LEND\"",
        "strategy = \"LEND\"\nborrow_limit = 10",
    );
    let sc = tranche_sim::Scenario::parse(&text).unwrap();
    let e = tranche_sim::run(&sc).unwrap_err();
    assert!(
        e.contains("shares[0]") && e.contains("resource_sharing.borrow_limit"),
        "{e}"
    );
    let e = parse_err(&BASE.replace("\"LEND\"", "\"SHARE_ALIKE\""));
    assert!(e.contains("unknown variant `SHARE_ALIKE`"), "{e}");
}
