//! The admin objects' commands: service environments, scheduling policies, job queues
//! and quota shares, each put (created or replaced) and deleted.

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
}
