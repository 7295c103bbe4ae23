"""Tranche's Python SDK: submit, watch and manage jobs on a Tranche GPU cluster.

    >>> import tranche
    >>> cluster = tranche.Cluster.from_config()          # $TRANCHE_CONFIG, as the CLI
    >>> job = cluster.submit(share="nlp", gpus=1, command=["echo", "hi"])
    >>> job.wait()
    'SUCCEEDED'
    >>> job.logs()
    'hi\\n'
"""

from .client import TERMINAL, Cluster, Event, Job, parse_duration
from .errors import (
    BadRequest,
    Conflict,
    ConnectionFailed,
    Forbidden,
    NotFound,
    TrancheError,
    Unauthenticated,
    Unavailable,
)
from .queue import TrainingQueue

__all__ = [
    "TERMINAL",
    "BadRequest",
    "Cluster",
    "Conflict",
    "ConnectionFailed",
    "Event",
    "Forbidden",
    "Job",
    "NotFound",
    "TrainingQueue",
    "TrancheError",
    "Unauthenticated",
    "Unavailable",
    "parse_duration",
]
