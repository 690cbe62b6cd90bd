"""What every operator of an iteration DAG shares (``IterationOperator``): the job built from the
DAG run's params, its locations admitted, the lease holder, the data checks' link. What a task
takes from its context and how it fails for good: iterations.operators.task_context; running a
recorded attempt as a Spark job: iterations.operators.spark_attempt."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from airflow.sdk import BaseOperator, BaseOperatorLink
from airflow.sdk.definitions.param import ParamsDict
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from iterations.operators.task_context import batch_id_of, permanent_errors, run_of

JOB_FIELDS = ("job_id", "checkpoint_root", "output_path", "output_format", "max_epochs", "tolerance", "num_partitions",
              "retain_last", "retain_batches", "retain_history", "full_checkpoint_every", "on_damaged_checkpoint",
              "fork_from")


class DataChecksLink(BaseOperatorLink):
    """The data checks' report of the attempt a commit or finish task checked (the Great
    Expectations Data Docs page when something failed or warned, else the JSON result): a
    file:// URL for a local store, s3://bucket/key for S3."""

    name = "Data checks"

    def get_link(self, operator: BaseOperator, *, ti_key: Any) -> str:
        # called in the task's own process when it ends (Airflow pushes the link as an XCom)
        return getattr(operator, "data_checks_url", "") or ""


def own_params(params: ParamsDict, dag: Any) -> ParamsDict:
    """The params a task has beyond its DAG's. Airflow copies every DAG param into every task,
    then validates each copy against its schema whenever the task is serialized (twice per
    ``airflow dags test``, at every parse by the dag-processor, and once more as each task
    starts under ``dags test``): for an iteration DAG, 62 tasks x 14 params. A task's context
    gets the DAG's params (and the run's conf) anyway, so the copies add nothing; a param
    given to the task itself, or differing from the DAG's, is kept. (``iteration_dag`` gives
    its DAG the params once the tasks exist, so that Airflow has none to copy, which also
    spares a deep copy of them per class of each operator at every parse; this is for the
    other DAGs.)"""
    if dag is None or not dag.params:
        return params
    mine = {}
    for name, param in params.items():
        theirs = dag.params.get_param(name) if name in dag.params else None
        if theirs is None or (param.value, param.schema, param.description) != \
                (theirs.value, theirs.schema, theirs.description):
            mine[name] = param
    return ParamsDict(mine)


def _link_url(location: str) -> str:
    return location if "://" in location else "file://" + location


