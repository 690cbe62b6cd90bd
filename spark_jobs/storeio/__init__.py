"""Spark I/O against an ObjectStore, with no Hadoop S3 connector. Modules: ``write`` (the
tail: ``write_dataset`` and its write paths), ``profile`` (what the tail learns for the data
checks), ``read`` (the replay and inputs), ``sizing`` (joins, freeing what the tail kept).

* Writing (the tail): ``mapInArrow`` over the dataset, shuffled by its partition (one of P);
  each partition writes one Parquet object through the store (local file or S3 PUT), hashes it,
  aggregates its partial metrics and writes its epoch report. Only the small reports come
  back to the driver.
* Reading (the head's replay, and static inputs on S3): a Spark 4 Python data source whose
  partitions are explicit groups of objects; each object is checked against its size and
  SHA-256 from the manifest before it is decoded.
"""

from spark_jobs.storeio.profile import Profile
from spark_jobs.storeio.read import decode_column, input_version, read_dataset, read_files, read_input
from spark_jobs.storeio.sizing import broadcast_threshold, release_kept, sized_for_joins
from spark_jobs.storeio.write import by_partition, write_dataset

__all__ = [
    "Profile", "decode_column", "broadcast_threshold", "by_partition", "input_version", "read_dataset", "read_files",
    "read_input",
    "release_kept", "sized_for_joins", "write_dataset",
]
