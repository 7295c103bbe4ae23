//! The admin objects' commands: service environments, scheduling policies, job queues,
//! quota shares and their groups, each put (created or replaced) and deleted.

use crate::command::*;
use crate::state::*;
use tranche_model::*;

impl State {
    pub(super) fn put_environment(&mut self, e: &ServiceEnvironment) -> Result<(), ApplyError> {
        e.validate()?;
        self.index.names.add_environment(e);
        self.environments.insert(e.name.clone(), e.clone());
        Ok(())
    }

    pub(super) fn delete_environment(&mut self, n: &EnvName) -> Result<(), ApplyError> {
        if !self.environments.contains_key(n) {
            return Err(not_found("environment", n));
        }
        if let Some(q) = self.queues.values().find(|q| &q.environment == n) {
            return Err(conflict(format!(
                "environment {n} is used by queue {}; delete the queue first",
                q.name
            )));
        }
        self.environments.remove(n);
        Ok(())
    }

    pub(super) fn put_policy(&mut self, p: &SchedulingPolicy) -> Result<(), ApplyError> {
        p.validate()?;
        self.policies.insert(p.name.clone(), p.clone());
        Ok(())
    }

    pub(super) fn delete_policy(&mut self, n: &PolicyName) -> Result<(), ApplyError> {
        if !self.policies.contains_key(n) {
            return Err(not_found("scheduling policy", n));
        }
        if let Some(q) = self.queues.values().find(|q| &q.policy == n) {
            return Err(conflict(format!(
                "scheduling policy {n} is used by queue {}",
                q.name
            )));
        }
        self.policies.remove(n);
        Ok(())
    }

    pub(super) fn put_queue(&mut self, q: &JobQueue) -> Result<(), ApplyError> {
        q.validate()?;
        if !self.environments.contains_key(&q.environment) {
            return Err(ValidationError::new(
                "environment",
                format!("environment {} does not exist", q.environment),
            )
            .into());
        }
        if !self.policies.contains_key(&q.policy) {
            return Err(ValidationError::new(
                "policy",
                format!("scheduling policy {} does not exist", q.policy),
            )
            .into());
        }
        if let Some(old) = self.queues.get(&q.name) {
            if old.environment != q.environment
                && self.active_jobs().any(|j| j.spec.queue == q.name)
            {
                return Err(conflict(format!(
                    "queue {} has running jobs; its environment cannot change until they end",
                    q.name
                )));
            }
        }
        self.index.names.add(q.name.as_str());
        self.queues.insert(q.name.clone(), q.clone());
        Ok(())
    }

    pub(super) fn delete_queue(&mut self, n: &QueueName) -> Result<(), ApplyError> {
        let q = self.queues.get(n).ok_or_else(|| not_found("queue", n))?;
        if q.state != ObjState::Disabled {
            return Err(conflict(format!(
                "queue {n} must be DISABLED before it is deleted"
            )));
        }
        if let Some(s) = self.shares_of(n).next() {
            return Err(conflict(format!(
                "queue {n} still has quota share {}; delete it first",
                s.name
            )));
        }
        if let Some(g) = self.groups.values().find(|g| &g.queue == n) {
            return Err(conflict(format!(
                "queue {n} still has group {}; delete it first",
                g.name
            )));
        }
        if self
            .jobs
            .values()
            .any(|j| &j.spec.queue == n && !j.status.is_terminal())
        {
            return Err(conflict(format!("queue {n} still has unfinished jobs")));
        }
        self.queues.remove(n);
        Ok(())
    }

    pub(super) fn put_share(&mut self, s: &QuotaShare) -> Result<(), ApplyError> {
        s.validate()?;
        if !self.queues.contains_key(&s.queue) {
            return Err(
                ValidationError::new("queue", format!("queue {} does not exist", s.queue)).into(),
            );
        }
        match self.shares.get(&s.name) {
            Some(old) if old.queue != s.queue => {
                return Err(ValidationError::new(
                    "queue",
                    format!(
                        "share {} belongs to queue {}; a share cannot move to another queue",
                        s.name, old.queue
                    ),
                )
                .into());
            }
            Some(_) => {}
            None => {
                let n = self.shares_of(&s.queue).count();
                if n >= MAX_SHARES_PER_QUEUE {
                    return Err(ValidationError::new(
                        "queue",
                        format!("queue {} already has {n} quota shares; at most {MAX_SHARES_PER_QUEUE} are allowed", s.queue),
                    )
                    .into());
                }
            }
        }
        self.index.names.add_share(s);
        self.shares.insert(s.name.clone(), s.clone());
        Ok(())
    }

