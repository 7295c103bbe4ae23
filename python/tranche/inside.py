"""For code that runs as a Tranche job: report a checkpoint, and know whether the job
runs on loan (on GPUs its share borrowed). Standard library only, so that a training
script can call it without the SDK's dependencies installed on the node.

    >>> import tranche.inside as ti
    >>> torch.save(state, path)
    >>> ti.checkpointed()          # a preemption now loses only the work after this
    >>> ti.on_loan()               # True on borrowed GPUs: a reclaim may stop the job
"""

from __future__ import annotations

import os
import pathlib


def checkpointed() -> bool:
    """Tells Tranche the job has just saved a checkpoint (it touches
    ``$TRANCHE_CHECKPOINT_FILE``, which the node watches). False outside a job."""
    path = os.environ.get("TRANCHE_CHECKPOINT_FILE")
    if not path:
        return False
    pathlib.Path(path).touch()
    return True


def on_loan() -> bool:
    """Whether the job runs on GPUs its share borrowed (``TRANCHE_ON_LOAN=1``)."""
    return os.environ.get("TRANCHE_ON_LOAN") == "1"


def recall_notice_s() -> int:
    """Seconds between a reclaim's signal and the start of the grace period, for a job
    on loan (0 otherwise)."""
    try:
        return int(os.environ.get("TRANCHE_RECALL_NOTICE_S", "0"))
    except ValueError:
        return 0
