//! `GetJobQueueSnapshot`: the jobs at the front of a queue and its shares' use.

use super::queues::OneQueue;
use super::*;

impl Endpoint {
    pub(crate) async fn get_job_queue_snapshot(
        &self,
        cx: &Ctx<'_>,
        body: &[u8],
    ) -> AwsResult<Value> {
        let r: OneQueue = parse(body)?;
        let queue = self
            .arns
            .queue_of(required(&r.job_queue, "jobQueue")?)
            .map_err(AwsError::client)?;
        let now = cx.now();
        let st = cx.state().await?;
        let Some(q) = st.queues.get(&QueueName::from(queue.as_str())) else {
            return Err(AwsError::client(format!(
                "job queue {queue} does not exist"
            )));
        };
        // A FIFO queue shows no quota shares: its implicit one counts in its total only.
        let shown = !is_fifo(q);
        let snap = tranche_controller::views::queue(&st, 100, now);
        let in_queue = |s: &ShareName| st.shares.get(s).is_some_and(|s| s.queue.as_str() == queue);
        let entry = |j: &tranche_proto::JobSummary| json!({"jobArn": self.arns.job(j.id), "earliestTimeAtPosition": j.submitted_at});
        let front: Vec<Value> = snap
            .front
            .iter()
            .filter(|j| j.queue.as_str() == queue)
            .map(entry)
            .collect();
        let mut per_share = Map::new();
        for (s, jobs) in &snap.shares {
            if shown && in_queue(s) {
                if let Some(first) = jobs.first() {
                    per_share.insert(s.to_string(), json!([entry(first)]));
                }
            }
        }
        let usage = tranche_controller::views::shares(&st, now);
        let mut total: BTreeMap<Unit, (u32, u32)> = BTreeMap::new();
        let mut top = vec![];
        for u in usage.iter().filter(|u| in_queue(&u.name)) {
            let used: Vec<(Unit, u32, u32)> = u
                .units
                .iter()
                .map(|x| (x.unit.clone(), x.used, x.max.max(1)))
                .collect();
            for (unit, used, max) in &used {
                let e = total.entry(unit.clone()).or_default();
                e.0 += used;
                e.1 = e.1.max(*max);
            }
            if shown {
                top.push(json!({"quotaShareName": u.name.as_str(), "capacityUsage": self.cap.usage_json(&used)}));
            }
        }
        let total: Vec<(Unit, u32, u32)> = total.into_iter().map(|(u, (a, m))| (u, a, m)).collect();
        Ok(json!({
            "frontOfQueue": {"jobs": front, "lastUpdatedAt": now},
            "frontOfQuotaShares": {"quotaShares": per_share, "lastUpdatedAt": now},
            "queueUtilization": {
                "totalCapacityUsage": self.cap.usage_json(&total),
                "quotaShareUtilization": {"topCapacityUtilization": top},
                "lastUpdatedAt": now,
            },
        }))
    }
}
