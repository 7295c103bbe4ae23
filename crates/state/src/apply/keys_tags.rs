//! The commands of the AWS Batch-compatible endpoint's part of the state: access keys
//! (put and revoked) and the tags of admin objects (set, removed, and dropped with their
//! object).

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
        if self.keys.contains_key(&k.id) {
            return Err(ApplyError::Conflict(format!(
                "access key {} already exists",
                k.id
            )));
        }
        let mut k = k.clone();
        k.created_at = now;
        k.revoked_at = None;
        self.keys.insert(k.id.clone(), k);
        Ok(())
    }

    pub(crate) fn revoke_access_key(&mut self, id: &str, now: Millis) -> Result<(), ApplyError> {
        match self.keys.get_mut(id) {
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
        let mut merged = self.tags.get(resource).cloned().unwrap_or_default();
        merged.extend(tags.iter().map(|(k, v)| (k.clone(), v.clone())));
        validate_tags(&merged, "tags")?;
        self.tags.insert(resource.to_string(), merged);
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
        if let Some(t) = self.tags.get_mut(resource) {
            for k in keys {
                t.remove(k);
            }
            if t.is_empty() {
                self.tags.remove(resource);
            }
        }
        Ok(())
    }

    /// Drops the tags of objects that no longer exist (after a delete).
    pub(crate) fn forget_tags_of_deleted(&mut self) {
        let gone: Vec<String> = self
            .tags
            .keys()
            .filter(|r| !self.tagged_object_exists(r))
            .cloned()
            .collect();
        for r in gone {
            self.tags.remove(&r);
        }
    }
}
