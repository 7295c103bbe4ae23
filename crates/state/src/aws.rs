//! The AWS Batch-compatible endpoint's part of the state: access keys and tags.

use std::collections::BTreeMap;

use crate::command::*;
use crate::state::*;
use tranche_model::*;

/// The resource kinds that carry tags, as their names begin.
pub const TAGGED_KINDS: [&str; 4] = [
    "service-environment/",
    "scheduling-policy/",
    "job-queue/",
    "quota-share/",
];

impl State {
    pub(crate) fn put_access_key(&mut self, k: &AccessKey, now: Millis) -> Result<(), ApplyError> {
        k.validate()?;
        if self.aws.keys.contains_key(&k.id) {
            return Err(ApplyError::Conflict(format!(
                "access key {} already exists",
                k.id
            )));
        }
        let mut k = k.clone();
        k.created_at = now;
        k.revoked_at = None;
        self.aws.keys.insert(k.id.clone(), k);
        Ok(())
    }

    pub(crate) fn revoke_access_key(&mut self, id: &str, now: Millis) -> Result<(), ApplyError> {
        match self.aws.keys.get_mut(id) {
            None => Err(ApplyError::NotFound {
                kind: "access key".into(),
                name: id.into(),
            }),
            Some(k) => {
                if k.revoked_at.is_none() {
                    k.revoked_at = Some(now);
                }
                Ok(())
            }
        }
    }

    /// Whether `resource` (`kind/name`) names an object that exists.
    pub fn tagged_object_exists(&self, resource: &str) -> bool {
        let Some((kind, name)) = resource.split_once('/') else {
            return false;
        };
        match kind {
            "service-environment" => self.environments.contains_key(&EnvName::from(name)),
            "scheduling-policy" => self.policies.contains_key(&PolicyName::from(name)),
            "job-queue" => self.queues.contains_key(&QueueName::from(name)),
            "quota-share" => self.shares.contains_key(&ShareName::from(name)),
            _ => false,
        }
    }

    pub(crate) fn tag_resource(
        &mut self,
        resource: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), ApplyError> {
        if !self.tagged_object_exists(resource) {
            return Err(ApplyError::NotFound {
                kind: "resource".into(),
                name: resource.into(),
            });
        }
        let mut merged = self.aws.tags.get(resource).cloned().unwrap_or_default();
        merged.extend(tags.iter().map(|(k, v)| (k.clone(), v.clone())));
        validate_tags(&merged, "tags")?;
        self.aws.tags.insert(resource.to_string(), merged);
        Ok(())
    }

    pub(crate) fn untag_resource(
        &mut self,
        resource: &str,
        keys: &[String],
    ) -> Result<(), ApplyError> {
        if !self.tagged_object_exists(resource) {
            return Err(ApplyError::NotFound {
                kind: "resource".into(),
                name: resource.into(),
            });
        }
        if let Some(t) = self.aws.tags.get_mut(resource) {
            for k in keys {
                t.remove(k);
            }
            if t.is_empty() {
                self.aws.tags.remove(resource);
            }
        }
        Ok(())
    }

