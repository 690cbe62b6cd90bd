"""Reading a job's overview from its store, read-only (``include.runs.overview.job_overview``)."""

from __future__ import annotations

import json
import re
from typing import Any

from include.checkpoints.checkpoint_log import ABANDONED, CheckpointLog, describe_run
from include.checkpoints.layout import ATTEMPT_ID_PATTERN, JOB_ID_PATTERN, JobLayout, check_job_id, report_foreign
from include.checkpoints.manifest import Manifest
from include.checks.report_view import CheckView, check_view
from include.errors import CheckpointCorrupted, CheckpointError, ConfigError, ObjectNotFound
from include.runs.forks import forks_of, read_fork
from include.runs.generations import lineage_of
from include.runs.overview_model import (
    AttemptView,
    BatchView,
    EpochView,
    EventsView,
    FinishView,
    GenerationView,
    JobOverview,
    OutputView,
    job_not_found,
)
from include.store.readonly import ReadOnlyStore


class OverviewReader:
    def __init__(self, store: ReadOnlyStore, job_id: str):
        self.store = store
        self.log = CheckpointLog(store, check_job_id(job_id))
        self.layout = self.log.layout
        self.job_id = job_id
        self.objects = store.list(self.layout.root + "/")
        if not self.objects:
            raise job_not_found(store, job_id)

    def _keys(self, sub: str) -> list[str]:
        prefix = f"{self.layout.root}/{sub}/"
        return [o.key[len(prefix):] for o in self.objects if o.key.startswith(prefix)]

    def _json(self, key: str) -> Any:
        try:
            return json.loads(self.store.get(key))
        except (ObjectNotFound, ValueError):
            return None

    def overview(self, metric: str | None) -> JobOverview:
        sizes = {o.key: o.size for o in self.objects}
        ids = sorted({i for k in self._keys("checkpoints") if (i := JobLayout.parse_id(k)) is not None})
        retired = sorted({i for k in self._keys("retired") if (i := JobLayout.parse_id(k)) is not None})
        manifests: dict[int, Manifest] = {}
        damaged: dict[int, str] = {}  # checkpoint id -> why the log refuses its manifest
        for cid in [i for i in ids if i not in retired]:
            try:
                manifests[cid] = self.log.load(cid, verify="none")
            except CheckpointCorrupted as e:  # neither kept nor retired: listed once, as damaged, with why
                damaged[cid] = str(e)
            except CheckpointError:  # retired between the listing and the read
                retired.append(cid)
        kept = [i for i in ids if i in manifests]
        batch_finals = self.log.batches.finals()
        savepoints = self.log.control.savepoints()
        latest = ids[-1] if ids else None
        final = next((m for m in manifests.values() if m.kind == "final"), None)
        final_id = final.checkpoint_id if final is not None else None

        attempts = self._attempts()  # epoch -> attempt id -> AttemptView (uncommitted)
        checks = self._checks()  # epoch -> [CheckView]
        epoch_ids = sorted(({m.epoch for m in manifests.values() if m.kind == "epoch"}
                            | set(retired) | set(damaged) | set(attempts) | set(checks)) - {final_id})
        summaries = {cid: d for cid in retired if (d := self.log.retention.retired_summary(cid)) is not None}
        newest = manifests[max(manifests)] if manifests else None
        history = newest.head_state.feedback_counts() if newest else {}
        history_by_head = {h: s.feedback_counts for h, s in newest.head_state.heads.items()} if newest else {}
        epochs = []
        previous_seq: dict[str, int] = {}
        for epoch in epoch_ids:
            m = manifests.get(epoch)
            if m is not None and m.kind != "epoch":
                continue
            view = EpochView(epoch=epoch, status="committed" if epoch in ids else "running")
            if epoch in damaged:  # committed, but what it committed cannot be read: nothing of it is shown
                view.status, view.damage = "damaged", damaged[epoch]
            view.checks = checks.get(epoch, [])
            tried = attempts.get(epoch, {})
            if m is not None:
                d = m.decision
                view.attempt_id, view.batch_id, view.committed_at = m.attempt_id, m.batch_id, m.committed_at
                view.metrics = dict(d.metrics) if d else {}
                view.feedback = d.feedback_count if d else None
                view.feedback_by_head = {h: s.feedback_counts.get(epoch, 0) for h, s in m.head_state.heads.items()}
                view.terminated, view.reason = (d.terminated, d.reason) if d else (False, None)
                refs = {r.key: r.size for r in m.objects}
                view.size_bytes = sum(refs.values()) + sizes.get(self.layout.checkpoint(epoch), 0)
                view.objects = len(refs)
                view.retention = _why_kept(epoch, latest, batch_finals, savepoints)
                view.publications = self.log.publications.of(epoch)
                view.events = _released(m.coordinators, previous_seq)
                previous_seq = {name: int(s.get("seq", 0)) for name, s in (m.coordinators or {}).items()}
            computed: Any = m.history if m is not None else None  # how the epoch was computed
            if m is None and epoch in retired:
                # its data went with it; the retired marker keeps its decision, and every later
                # head state its feedback counts
                view.retention = "retired"
                summary = summaries.get(epoch) or {}
                if summary.get("kind") == "final":
                    continue
                computed = summary.get("history")
                view.metrics = dict(summary.get("metrics") or {})
                view.attempt_id, view.batch_id = summary.get("attempt_id"), summary.get("batch_id")
                view.committed_at = summary.get("committed_at") or view.committed_at
                view.terminated, view.reason = bool(summary.get("terminated")), summary.get("reason")
                view.feedback = history.get(epoch, summary.get("feedback_count"))
                view.feedback_by_head = {h: c[epoch] for h, c in history_by_head.items() if epoch in c}
                previous_seq = {}
            computed = computed if isinstance(computed, dict) else {}
            view.phases = _phases(computed.get("phases"))
            others = computed.get("attempts")
            for h in others if isinstance(others, list) else []:  # the epoch's other attempts, kept by its checkpoint
                if not isinstance(h, dict) or not ATTEMPT_ID_PATTERN.fullmatch(str(h.get("attempt_id"))):
                    continue
                reason = h.get("reason")
                a = tried.setdefault(str(h["attempt_id"]), AttemptView(str(h["attempt_id"]), "superseded"))
                a.reason = a.reason if a.reason is not None else (None if reason is None else str(reason))
                _who_and_when(a, h)
            for a in tried.values():
                if epoch in ids and epoch not in damaged:  # committed: every other attempt lost
                    a.status = "committed" if a.attempt_id == view.attempt_id else (
                        "aborted" if a.reason is not None else "superseded")
                    a.superseded_by = None if a.status == "committed" else view.attempt_id
            if view.attempt_id and view.attempt_id not in tried:
                tried[view.attempt_id] = AttemptView(view.attempt_id, "committed", batch_id=view.batch_id)
            if view.attempt_id in tried and isinstance(computed.get("run"), dict):
                tried[view.attempt_id].run = tried[view.attempt_id].run or computed["run"]
            for a in tried.values():
                a.ran_by = describe_run(a.run) if a.run else None
                a.why = _why(a)
            # in the order they ended: those that did not commit (by when they were aborted), then the one that did
            view.attempts = sorted(tried.values(), key=lambda a: (a.status == "committed", a.status == "running",
                                                                  a.at or "", a.attempt_id))
            if epoch not in ids:
                live = [a for a in view.attempts if a.status == "running"]
                view.status = "running" if live else "aborted"
                plan = self._plan(epoch, live[-1].attempt_id) if live else None
                if plan is not None and plan.get("kind") == "final":
                    continue  # the finish step running: shown with the finish, once committed
                if plan is not None:
                    view.events = _planned_events(plan, previous_seq)
            epochs.append(view)
        by_epoch = {e.epoch: e for e in epochs}
        batches = self._batches(manifests, summaries, by_epoch, batch_finals)
        runs: dict[str, dict[str, Any]] = {}  # batch -> the Airflow run it is (from its attempts' plans)
        for e in epochs:
            for a in e.attempts:
                b = a.batch_id or (e.batch_id if a.status == "committed" else None)
                if b and isinstance(a.run, dict) and a.run.get("run_id") is not None:
                    runs.setdefault(b, a.run)
        for b in batches:
            run = runs.get(b.batch_id)
            if run is not None:
                b.run_id, b.dag_id = str(run["run_id"]), (str(run["dag_id"]) if run.get("dag_id") else None)

        metric_names = sorted({k for e in epochs for k in e.metrics})
        chosen = metric if metric is not None else _convergence_metric(epochs, metric_names)
        if metric is not None and metric not in metric_names:
            raise ConfigError(f"metric {metric!r} is not reported by job {self.job_id}; "
                              f"its metrics: {', '.join(metric_names) or 'none'}")
        stop = self.log.control.stop_request()
        if final is not None:
            status = "TERMINATED"
        elif latest is not None and latest in manifests:
            status = manifests[latest].head_state.status.value
            if status == "RUNNING" and latest in savepoints:
                status = "SUSPENDED"
        else:
            status = "NOT STARTED" if latest is None else "RUNNING"
        body = newest.body if newest else {}
        return JobOverview(
            job_id=self.job_id, store=self.store.location(), status=status, body=body,
            metric=chosen, metric_names=metric_names, latest_checkpoint=latest,
            kept_checkpoints=kept, retired_checkpoints=sorted(retired), savepoints=savepoints,
            stop_request=stop.value if stop else None, epochs=epochs, batches=batches,
            finish=self._finish(final, sizes, checks) if final is not None else None,
            rejected=sorted(i for k in self._keys("rejected") if (i := JobLayout.parse_id(k)) is not None),
            generations=self._generations(), damaged_checkpoints=sorted(damaged),
            forked_from=self._forked_from(), forks=forks_of(self.store, self.job_id),
        )

    def _forked_from(self) -> dict[str, Any] | None:
        """The parent of a fork (include.runs.forks); a damaged record is reported and shown as none."""
        try:
            return read_fork(self.store, self.job_id)
        except CheckpointCorrupted as e:
            report_foreign(self.store, self.layout.fork(), str(e))
            return None

    def _generations(self) -> list[GenerationView]:
        found = lineage_of(self.store, self.job_id)
        if found is None:
            return []
        lineage, names = found
        retired = lineage.retired()
        views = []
        for name in names:
            try:
                record = lineage.record(name) or {}
            except CheckpointError:  # a damaged record is shown as unknown
                record = {}
            rewound = record.get("rewound_from")
            ok = isinstance(rewound, dict) and isinstance(rewound.get("epoch"), int) and JOB_ID_PATTERN.fullmatch(
                str(rewound.get("job_id")))
            views.append(GenerationView(name, {"job_id": rewound["job_id"], "epoch": rewound["epoch"]} if ok else None,
                                        name == names[-1], name in retired, _restarted(record.get("restarted"))))
        return views

    def _parsed(self, sub: str, whole: bool = False) -> list[tuple[int, str, str]]:
        """(epoch, attempt id, the rest of the key) of the keys under ``sub`` that are in the
        layout's grammar (``whole``: the key is ``<sub>/<epoch>/<attempt>`` itself); any other
        is reported and left out (include.checkpoints.layout.report_foreign)."""
        out = []
        for o in self.objects:
            if not o.key.startswith(f"{self.layout.root}/{sub}/"):
                continue
            parsed = self.layout.epoch_and_attempt(o.key, sub)
            base = f"{self.layout.root}/{sub}/{parsed[0]:010d}/{parsed[1]}" if parsed else ""
            if parsed is None or (o.key == base) != whole:
                report_foreign(self.store, o.key, f"{sub}/ holds <epoch>/<attempt id>{'' if whole else '/...'}")
                continue
            out.append((parsed[0], parsed[1], o.key[len(base) + 1:]))
        return out

    def _attempts(self) -> dict[int, dict[str, AttemptView]]:
        out: dict[int, dict[str, AttemptView]] = {}
        for epoch, attempt, _ in self._parsed("attempts"):
            out.setdefault(epoch, {}).setdefault(attempt, AttemptView(attempt, "running"))
        for epoch, attempt, _ in self._parsed("aborted", whole=True):
            fate = self.log.fate(epoch, attempt)
            if fate is None or fate.get("claim") == "commit":  # a commit's claim (claim_commit), not an abort
                continue
            view = out.setdefault(epoch, {}).setdefault(attempt, AttemptView(attempt, "aborted"))
            view.status = "aborted"
            view.reason = str(fate.get("reason") or "")
            _who_and_when(view, fate)
        for epoch, tried in out.items():
            for a in tried.values():
                plan = self._plan(epoch, a.attempt_id)
                a.batch_id = (plan.get("batch_id") if plan else None) or a.batch_id
                if plan and isinstance(plan.get("run"), dict):
                    a.run = a.run or plan["run"]
        return out

    def _plan(self, epoch: int, attempt_id: str) -> dict[str, Any] | None:
        return self._json(self.layout.plan(epoch, attempt_id))

    def _checks(self) -> dict[int, list[CheckView]]:
        out: dict[int, list[CheckView]] = {}
        for epoch, attempt, name in self._parsed("checks"):
            if name != "validation.json":
                continue
            where = self.layout.checks(epoch, attempt)
            html = f"{where}/data_docs.html"
            out.setdefault(epoch, []).append(check_view(
                epoch, attempt, self._json(f"{where}/validation.json"), f"{where}/validation.json",
                self.store.location(f"{where}/validation.json"),
                html_key=html if any(o.key == html for o in self.objects) else None))
        return out

    def _batches(self, manifests: dict[int, Manifest], retired: dict[int, dict[str, Any]],
                 epochs: dict[int, EpochView], finals: dict[str, int]) -> list[BatchView]:
        starts = {}
        for rest in self._keys("batch-starts"):
            batch = rest[:-len(".json")] if rest.endswith(".json") else ""
            if not ATTEMPT_ID_PATTERN.fullmatch(batch):
                report_foreign(self.store, f"{self.layout.root}/batch-starts/{rest}", "batch-starts/<batch id>.json")
                continue
            starts[batch] = self.log.batches.start(batch)
        # checkpoint id -> (batch, kind, epoch, parent): the kept manifests and the retired ones' summaries
        records = {cid: (m.batch_id, m.kind, m.epoch, m.parent_id) for cid, m in manifests.items()}
        records.update({cid: (d.get("batch_id"), d.get("kind"), d.get("epoch"), d.get("parent_id"))
                        for cid, d in retired.items() if cid not in records})
        committed: dict[str, list[int]] = {}
        parents: dict[str, int | None] = {}
        for cid in sorted(records):
            batch_id, kind, epoch, parent_id = records[cid]
            if batch_id is None:
                continue
            if kind == "epoch":
                committed.setdefault(batch_id, []).append(epoch)
            if batch_id not in parents:  # its first checkpoint's parent is what it resumed from
                parents[batch_id] = parent_id
                if parent_id is not None and parent_id in records \
                        and records[parent_id][0] != batch_id and parent_id in epochs:
                    epochs[parent_id].status = "restored"
                    epochs[parent_id].restored_by.append(batch_id)
        names = set(committed) | set(starts) | set(finals)
        views = []
        for b in names:
            start = starts.get(b)
            restored_from = parents[b] if b in parents else (start - 1 if start else None)
            views.append(BatchView(b, committed.get(b, []), start, restored_from, finals.get(b)))
        return sorted(views, key=lambda v: (min(v.epochs) if v.epochs else (v.start_epoch or 0), v.batch_id))

    def _finish(self, final: Manifest, sizes: dict[str, int], checks: dict[int, list[CheckView]]) -> FinishView:
        published = self.log.publications.of(final.checkpoint_id)
        lifecycle = {k: v.value for k, v in final.lifecycle.states.items()}
        outputs = []
        for name, ds in sorted(final.outputs.items()):
            rec = published.get(name)
            state = "PUBLISHED" if rec else lifecycle.get(f"sink:{name}", "FULLY_FINISHED")
            if rec:
                lifecycle[f"sink:{name}"] = "PUBLISHED"
            outputs.append(OutputView(name, final.checkpoint_id, ds.rows, ds.size, state,
                                      location=rec.get("location") if rec else None,
                                      format=rec.get("format") if rec else None,
                                      published_at=rec.get("at") if rec else None))
        return FinishView(
            checkpoint_id=final.checkpoint_id, epoch=final.epoch, attempt_id=final.attempt_id,
            batch_id=final.batch_id, committed_at=final.committed_at,
            drained=final.lifecycle.stop is not None and final.lifecycle.stop.value == "drain",
            size_bytes=sum(r.size for r in final.objects) + sizes.get(self.layout.checkpoint(final.checkpoint_id), 0),
            lifecycle=lifecycle, outputs=outputs, checks=checks.get(final.checkpoint_id, []))


