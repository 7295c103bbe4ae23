//! The AWS Batch-compatible endpoint's part of the state: access keys and tags.

mod common;

use common::*;
use tranche_model::*;
use tranche_state::*;

fn key(id: &str, user: &str) -> AccessKey {
    AccessKey {
        id: id.into(),
        user: user.into(),
        role: KeyRole::User,
        created_at: 0,
        revoked_at: None,
        issuer_serial: None,
        expires_at: None,
    }
}

fn tag(resource: &str, tags: &[(&str, &str)]) -> Command {
    Command::TagResource {
        resource: resource.into(),
        tags: tags
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

fn tags_of<'a>(st: &'a State, resource: &str) -> Vec<(&'a str, &'a str)> {
    st.tags
        .get(resource)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

#[test]
fn a_key_put_twice_is_a_conflict_and_changes_nothing() {
    let mut st = State::new();
    let mut k = key("TKAAAA", "alice");
    k.created_at = 99;
    k.revoked_at = Some(1);
    ok(&mut st, Command::PutAccessKey(k), 10);
    let got = &st.keys["TKAAAA"];
    assert_eq!(
        (got.created_at, got.revoked_at),
        (10, None),
        "stamped at entry time"
    );
    let before = st.clone();
    let e = st
        .apply(&Command::PutAccessKey(key("TKAAAA", "bob")), 20)
        .unwrap_err();
    assert!(
        matches!(e, ApplyError::Conflict(ref m) if m.contains("TKAAAA")),
        "{e:?}"
    );
    assert_eq!(st, before);
    assert_eq!(st.keys["TKAAAA"].user.as_str(), "alice");
    // An id that is not letters and digits is refused as invalid.
    let e = st
        .apply(&Command::PutAccessKey(key("TK-1", "bob")), 20)
        .unwrap_err();
    assert!(matches!(e, ApplyError::Invalid(_)), "{e:?}");
    assert_eq!(st, before);
}

#[test]
fn revoke_sets_revoked_at_once() {
    let mut st = State::new();
    ok(&mut st, Command::PutAccessKey(key("TKAAAA", "alice")), 10);
    let revoke = Command::RevokeAccessKey {
        id: "TKAAAA".into(),
    };
    ok(&mut st, revoke.clone(), 20);
    assert_eq!(st.keys["TKAAAA"].revoked_at, Some(20));
    ok(&mut st, revoke, 30);
    assert_eq!(
        st.keys["TKAAAA"].revoked_at,
        Some(20),
        "kept from the first"
    );
    let e = st
        .apply(
            &Command::RevokeAccessKey {
                id: "TKNONE".into(),
            },
            40,
        )
        .unwrap_err();
    assert!(matches!(e, ApplyError::NotFound { .. }), "{e:?}");
}

#[test]
fn tags_merge_validate_and_untag_removes() {
    let mut st = cluster();
    let r = "quota-share/a";
    ok(&mut st, tag(r, &[("team", "a"), ("cost", "1")]), 1);
    ok(&mut st, tag(r, &[("team", "b"), ("env", "prod")]), 2);
    assert_eq!(
        tags_of(&st, r),
        vec![("cost", "1"), ("env", "prod"), ("team", "b")],
        "merged, existing keys overwritten"
    );
    // 51 tags in all are refused, and so is a key in the `aws:` namespace; neither
    // changes anything.
    let before = st.clone();
    let many: Vec<(String, String)> = (0..48).map(|i| (format!("k{i}"), "v".into())).collect();
    let many: Vec<(&str, &str)> = many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let e = st.apply(&tag(r, &many), 3).unwrap_err();
    assert!(e.to_string().contains("at most 50 tags, got 51"), "{e}");
    let e = st.apply(&tag(r, &[("aws:owner", "x")]), 3).unwrap_err();
    assert!(e.to_string().contains("reserved"), "{e}");
    assert_eq!(st, before);
    // 47 more make 50: taken.
    ok(&mut st, tag(r, &many[..47]), 4);
    assert_eq!(st.tags[r].len(), 50);
    // Untag removes the keys named (an unknown key is no error); no tags left, no
    // entry left.
    let keys: Vec<String> = st.tags[r].keys().cloned().collect();
    let untag = |keys: Vec<String>| Command::UntagResource {
        resource: r.into(),
        keys,
    };
    ok(&mut st, untag(vec!["team".into(), "nope".into()]), 5);
    assert_eq!(st.tags[r].len(), 49);
    assert!(!st.tags[r].contains_key("team"));
    ok(&mut st, untag(keys), 6);
    assert!(!st.tags.contains_key(r));
}

#[test]
fn tagging_a_missing_object_is_not_found() {
    let mut st = cluster();
    let before = st.clone();
    for r in [
        "quota-share/nope",
        "job-queue/nope",
        "service-environment/nope",
        "scheduling-policy/nope",
        "compute-environment/gpu",
        "a",
    ] {
        let e = st.apply(&tag(r, &[("a", "b")]), 1).unwrap_err();
        assert!(
            matches!(e, ApplyError::NotFound { ref name, .. } if name == r),
            "{r}: {e:?}"
        );
        let e = st
            .apply(
                &Command::UntagResource {
                    resource: r.into(),
                    keys: vec!["a".into()],
                },
                1,
            )
            .unwrap_err();
        assert!(matches!(e, ApplyError::NotFound { .. }), "{r}: {e:?}");
    }
    assert_eq!(st, before);
    for r in [
        "quota-share/a",
        "job-queue/q",
        "service-environment/gpu",
        "scheduling-policy/fifo",
    ] {
        assert!(TAGGED_KINDS.iter().any(|k| r.starts_with(k)));
        ok(&mut st, tag(r, &[("a", "b")]), 1);
    }
}

#[test]
fn deleting_a_share_forgets_its_tags() {
    let mut st = cluster();
    ok(&mut st, tag("quota-share/a", &[("team", "a")]), 1);
    ok(&mut st, tag("job-queue/q", &[("team", "a")]), 1);
    let mut s = st.shares[&ShareName::from("a")].clone();
    s.state = ObjState::Disabled;
    ok(&mut st, Command::PutShare(s.clone()), 2);
    assert_eq!(
        tags_of(&st, "quota-share/a"),
        vec![("team", "a")],
        "kept while it exists"
    );
    ok(&mut st, Command::DeleteShare("a".into()), 3);
    assert!(!st.tags.contains_key("quota-share/a"));
    assert_eq!(
        tags_of(&st, "job-queue/q"),
        vec![("team", "a")],
        "others kept"
    );
    // A share made again under the same name starts with no tags.
    s.state = ObjState::Enabled;
    ok(&mut st, Command::PutShare(s), 4);
    assert!(tags_of(&st, "quota-share/a").is_empty());
}