    /// Drops the tags of objects that no longer exist (after a delete).
    pub(crate) fn forget_tags_of_deleted(&mut self) {
        let gone: Vec<String> = self
            .aws
            .tags
            .keys()
            .filter(|r| !self.tagged_object_exists(r))
            .cloned()
            .collect();
        for r in gone {
            self.aws.tags.remove(&r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(st: &mut State, cmd: Command, now: Millis) {
        st.apply(&cmd, now)
            .unwrap_or_else(|e| panic!("{cmd:?} refused: {e}"));
    }

    /// Environment `gpu`, policy `fifo`, queue `q` and share `s` (LEND, max 4).
    fn objects() -> State {
        let mut st = State::new();
        let limits = vec![CapacityLimit {
            unit: "h100".into(),
            max: 4,
        }];
        ok(
            &mut st,
            Command::PutEnvironment(ServiceEnvironment {
                name: "gpu".into(),
                selector: BTreeMap::new(),
                capacity_limits: limits.clone(),
                state: ObjState::Enabled,
            }),
            0,
        );
        ok(
            &mut st,
            Command::PutPolicy(SchedulingPolicy {
                name: "fifo".into(),
                idle_resource_assignment: IdleAssignment::Fifo,
            }),
            0,
        );
        ok(
            &mut st,
            Command::PutQueue(JobQueue {
                name: "q".into(),
                priority: 1,
                state: ObjState::Enabled,
                environment: "gpu".into(),
                policy: "fifo".into(),
            }),
            0,
        );
        ok(
            &mut st,
            Command::PutShare(QuotaShare {
                name: "s".into(),
                queue: "q".into(),
                capacity_limits: limits,
                resource_sharing: ResourceSharing {
                    strategy: Strategy::Lend,
                    borrow_limit: None,
                },
                in_share_preemption: false,
                state: ObjState::Enabled,
                members: vec![],
                default_grace_s: 30,
                max_grace_s: 600,
                min_runtime_s: 0,
            }),
            0,
        );
        st
    }

    fn key(id: &str, user: &str) -> AccessKey {
        AccessKey {
            id: id.into(),
            user: user.into(),
            role: KeyRole::User,
            created_at: 0,
            revoked_at: None,
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
        st.aws
            .tags
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
        let got = &st.aws.keys["TKAAAA"];
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
        assert_eq!(st.aws.keys["TKAAAA"].user.as_str(), "alice");
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
        assert_eq!(st.aws.keys["TKAAAA"].revoked_at, Some(20));
        ok(&mut st, revoke, 30);
        assert_eq!(
            st.aws.keys["TKAAAA"].revoked_at,
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
        let mut st = objects();
        let r = "quota-share/s";
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
        assert_eq!(st.aws.tags[r].len(), 50);
        // Untag removes the keys named (an unknown key is no error); no tags left, no
        // entry left.
        let keys: Vec<String> = st.aws.tags[r].keys().cloned().collect();
        let untag = |keys: Vec<String>| Command::UntagResource {
            resource: r.into(),
            keys,
        };
        ok(&mut st, untag(vec!["team".into(), "nope".into()]), 5);
        assert_eq!(st.aws.tags[r].len(), 49);
        assert!(!st.aws.tags[r].contains_key("team"));
        ok(&mut st, untag(keys), 6);
        assert!(!st.aws.tags.contains_key(r));
    }

    #[test]
    fn tagging_a_missing_object_is_not_found() {
        let mut st = objects();
        let before = st.clone();
        for r in [
            "quota-share/nope",
            "job-queue/nope",
            "service-environment/nope",
            "scheduling-policy/nope",
            "compute-environment/gpu",
            "s",
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
            "quota-share/s",
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
        let mut st = objects();
        ok(&mut st, tag("quota-share/s", &[("team", "a")]), 1);
        ok(&mut st, tag("job-queue/q", &[("team", "a")]), 1);
        let mut s = st.shares[&ShareName::from("s")].clone();
        s.state = ObjState::Disabled;
        ok(&mut st, Command::PutShare(s.clone()), 2);
        assert_eq!(
            tags_of(&st, "quota-share/s"),
            vec![("team", "a")],
            "kept while it exists"
        );
        ok(&mut st, Command::DeleteShare("s".into()), 3);
        assert!(!st.aws.tags.contains_key("quota-share/s"));
        assert_eq!(
            tags_of(&st, "job-queue/q"),
            vec![("team", "a")],
            "others kept"
        );
        // A share made again under the same name starts with no tags.
        s.state = ObjState::Enabled;
        ok(&mut st, Command::PutShare(s), 4);
        assert!(tags_of(&st, "quota-share/s").is_empty());
    }
}
