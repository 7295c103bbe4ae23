"""A façade with the verbs of SageMaker's ``aws_batch.TrainingQueue``, for users coming
from it: a queue, and jobs submitted into a quota share of it."""

from __future__ import annotations

from typing import Any, Sequence

from .client import Cluster, Job


class TrainingQueue:
    """The jobs of one queue of a cluster.

    Args:
        queue_name: the queue (``q`` in ``tranche dev``).
        cluster: the cluster; default: :meth:`Cluster.from_config`.
    """

    def __init__(self, queue_name: str, cluster: Cluster | None = None) -> None:
        self.queue_name = queue_name
        self.cluster = cluster or Cluster.from_config()

    def submit(
        self,
        command: Sequence[str],
        *,
        share_identifier: str,
        gpus: int = 1,
        job_name: str = "job",
        priority: int = 0,
        timeout: int | str | None = None,
        tags: dict[str, str] | None = None,
        **kw: Any,
    ) -> Job:
        """Submits a job into ``share_identifier`` (``priority`` is the scheduling
        priority; ``timeout`` its time limit)."""
        return self.cluster.submit(
            share=share_identifier,
            gpus=gpus,
            command=command,
            name=job_name,
            queue=self.queue_name,
            priority=priority,
            time_limit=timeout,
            tags=tags,
            **kw,
        )

    def list_jobs(self, job_name: str | None = None, status: str | None = "RUNNING") -> list[Job]:
        """This queue's jobs in ``status`` (``None``: any), optionally by name."""
        jobs = [j for j in self.cluster.jobs(state=status) if j._data.get("queue") == self.queue_name]
        return [j for j in jobs if job_name is None or j._data.get("name") == job_name]

    def list_jobs_by_share(self, status: str | None = "RUNNING", share_identifier: str | None = None) -> list[Job]:
        """This queue's jobs of one share in ``status`` (``None``: any)."""
        return [j for j in self.cluster.jobs(share=share_identifier, state=status)
                if j._data.get("queue") == self.queue_name]

    def get_job(self, job_name: str) -> Job:
        """The latest job of this queue with that name (or that id)."""
        if job_name.isdigit():
            return self.cluster.job(int(job_name))
        named = self.list_jobs(job_name=job_name, status=None)
        if not named:
            from .errors import NotFound

            raise NotFound(404, "not_found", f"no job named {job_name!r} in queue {self.queue_name}")
        return named[-1]