    /// Deleting a share terminates its jobs: waiting ones are cancelled now, running ones
    /// get their checkpoint signal and are cancelled when they exit.
    pub(super) fn delete_share(&mut self, n: &ShareName, now: Millis) -> Result<(), ApplyError> {
        let s = self
            .shares
            .get(n)
            .ok_or_else(|| not_found("quota share", n))?;
        if s.state != ObjState::Disabled {
            return Err(conflict(format!(
                "quota share {n} must be DISABLED before it is deleted"
            )));
        }
        if let Some(g) = self.group_of(n) {
            return Err(conflict(format!(
                "quota share {n} is in group {g}; take it out of the group first"
            )));
        }
        let ids: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| &j.spec.share == n && !j.status.is_terminal())
            .map(|j| j.id)
            .collect();
        for id in ids {
            self.stop_or_cancel(
                id,
                StopKind::Cancel,
                &format!("quota share {n} deleted"),
                now,
            );
        }
        self.shares.remove(n);
        Ok(())
    }

    /// Creates or replaces a group of shares. Its members must exist in its queue and
    /// be in no other group; groups may not contain themselves, nor nest deeper than
    /// [`MAX_GROUP_DEPTH`] levels.
    pub(super) fn put_group(&mut self, g: &ShareGroup) -> Result<(), ApplyError> {
        g.validate()?;
        if !self.queues.contains_key(&g.queue) {
            return Err(
                ValidationError::new("queue", format!("queue {} does not exist", g.queue)).into(),
            );
        }
        if self.shares.contains_key(&g.name) {
            return Err(ValidationError::new(
                "name",
                format!(
                    "a quota share is named {}; a group needs a name of its own",
                    g.name
                ),
            )
            .into());
        }
        if let Some(old) = self.groups.get(&g.name).filter(|o| o.queue != g.queue) {
            return Err(ValidationError::new(
                "queue",
                format!(
                    "group {} belongs to queue {}; a group cannot move to another queue",
                    g.name, old.queue
                ),
            )
            .into());
        }
        let elsewhere = |member: &ShareName| {
            self.groups
                .values()
                .find(|o| {
                    o.name != g.name && (o.shares.contains(member) || o.groups.contains(member))
                })
                .map(|o| o.name.clone())
        };
        // Members of either kind: each exists, in the group's queue, in no other group.
        let shares = g.shares.iter().enumerate().map(|(i, m)| {
            let queue = self.shares.get(m).map(|s| s.queue.clone());
            (format!("shares[{i}]"), ("quota share", "share"), m, queue)
        });
        let groups = g.groups.iter().enumerate().map(|(i, m)| {
            let queue = self.groups.get(m).map(|o| o.queue.clone());
            (format!("groups[{i}]"), ("group", "group"), m, queue)
        });
        for (field, (kind, short), m, queue) in shares.chain(groups) {
            let rule = match queue {
                None => Some(format!("{kind} {m} does not exist")),
                Some(q) if q != g.queue => {
                    Some(format!("{kind} {m} is in queue {q}, not {}", g.queue))
                }
                Some(_) => elsewhere(m).map(|o| {
                    format!("{kind} {m} is in group {o} already; a {short} has one group")
                }),
            };
            if let Some(rule) = rule {
                return Err(ValidationError::new(field, rule).into());
            }
        }
        // The groups of the queue as they would be: each one's chain of groups above it
        // must end (no cycle) within MAX_GROUP_DEPTH levels.
        let mut after: std::collections::BTreeMap<&ShareName, &ShareGroup> = self
            .groups
            .values()
            .filter(|o| o.queue == g.queue)
            .map(|o| (&o.name, o))
            .collect();
        after.insert(&g.name, g);
        let mut parent: std::collections::BTreeMap<&ShareName, &ShareName> = Default::default();
        for o in after.values() {
            for m in &o.groups {
                parent.insert(m, &o.name);
            }
        }
        for name in after.keys() {
            let mut levels = 1;
            let mut at = *name;
            while let Some(&p) = parent.get(at) {
                if p == *name {
                    return Err(ValidationError::new(
                        "groups",
                        format!("group {} would contain itself (through group {at})", g.name),
                    )
                    .into());
                }
                levels += 1;
                if levels > MAX_GROUP_DEPTH {
                    return Err(ValidationError::new(
                        "groups",
                        format!(
                            "groups nest at most {MAX_GROUP_DEPTH} levels; group {name} would be {levels} or more levels deep"
                        ),
                    )
                    .into());
                }
                at = p;
            }
        }
        self.index.names.add(g.name.as_str());
        self.groups.insert(g.name.clone(), g.clone());
        Ok(())
    }

    /// Deletes a group that no other group lists; its members are then in no group.
    pub(super) fn delete_group(&mut self, n: &ShareName) -> Result<(), ApplyError> {
        if !self.groups.contains_key(n) {
            return Err(not_found("group", n));
        }
        if let Some(p) = self.group_of(n) {
            return Err(conflict(format!(
                "group {n} is in group {p}; take it out of that group first"
            )));
        }
        self.groups.remove(n);
        Ok(())
    }
}
