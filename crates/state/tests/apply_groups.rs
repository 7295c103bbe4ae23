//! Groups of quota shares (nested quotas): what the state accepts and refuses.

mod common;

use common::*;
use tranche_model::*;
use tranche_state::*;

fn group(name: &str, shares: &[&str], groups: &[&str], max: u32, strategy: Strategy) -> ShareGroup {
    ShareGroup::new(name, "q", shares, groups, ("h100", max), strategy)
}

/// The refusal of `cmd`, which must change nothing.
fn refused(st: &mut State, cmd: Command) -> String {
    let before = st.clone();
    let e = st.apply(&cmd, 5).unwrap_err();
    assert_eq!(*st, before, "a refused command changed the state");
    e.to_string()
}

#[test]
fn groups_nest_and_each_member_has_one_group() {
    let mut st = cluster();
    ok(
        &mut st,
        Command::PutShare(share("c", Strategy::Reserve, 4)),
        1,
    );
    ok(
        &mut st,
        Command::PutGroup(group("research", &["a", "b"], &[], 16, Strategy::Lend)),
        2,
    );
    assert_eq!(
        st.group_of(&"a".into()).map(|g| g.as_str()),
        Some("research")
    );
    ok(
        &mut st,
        Command::PutGroup(group("org", &["c"], &["research"], 20, Strategy::Reserve)),
        3,
    );
    assert_eq!(
        st.group_of(&"research".into()).map(|g| g.as_str()),
        Some("org")
    );
    // A share in two groups, a missing member, a group in itself, a name taken.
    let e = refused(
        &mut st,
        Command::PutGroup(group("other", &["a"], &[], 8, Strategy::Lend)),
    );
    assert!(
        e.contains("shares[0]") && e.contains("quota share a is in group research already"),
        "{e}"
    );
    let e = refused(
        &mut st,
        Command::PutGroup(group("other", &["zz"], &[], 8, Strategy::Lend)),
    );
    assert!(e.contains("quota share zz does not exist"), "{e}");
    let e = refused(
        &mut st,
        Command::PutGroup(group("research", &["a", "b"], &["org"], 16, Strategy::Lend)),
    );
    assert!(e.contains("would contain itself"), "{e}");
    let e = refused(
        &mut st,
        Command::PutGroup(group("a", &["c"], &[], 8, Strategy::Lend)),
    );
    assert!(e.contains("a quota share is named a"), "{e}");
    // Deleting a member or a group another group lists is refused until it is taken
    // out; a queue with groups is not deleted.
    let mut a = st.shares[&ShareName::from("a")].clone();
    a.state = ObjState::Disabled;
    ok(&mut st, Command::PutShare(a), 4);
    let e = refused(&mut st, Command::DeleteShare("a".into()));
    assert!(
        e.contains("quota share a is in group research; take it out of the group first"),
        "{e}"
    );
    let e = refused(&mut st, Command::DeleteGroup("research".into()));
    assert!(e.contains("group research is in group org"), "{e}");
    ok(&mut st, Command::DeleteGroup("org".into()), 5);
    ok(&mut st, Command::DeleteGroup("research".into()), 6);
    assert!(st.groups.is_empty());
    ok(&mut st, Command::DeleteShare("a".into()), 7);
}

#[test]
fn groups_nest_at_most_four_levels() {
    let mut st = cluster();
    ok(
        &mut st,
        Command::PutGroup(group("g1", &["a"], &[], 8, Strategy::Lend)),
        1,
    );
    for (i, below) in [(2, "g1"), (3, "g2"), (4, "g3")] {
        let name = format!("g{i}");
        ok(
            &mut st,
            Command::PutGroup(group(&name, &[], &[below], 8, Strategy::Lend)),
            i,
        );
    }
    let e = refused(
        &mut st,
        Command::PutGroup(group("g5", &[], &["g4"], 8, Strategy::Lend)),
    );
    assert!(e.contains("groups nest at most 4 levels"), "{e}");
    // Nor by a level below: g0 in g1 would sit under four groups.
    ok(
        &mut st,
        Command::PutGroup(group("g0", &["b"], &[], 8, Strategy::Lend)),
        5,
    );
    let e = refused(
        &mut st,
        Command::PutGroup(group("g1", &["a"], &["g0"], 8, Strategy::Lend)),
    );
    assert!(e.contains("group g0 would be 5 or more levels deep"), "{e}");
}

#[test]
fn a_group_is_checked_on_its_own() {
    let mut g = group("g", &[], &[], 8, Strategy::Lend);
    let e = g.validate().unwrap_err();
    assert!(e.rule.contains("1 to 20 members"), "{e}");
    g.shares = vec!["a".into(), "a".into()];
    let e = g.validate().unwrap_err();
    assert_eq!(e.field, "shares[1]");
    g.shares = vec!["a".into()];
    g.resource_sharing.borrow_limit = Some(10);
    let e = g.validate().unwrap_err();
    assert!(
        e.rule
            .contains("only allowed with strategy LEND_AND_BORROW"),
        "{e}"
    );
}