class IterationOperator(BaseOperator):
    """Base: builds the job from params. ``job`` (templated) overrides params key by key."""

    template_fields: Sequence[str] = ("job",)
    ui_color = "#e8f1fb"

    def __init__(
        self,
        *,
        body: str,
        body_param_names: Sequence[str] = (),
        job: dict[str, Any] | None = None,
        aws_conn_id: str | None = "aws_default",
        scheduled: bool = False,
        checks: dict[str, Any] | None = None,
        allowed_roots: Sequence[str] = (),
        checkpoint_roots: Sequence[str] = (),
        output_root: str | None = None,
        allow_take_over: bool = False,
        relax_checks: bool = False,
        lease_wait: float = 60.0,
        lineage_parents: Sequence[Sequence[str]] = (),
        reviewed: bool = False,
        **kwargs: Any,
    ) -> None:
        """``checks``: the DAG's data checks (its checks file), under the run's ``checks`` param.
        ``allowed_roots``: where the run's paths may point (include.store), besides
        ITERATIONS_ALLOWED_ROOTS and the paths given in ``job``. ``checkpoint_roots``: the DAG's
        checkpoint roots besides the run's own (no output may overlap one). ``output_root``:
        the DAG's default ``output_path``; a run that leaves it publishes under
        ``<output_root>/<job_id>``, so that the jobs of one DAG never share an output. ``allow_take_over``:
        whether a run's ``take_over`` param may make another owner's job this DAG's.
        ``relax_checks``: whether a run's ``checks`` param may turn off or loosen the author's
        checks (otherwise it may only add expectations). ``lease_wait``: seconds a task waits
        for another run of the job to end before it fails naming it. ``lineage_parents``: the
        OpenLineage jobs besides the DAG's own a run may name as its parent (``iteration_dag``).
        ``reviewed``: the DAG's author requires a person's approval of every publication
        (``approve_publication``): nothing of its jobs is published before it (include.publication.publish)."""
        super().__init__(**kwargs)
        self.params = own_params(self.params, self.dag if self.has_dag() else None)
        self.allowed_roots = list(allowed_roots)
        self.checkpoint_roots = list(checkpoint_roots)
        self.output_root = output_root
        self.allow_take_over = allow_take_over
        self.relax_checks = relax_checks
        self.lease_wait = lease_wait
        self.lineage_parents = [list(p) for p in lineage_parents]
        self.reviewed = reviewed
        self.checks = checks or {}
        self.body = body
        self.body_param_names = tuple(body_param_names)
        self.job = job or {}
        self.aws_conn_id = aws_conn_id
        self.scheduled = scheduled

    def record_lineage(self, job, **what: Any) -> None:
        """What this task read and published, for OpenLineage (include.publication.openlineage.job_lineage):
        the latest call names the epoch and checkpoint; the outputs are those of every call (a
        head with ``overlap_commits`` may commit the epoch before its own and its own). Never
        fails the task."""
        from include.publication import job_lineage

        try:
            lineage = job_lineage(job, **what)
            earlier = (getattr(self, "_lineage", None) or {}).get("outputs", [])
            lineage["outputs"] = earlier + [o for o in lineage["outputs"] if o not in earlier]
            self._lineage = lineage
        except Exception as e:  # lineage is a report, not the job's work
            self.log.warning("lineage not recorded (%s: %s)", type(e).__name__, e)

    def report_settled(self, job, manifest, published: Mapping[str, str]) -> None:
        """Outputs of an earlier commit that a failure after it had left unpublished, published
        by this task (include.runs.epoch_run.EpochRun.settle): logged, and in this task's lineage
        (each with its version: the one its commit would have announced)."""
        for name, where in sorted(published.items()):
            self.log.info("checkpoint %d output %s published to %s (left unpublished by a failure after "
                          "its commit)", manifest.checkpoint_id, name, where)
        self.record_published(job, manifest, published)

    def record_published(self, job, manifest, names: Iterable[str]) -> list[dict[str, Any]]:
        """The outputs ``names`` that checkpoint ``manifest`` published, as the job's publisher
        announces them (``Publisher.publications``), put in this task's lineage; the records."""
        publications = job.publisher.publications(manifest, names=list(names))
        self.record_lineage(job, epoch=manifest.decision.epoch if manifest.decision else None,
                            checkpoint_id=manifest.checkpoint_id, published=publications)
        return publications

    def announce(self, context: Mapping[str, Any], job, manifest, published: Mapping[str, str]) -> list[str]:
        """The asset events of what this task published (iterations.assets), once each, through
        its outlets' alias; its lineage names the outputs with their versions."""
        from airflow.sdk import AssetAlias

        from iterations.assets import announce

        if not published:
            return []
        publications = self.record_published(job, manifest, published)
        alias = next((o for o in self.outlets if isinstance(o, AssetAlias)), None)
        return announce(context, alias, publications, self.log) if alias is not None else []

    def get_openlineage_facets_on_complete(self, task_instance: Any):
        """The OpenLineage provider's hook (iterations.lineage): the job's input, the outputs
        this task published with their versions, the logical iteration job it is part of."""
        from iterations.lineage import operator_lineage

        return operator_lineage(getattr(self, "_lineage", None))

    def get_openlineage_facets_on_failure(self, task_instance: Any):
        return self.get_openlineage_facets_on_complete(task_instance)

    def pre_execute(self, context: Any) -> None:
        from include.process import skip_exit_collection

        skip_exit_collection()  # airflow dags test / tasks test: no seconds of collection at exit
        self._lineage = None  # this execution's own (dags test may run one operator object again)

    def settings(self, context: Mapping[str, Any]) -> dict[str, Any]:
        """The DAG run's params overridden by ``job``; empty strings count as unset. A run conf
        is closed: a key the DAG has no param for fails the task at once, naming the key and
        the nearest param (include.contract.parameters.check_conf_keys)."""
        from include.contract import check_conf_keys
        from include.errors import ConfigError

        if self.has_dag() and self.dag.params is not None:
            try:
                check_conf_keys(dict(context["params"]), set(self.dag.params.keys()))
            except ConfigError as e:
                raise AirflowFailException(f"refused DAG run params: {e}") from e
            self._check_lineage_parent(context["params"])
        merged = {**dict(context["params"]), **dict(self.job)}
        return {k: v for k, v in merged.items() if v is not None and v != ""}

    def _check_lineage_parent(self, params: Mapping[str, Any]) -> None:
        """A warning naming the parent, once per task, when the run's ``openlineage`` entry names
        a parent the API server would have refused (include.contract.parameters.check_lineage_parent): a
        run not triggered through it (another DAG's TriggerDagRunOperator, ``airflow dags test``,
        the CLI) is not failed for it; the job never reads the entry."""
        from include.contract import LINEAGE_KEY, check_lineage_parent
        from include.errors import ConfigError
        from iterations.closed_conf import lineage_namespace, own_lineage_jobs

        value = params.get(LINEAGE_KEY)
        if not isinstance(value, Mapping) or LINEAGE_KEY in self.dag.params or getattr(self, "_lineage_warned", False):
            return
        try:
            check_lineage_parent(value, own_lineage_jobs(self.dag_id, self.dag.task_ids),
                                 namespace=lineage_namespace(), allowed=self.lineage_parents)
        except ConfigError as e:
            self._lineage_warned = True
            self.log.warning("%s. This run was not triggered through the API server, which refuses such an entry: "
                             "its lineage names that parent (set by whoever made the run); the job does not read it", e)

    def batch_date(self, context: Mapping[str, Any]) -> str:
        """The date a scheduled batch is for: ``batch_date`` (set by continuation runs), the
        run's logical date, or, for a run that has none (started by asset events, or triggered
        without one), the time it was due to run (``run_after``)."""
        from include.runs import batch_date

        when = self.settings(context).get("batch_date") or context.get("logical_date") or \
            getattr(context.get("dag_run"), "run_after", None)
        if when is None:
            raise ValueError("a batch of a scheduled job needs a date: trigger the run with a logical date "
                             "or set the batch_date param")
        return batch_date(when)

    def allowed(self):
        """Where this DAG's runs may read and write (include.store.roots_for_dag): the
        roots of the DAG's defaults and of ``job``, the local directory, the deployment's."""
        from include.store import AllowedRoots, configured_roots

        return AllowedRoots.for_dag([*self.allowed_roots, *configured_roots(
            {k: self.job.get(k) for k in ("input_path", "output_path", "checkpoint_root")})])

    def locations(self, context: Mapping[str, Any]) -> dict[str, Any]:
        """The run's settings with its locations admitted at the door (include.store.door:
        canonical, under the DAG's allowed roots, apart from every checkpoint root; a scheduled
        batch's input and output are its date's; an output left at the DAG's default is the
        job's own, ``<default>/<job_id>``). AirflowFailException naming the value otherwise (a
        retry would fail the same way)."""
        from include.errors import ConfigError
        from include.store import admit_run

        settings = self.settings(context)
        missing = [k for k in ("job_id", "input_path", "checkpoint_root") if not settings.get(k)]
        if missing:
            raise ValueError(f"missing job setting(s) {missing}: set them as DAG params or in job=")
        try:
            settings = admit_run(settings, self.allowed(), checkpoint_roots=self.checkpoint_roots,
                                 output_root=self.output_root,
                                 date=self.batch_date(context) if self.scheduled else None)
            if settings.get("take_over") and not self.allow_take_over:
                raise ConfigError(f"take_over: DAG {self.dag_id} does not allow a run to take a job over "
                                  "(its author sets allow_take_over)")
        except ConfigError as e:  # the params are wrong: a retry would fail the same way
            raise AirflowFailException(f"refused DAG run params: {e}") from e
        return settings

    def job_config(self, context: Mapping[str, Any]):
        from include.contract import InputSpec, JobConfig

        settings = self.locations(context)
        return JobConfig(
            body=self.body,
            input=InputSpec(settings["input_path"], settings.get("input_format") or None),
            body_params={k: settings[k] for k in self.body_param_names if settings.get(k) is not None},
            checks=self.run_checks(settings.get("checks")).to_dict(),
            **{k: settings[k] for k in JOB_FIELDS if settings.get(k) is not None},
        )

    def run_checks(self, run: Any):
        """The run's ``checks`` param over the DAG's checks: a run may add expectations; turning
        the checks off or changing the author's (the DAG's, the body's, the runtime's) is refused
        unless the DAG allows it (``relax_checks``)."""
        from include.checks import CheckSettings, locked_expectation_names, run_settings

        author = CheckSettings.parse(self.checks, "the DAG's checks")
        if not run:  # nothing from the run (the usual case): no need to load the body's metadata
            return author
        from include.contract import resolve_body

        locked = locked_expectation_names(resolve_body(self.body).describe(), author)
        return run_settings(run, author, locked, run_may_relax=self.relax_checks)

    def checked(self, job, commit, what: str, hint: str):
        """Run ``commit()`` (which runs the data checks first); keep the checks' report link;
        a refusal fails the task at once (no retry: the attempt is aborted, a retry cannot
        change its data) with the report's summary."""
        from include.epoch import DataCheckFailed

        try:
            result = commit()
        except DataCheckFailed as e:
            self.note_checks(job)
            raise AirflowFailException(
                f"{what}: the data checks refused the attempt; it is aborted and the previous "
                f"checkpoint stays the latest.\n{e}\n{hint}") from e
        except BaseException:
            self.note_checks(job)  # whatever the checks found before the failure
            raise
        self.note_checks(job)
        return result

    def note_checks(self, job) -> None:
        report = job.committer.last_check_report
        where = (report.locations.get("html") or report.locations.get("json")) if report else None
        self.data_checks_url = _link_url(where) if where else ""
        # the runtime has logged the report's summary (the "iterations" logger reaches the task log)
        if report is not None and report.locations:
            self.log.info("data checks report: %s", ", ".join(f"{k} {v}" for k, v in sorted(report.locations.items())))

    @staticmethod
    def batch_start(job, batch: str, next_epoch: int | None = None) -> int | None:
        """The first epoch of this batch (include.checkpoints.job_records.Batches.start)."""
        return job.log.batches.start(batch, next_epoch)

    def head_result(self, context: Mapping[str, Any], job, head_task_id: str, index: int) -> dict[str, Any]:
        """What the epoch's head did: its XCom, or, when there is none (``airflow tasks test``
        runs tasks one at a time without XCom), the same facts read back from the store."""
        from include.checkpoints import HeadStatus

        head = context["ti"].xcom_pull(task_ids=head_task_id)
        if head:
            return head
        batch = batch_id_of(context)
        start = self.batch_start(job, batch)
        if start is None:
            raise RuntimeError(f"{head_task_id} has not run in batch {batch}: run it first")
        epoch = start + index
        state = job.restorer.state(verify="none")
        if state.latest is not None and epoch <= state.latest.epoch:
            return {"status": "restored", "epoch": epoch}
        if state.status is not HeadStatus.RUNNING:
            raise AirflowSkipException(f"job {job.config.job_id} is {state.status.value}: epoch {epoch} is not needed")
        complete, unfinished = job.attempts.live_attempts(epoch)
        if not complete and not unfinished:
            raise RuntimeError(f"no attempt of epoch {epoch} is recorded: run {head_task_id} first")
        return {"status": "run", "epoch": epoch, "attempt_id": (complete or unfinished)[0].attempt_id}

    def epoch_attempt(self, context: Mapping[str, Any], head_task_id: str, index: int, *, write: bool = False):
        """(run, head result, plan of the head's attempt or None, the checkpoint that attempt
        committed or None): what the epoch's head produced, recovered from XCom and the store.
        The plan is None when the head ran nothing, or when the attempt committed and its plan
        was collected since (a retry of a step after the commit landed:
        include.runs.boundary.resolve_attempt). ``write``: this step writes (the run's lease is held)."""
        from include.runs import EpochRun, resolve_attempt

        job, _ = self.iteration_job(context)
        run = EpochRun(job, batch_id=batch_id_of(context), run=run_of(context))
        if write:
            self.start(context, run, validate=False)  # the head that planned the attempt validated it
        head = self.head_result(context, job, head_task_id, index)
        if head["status"] == "restored":  # by hand after a run task that committed it, or a rerun
            self.log.info("epoch %d is committed: nothing for %s to do", head["epoch"], self.task_id)
        if head["status"] != "run":
            return run, head, None, None
        plan, committed = resolve_attempt(job, head["epoch"], head["attempt_id"])
        return run, head, plan, committed

    def holder(self, context: Mapping[str, Any]):
        """Who holds the job's lease for this task: its DAG run (every task of the run, every
        try); for ``airflow tasks test``, whose every task makes a run of its own, the batch."""
        from include.runs import Holder

        run_id = str(context["run_id"])
        if run_id.startswith("__airflow_temporary_run_"):
            run_id = batch_id_of(context)
        return Holder.dag_run(self.dag_id, run_id)

    def alive(self, context: Mapping[str, Any]):
        """Whether a lease holder is alive, as far as this task can tell: a DAG run holds the
        job until it ends (True, False, or None when it cannot be told)."""
        ti = context.get("ti")

        def alive(holder) -> bool | None:
            if holder.kind != "dag_run" or ti is None or not hasattr(ti, "get_dagrun_state"):
                return None
            try:
                state = str(ti.get_dagrun_state(dag_id=holder.dag_id, run_id=holder.run_id))
            except Exception as e:  # a run that is gone (deleted, replaced) has ended; else: cannot tell
                status = getattr(getattr(e, "response", None), "status_code", None)
                gone = status == 404 or "not_found" in f"{e} {getattr(e, 'detail', '')}".lower()
                self.log.info("the state of %s, which holds the job's lease: %s (%s: %s)", holder.describe(),
                              "gone" if gone else "unknown", type(e).__name__, getattr(e, "detail", None) or e)
                return False if gone else None
            return state.rsplit(".", 1)[-1].lower() not in ("success", "failed")

        return alive

    def hold(self, context: Mapping[str, Any], store):
        """A callable that takes a job's lease (by its id) for this DAG run, waiting for (then
        refused by) another live run as ``start`` does: given to include.runs.open_job, which
        calls it before it writes (a rewind, a recompute, the run's binding to a generation)."""
        from include.runs import JobLease

        def hold(lease_id: str) -> None:
            JobLease(store, lease_id).acquire(self.holder(context), wait=self.lease_wait,
                                              alive=self.alive(context))

        return hold

    def start(self, context: Mapping[str, Any], run, *, validate: bool = True):
        """Before this task writes: the store probed, the job claimed for this DAG (its owner),
        the lease held for this DAG run (include.runs.epoch_run.EpochRun.start); the job's state."""
        return run.start(self.holder(context), dag_id=self.dag_id,
                         take_over=bool(self.settings(context).get("take_over")),
                         lease_wait=self.lease_wait, alive=self.alive(context), validate=validate)

    def skip_epoch_tasks(self, context: Mapping[str, Any], *, after: int | None,
                         also: Sequence[str] = ()) -> None:
        """Skip, at once, the tasks of the epoch groups after ``after`` (None: none of them) and
        the tasks ``also``, rather than one scheduler round per task; ``finish`` (trigger rule
        none_failed) runs next. Ends the calling task as a success; returns if there is nothing
        to skip."""
        later = [
            t for t in self.dag.tasks
            if (after is not None and t.task_id.startswith("epoch_")
                and int(t.task_id.split(".")[0].split("_")[1]) > after)
            or t.task_id in also
        ]
        if not later or context["ti"].map_index != -1:
            return
        from airflow.providers.standard.utils.skipmixin import SkipMixin

        self.log.info("skipping %d task(s)%s: %s", len(later),
                      f" of the epochs after epoch group {after}" if after is not None else "",
                      ", ".join(t.task_id for t in later[:6]) + (", ..." if len(later) > 6 else ""))
        SkipMixin().skip(context["ti"], later)

    def arrivals(self, context: Mapping[str, Any], config=None, store_options=None) -> list[dict[str, Any]]:
        """What the asset events that started this DAG run say arrived (iterations.assets),
        their claims checked against the run's input (include.publication.arrivals.check_arrivals) when
        ``config`` is given, logged once per task; empty for a run no asset event started."""
        from include.publication import CHECKED, check_arrivals, describe
        from iterations.assets import triggering_arrivals

        if getattr(self, "_arrivals", None) is None:
            self._arrivals = triggering_arrivals(context)
            if config is not None and self._arrivals:
                self._arrivals = check_arrivals(self._arrivals, config.input.location, store_options)
            for a in self._arrivals:
                self.log.info("%s: %s", "arrived" if a.get("checked") in (None, CHECKED) else
                              "an asset event says", describe(a))
        return self._arrivals

    def iteration_job(self, context: Mapping[str, Any]):
        """The job this task works on: the generation (checkpoint log) this DAG run works on
        (include.runs.generations: the newest, or a new one when the run rewinds the job); for a
        scheduled DAG, the generation of the batch's date, warm-started from the previous batch."""
        from include.contract import body_reference
        from include.publication import OutputOwner
        from include.runs import check_borders, check_claim, open_job, owner_of
        from include.store import earlier_shared_job, open_store
        from iterations.hooks.iteration_store import IterationStoreHook

        config = self.job_config(context)
        if notice := earlier_shared_job(config.job_id, config.checkpoint_root):
            self.log.warning(notice)
        options = IterationStoreHook(self.aws_conn_id).store_options(config.checkpoint_root)
        store = open_store(config.checkpoint_root, **options)
        settings = self.settings(context)
        take_over = bool(settings.get("take_over"))
        owner = owner_of(config, self.dag_id)
        # who publishes: the job as configured (its generations and a schedule's dates are one job)
        output_owner = OutputOwner(store=config.checkpoint_root, job_id=config.job_id, dag_id=self.dag_id,
                                   body=body_reference(config.body))
        with permanent_errors():  # the borders, before the run's first write (its lease, its generation)
            check_borders(config, store, options, output_owner, take_over=take_over)
        arrivals = self.arrivals(context, config, options)
        if not self.scheduled:
            with permanent_errors():  # a job of another owner: refused before its lease is touched
                check_claim(store, config.job_id, owner, take_over=take_over)
        opened = open_job(config, store, owner=owner, hold=self.hold(context, store),
                          run=batch_id_of(context), rewind_to=settings.get("rewind_to"),
                          on_input_change=settings.get("on_input_change"), store_options=options,
                          batch_date=self.batch_date(context) if self.scheduled else None,
                          recompute=bool(settings.get("recompute")), arrivals=arrivals, output_owner=output_owner,
                          reviewed=self.reviewed)
        if opened.schedule is not None:
            self.generation = (opened.schedule, opened.generation)
        job = opened.job
        self.record_lineage(job)
        return job, options
