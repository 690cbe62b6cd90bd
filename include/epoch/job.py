"""The phases of an epoch, each callable on its own (from a separate process if need be):

    plan   -> restore the latest checkpoint, decide what runs next, record an attempt
    run    -> (Spark side, spark_jobs.epoch) compute the step, the tail writes log and reports
    align  -> all partitions of all heads reported? -> (epoch, terminated)
    check  -> validate what the attempt wrote before it can become state
    commit -> one create-if-absent write of the manifest
    finish -> final checkpoint with the outputs, then publication

Nothing here imports Spark or Airflow: operators and the library runner both call it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from include.checkpoints.checkpoint_log import CheckpointLog
from include.checkpoints.manifest import JobState, Manifest
from include.checks import CheckSettings
from include.contract.body import body_reference, resolve_body
from include.contract.config import JobConfig
from include.contract.sizing import log_partitions
from include.epoch.attempts import Attempts
from include.epoch.commit import Committer, DataCheckFailed
from include.epoch.coordination import Coordination
from include.epoch.coordinators import Coordinator
from include.epoch.plan import DEFAULT_CHECKS, Check, EpochPlan
from include.epoch.restore import Restorer
from include.epoch.stopping import Stopping
from include.errors import CheckpointError
from include.publication.output_owners import OutputOwner
from include.publication.pinned_inputs import check_input, pin_input
from include.publication.publish import Publisher
from include.store import ObjectStore, open_store

if TYPE_CHECKING:  # a run holds the lease (include.runs.boundary.start_run); the job only keeps it
    from include.runs.leases import Lease

log = logging.getLogger("iterations")


class IterationJob:
    """One job's checkpoint log seen through the phases of an epoch, each an object of its own
    over what the job holds (its config, store, log, input, lease):

    - ``restorer`` (include.epoch.restore.Restorer): the state at the latest checkpoint;
    - ``coordination`` (include.epoch.coordination.Coordination): the coordinators;
    - ``attempts`` (include.epoch.attempts.Attempts): plan an epoch or the finish, record it;
    - ``committer`` (include.epoch.commit.Committer): align, check and commit;
    - ``publisher`` (include.publication.publish.Publisher): publish what a checkpoint staged;
    - ``stopping`` (include.epoch.stopping.Stopping): stop requests and savepoints.
    """

    def __init__(
        self,
        config: JobConfig,
        store: ObjectStore | None = None,
        *,
        checks: Sequence[Check] = DEFAULT_CHECKS,
        store_options: Mapping[str, Any] | None = None,
        warm_start: Manifest | None = None,
        coordinators: Mapping[str, Coordinator] | None = None,
        publication_family: Sequence[str] = (),
        rewound_from: Mapping[str, Any] | None = None,
        forked_from: Mapping[str, Any] | None = None,
        may_publish: Callable[[], None] | None = None,
        lease_id: str | None = None,
        output_owner: OutputOwner | None = None,
        arrivals: Sequence[Mapping[str, Any]] = (),
        reviewed: bool = False,
    ):
        """``warm_start``: the final checkpoint (of another job in the same store) whose
        variables epoch 0 starts from, through the body's ``warm_start``; used only while this
        job has no checkpoint of its own. ``coordinators``: extra coordinators by name, besides
        the body's and the built-in ``alignment``. ``publication_family``: other jobs (in the
        same store) whose published versions this job's publications replace and may delete (a
        scheduled batch's earlier generations). ``rewound_from``: this job is a generation that
        recomputes job ``job_id`` from ``epoch`` (include.runs.generations: its first checkpoint is
        copied from there). ``forked_from``: this job is a fork of job ``job_id``'s checkpoint
        ``checkpoint_id`` (epoch ``epoch``; include.runs.forks: its first checkpoint is a copy of
        it, and every plan names it). ``may_publish``: raises to refuse publishing the terminated job's
        outputs (an older generation's, once a newer one exists). ``lease_id``: the job whose
        lease a run of this one holds (the base of its generations, include.runs.generations: one
        run of any generation at a time); default this job. ``output_owner``: who this job
        publishes as (include.publication.output_owners); default this job of its store, outside
        Airflow. ``arrivals``: what the asset events that started this run say arrived
        (include.publication.arrivals.arrival), recorded with the input's version when it is pinned.
        ``reviewed``: nothing of the job is published before a person approved its publication
        (include.publication.publish: the final outputs and every per-epoch output are staged,
        reviewed, then switched at once); a DAG author's safeguard, off by default."""
        if warm_start is not None and warm_start.kind != "final":
            raise CheckpointError(
                f"a job warm-starts from a final checkpoint; checkpoint {warm_start.checkpoint_id} "
                f"of job {warm_start.job_id} is an {warm_start.kind} checkpoint"
            )
        self.config = config
        self.warm_start = warm_start
        self.rewound_from = dict(rewound_from) if rewound_from else None
        self.forked_from = dict(forked_from) if forked_from else None
        self.may_publish = may_publish
        self.store_options = dict(store_options or {})
        self.store = store or open_store(config.checkpoint_root, **self.store_options)
        self.log = CheckpointLog(self.store, config.job_id)
        self.check_settings = CheckSettings.parse(config.checks)
        self._body_meta: dict[str, Any] | None = None
        # this run's hold on the job (include.runs.ownership; include.runs.boundary.start_run): checked
        # before every commit and publication; None: not leased (a test driving phases by hand)
        self.lease: Lease | None = None
        self.lease_id = lease_id or config.job_id
        self.output_owner = output_owner or OutputOwner(store=config.checkpoint_root, job_id=self.lease_id,
                                                        dag_id=None, body=body_reference(config.body))
        self.take_over = False  # the run takes the job and its output locations over (start_run)
        self.arrivals = [dict(a) for a in arrivals]
        self.reviewed = bool(reviewed)
        self._input: Any = None  # input_spec(), once
        self._partitions: int | None = None  # num_partitions, once
        self.coordination = Coordination(self, coordinators)
        self.restorer = Restorer(self, self.coordination)
        self.publisher = Publisher(self, publication_family)
        self.attempts = Attempts(self, self.restorer, self.coordination, self.publisher)
        self.committer = Committer(self, self.attempts, self.coordination, checks)
        self.stopping = Stopping(self.log)

    @property
    def body_meta(self) -> dict[str, Any]:
        if self._body_meta is None:
            body = resolve_body(self.config.body)
            meta = body.describe()
            if self.config.body != meta["name"]:
                meta["ref"] = self.config.body  # how to load it ("package.module:Class")
            meta["params"] = dict(self.config.body_params)
            body.parse_params(self.config.body_params)  # refuse bad parameters before any work
            self._body_meta = meta
        return self._body_meta

    @property
    def pinned_input(self) -> dict[str, Any] | None:
        """The version of a published input this log reads, once ``input_spec`` has found it."""
        return None if self._input is None else self._input.published

    def input_spec(self):
        """The input every epoch of this log reads, pinned (include.publication.pinned_inputs.pin_input, recorded
        at the first call of the log's first run): when it is an output another job published,
        the version this log reads for good; otherwise its files as they were then."""
        if self._input is None:
            spec = self.config.input
            if resolve_body(self.config.body).static_input:
                spec = pin_input(self.store, self.config.job_id, spec, store_options=self.store_options,
                                 arrivals=self.arrivals)
            self._input = spec
        return self._input

    def check_input(self, *, full: bool = False) -> None:
        """InputChanged (naming the file and the ways out) unless the input is what this log
        pinned (include.publication.pinned_inputs.check_input): cheaply (sizes, times, ETags) before every plan,
        ``full`` (every local file hashed) when a run resumes a log that has a checkpoint; both
        before any Spark work. Nothing to check for a body without a static input."""
        if not resolve_body(self.config.body).static_input:
            return

        check_input(self.input_spec(), self.config.job_id, self.store_options, full=full)

    @property
    def num_partitions(self) -> int:
        """The partitions of this log's feedback datasets: the job's ``num_partitions``, or when
        it names none, the count the log was sized with (include.contract.sizing.log_partitions)."""
        if self.config.num_partitions is not None:
            return self.config.num_partitions
        if self._partitions is None:
            def latest_partitions() -> int | None:
                latest = self.log.latest_id()
                return None if latest is None else self.log.load(latest, verify="none").num_partitions

            self._partitions = log_partitions(self.store, self.config.job_id, self.input_spec(),
                                              latest_partitions=latest_partitions, store_options=self.store_options,
                                              static=resolve_body(self.config.body).static_input)
        return self._partitions


__all__ = ["DEFAULT_CHECKS", "Check", "DataCheckFailed", "EpochPlan", "IterationJob", "JobState"]
