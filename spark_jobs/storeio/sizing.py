"""Sizing a restored dataset for joins (broadcast when its stored bytes allow), and freeing
what the tail kept."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def sized_for_joins(df: DataFrame, stored_bytes: int) -> DataFrame:
    """``df`` marked for broadcast joins (``F.broadcast``) when the Parquet it was stored as
    is at most ``spark.sql.autoBroadcastJoinThreshold``: the decision Spark takes for a Parquet
    table of those files, which it cannot take here. A variable the next epoch starts from is
    a local checkpoint or a read through the store's data source, and Spark's size estimate
    for either is useless: a local checkpoint inherits the estimate of the plan that computed
    it (a join's is the product of its sides': PageRank's ranks are estimated at tens of TiB
    for 1.5 MB), the data source reports none. Without the mark, each epoch's joins with the
    variable are planned as sort-merge joins and shuffle the other side (PageRank's edges,
    the whole graph, every epoch). With the threshold at -1, nothing is marked."""
    threshold = broadcast_threshold(df.sparkSession)
    return F.broadcast(df) if threshold is not None and 0 <= stored_bytes <= threshold else df


_BYTE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30,
               "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "p": 1 << 50, "pb": 1 << 50}


def broadcast_threshold(spark: SparkSession) -> int | None:
    """The session's ``spark.sql.autoBroadcastJoinThreshold`` in bytes (Spark's byte-string
    syntax: ``10485760b``, ``10m``, ``10MB``), or None when it is off (negative) or unreadable."""
    import re

    text = str(spark.conf.get("spark.sql.autoBroadcastJoinThreshold", "10485760b")).strip().lower()
    m = re.fullmatch(r"(-?\d+)\s*([a-z]*)", text)
    if not m or m.group(2) not in _BYTE_UNITS or int(m.group(1)) < 0:
        return None
    return int(m.group(1)) * _BYTE_UNITS[m.group(2)]


def release_kept(checkpointed: DataFrame | None) -> None:
    """Free the blocks of a frame ``write_dataset`` kept. A local checkpoint's blocks belong to
    its RDD, which ``DataFrame.unpersist`` does not reach: on a classic session they are
    unpersisted through the JVM; a Spark Connect session releases them when the frame is
    garbage collected. Best effort: a session that is gone took them with it."""
    if checkpointed is None:
        return
    try:
        jdf = getattr(checkpointed, "_jdf", None)
        if jdf is not None:
            jdf.logicalPlan().rdd().unpersist(False)
    except Exception:
        pass