def _phases(value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        return {}
    return {str(k): float(v) for k, v in value.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e9}


def _who_and_when(a: AttemptView, record: dict[str, Any]) -> None:
    """Fill what ``a`` does not know yet of who ran it, in which batch and when it ended, from
    a record of it (its abort record, or its entry in the checkpoint's history)."""
    a.run = a.run or (record["run"] if isinstance(record.get("run"), dict) else None)
    a.batch_id = a.batch_id or (record["batch_id"] if isinstance(record.get("batch_id"), str) else None)
    a.at = a.at or (record["at"] if isinstance(record.get("at"), str) else None)


def _why(a: AttemptView) -> str | None:
    """What became of an attempt that did not commit, in a few words."""
    if a.status in ("committed", "running"):
        return None
    reason = a.reason
    if reason is None:
        return "ended without a record of why (its process was killed or lost)"
    if reason.startswith(ABANDONED):
        return "its task was killed, lost or timed out before the attempt ended"
    if reason.startswith("data checks"):
        failed = re.findall(r"^\s*(?:FAILED|ERROR)\s+(\S+) \[critical\]", reason, re.M)
        return "data checks failed" + (f": {', '.join(failed[:5])}" if failed else "")
    if reason.startswith("cancelled: "):
        return reason.splitlines()[0][:200]
    first = reason.strip().splitlines()[0] if reason.strip() else "no reason recorded"
    return f"failed: {first[:200]}"


def _why_kept(cid: int, latest: int | None, finals: dict[str, int], savepoints: list[int]) -> str:
    why = []
    if cid == latest:
        why.append("latest")
    why += [f"final of batch {b}" for b, c in sorted(finals.items()) if c == cid]
    if cid in savepoints:
        why.append("savepoint")
    return "kept (" + ", ".join(why) + ")" if why else "kept (last retained)"


def _released(snapshots: dict[str, Any] | None, previous: dict[str, int]) -> list[EventsView]:
    out = []
    for name, snap in sorted((snapshots or {}).items()):
        end = int((snap or {}).get("seq", 0))
        first = previous.get(name, 0)
        out.append(EventsView(name, min(first, end), end))
    return out


def _planned_events(plan: dict[str, Any], previous: dict[str, int]) -> list[EventsView]:
    out = []
    snaps = plan.get("coordinators") or {}
    events = plan.get("events") or {}
    for name in sorted(set(snaps) | set(events)):
        mine = events.get(name, [])
        end = int((snaps.get(name) or {}).get("seq", previous.get(name, 0) + len(mine)))
        out.append(EventsView(name, previous.get(name, end - len(mine)), end, events=mine))
    return out


def _convergence_metric(epochs: list[EpochView], names: list[str]) -> str | None:
    for e in epochs:  # the body's convergence metric names itself when the job converges
        if e.reason and e.reason.startswith("converged: "):
            return e.reason[len("converged: "):].split("=", 1)[0]
    return names[0] if names else None


def _restarted(record: Any) -> str | None:
    """Why a generation began, from its record's ``restarted`` (include.runs.generations.attach),
    checked by shape: "input changed: <the first changes>", or None."""
    if not isinstance(record, dict) or record.get("reason") != "input changed":
        return None
    changes = [str(c)[:300] for c in record.get("changes", []) if isinstance(c, str)][:3] \
        if isinstance(record.get("changes"), list) else []
    return "input changed" + (": " + "; ".join(changes) if changes else "")
