"""Operators of an iteration DAG (one module each: base, spark_attempt, head, commit, finish,
review, publish, stop; what a task takes from its context: task_context); this module names them all, for DAG
files and for the paths serialized DAGs refer to.

Each is a thin adapter over ``include.epoch.job.IterationJob`` and the epoch protocol
(``include.runs.boundary``). The job's settings come from the DAG run's params (validated by their
JSON schema), optionally overridden by ``job``, which is templated. Heavy imports (pyspark)
happen inside ``execute``.
"""

from iterations.operators.base import JOB_FIELDS, DataChecksLink, IterationOperator, own_params
from iterations.operators.commit import EpochCommitOperator
from iterations.operators.finish import FinishOperator
from iterations.operators.head import EpochHeadOperator
from iterations.operators.publish import PublishOperator
from iterations.operators.review import PublicationReviewOperator
from iterations.operators.spark_attempt import SparkAttemptOperator
from iterations.operators.stop import StopRequestOperator
from iterations.operators.task_context import batch_id_of, batch_id_of_run, permanent_errors

__all__ = [
    "JOB_FIELDS", "DataChecksLink", "EpochCommitOperator", "EpochHeadOperator", "FinishOperator",
    "IterationOperator", "PublicationReviewOperator", "PublishOperator", "SparkAttemptOperator",
    "StopRequestOperator", "batch_id_of", "batch_id_of_run", "own_params", "permanent_errors",
]
