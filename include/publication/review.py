"""What a person reviews before a staged publication is switched (``review_of``), and how it
reads (``review_markdown``): per output, the staged version's rows and schema, the final
checkpoint's data checks, and how it differs from the version readers see now - rows added,
removed and changed (by the output's key columns), for a ranked output its top rows and how far
each moved, for vectors (centroids) how far each moved. The body names what its outputs are
(``IterationBody.review``). Everything read from a store is verified against the SHA-256 its
record gives before it is read; everything shown is escaped (nothing is read as Markdown)."""

from __future__ import annotations

import json
import logging
import math
import re
from typing import Any, Mapping, Sequence

from include.checkpoints.head_state import FileRef
from include.checkpoints.manifest import Manifest
from include.checkpoints.record_schemas import DamagedRecord
from include.checks.profile import schema_string
from include.checks.report_view import check_view
from include.errors import IterationError, ObjectNotFound
from include.store import ObjectStore, open_store
from include.store.transfer import verified_file

log = logging.getLogger("iterations")

APPROVE, REJECT = "Approve", "Reject"
#: rows of a table shown at most (the top of a ranked output, the largest shifts)
SHOWN = 20
_MARKDOWN = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~])")


def md(value: Any, limit: int = 200) -> str:
    """``value`` as literal text in Markdown: one line, special characters escaped, cut at ``limit``."""
    text = " ".join(str(value).split())
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return _MARKDOWN.sub(r"\\\1", text)


def _frame(store: ObjectStore, refs: Sequence[FileRef]):
    """The rows of ``refs`` (Parquet files of ``store``), each verified before it is read, as
    one pandas DataFrame (None when there are no files)."""
    import pandas as pd
    import pyarrow.parquet as pq

    frames = []
    for ref in refs:
        with verified_file(store, ref) as path:
            frames.append(pq.read_table(path).to_pandas())
    return pd.concat(frames, ignore_index=True) if frames else None


def _refs(record: Mapping[str, Any]) -> list[FileRef]:
    return [FileRef(f["key"], int(f["size"]), f["sha256"]) for f in record.get("files", [])]


def _numbers(value: Any) -> list[float]:
    """The numbers of a cell (a number, or an array of numbers), flattened."""
    if hasattr(value, "tolist"):  # a numpy array or scalar
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        out: list[float] = []
        for v in value:
            out.extend(_numbers(v))
        return out
    if isinstance(value, bool):
        return [float(value)]
    if isinstance(value, (int, float)):
        return [float(value)]
    return []


def _same(a: Any, b: Any) -> bool:
    if hasattr(a, "tolist"):
        a = a.tolist()
    if hasattr(b, "tolist"):
        b = b.tolist()
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def compare(staged, current, keys: Sequence[str], hints: Mapping[str, Any]) -> dict[str, Any]:
    """How ``staged`` differs from ``current`` (pandas DataFrames; ``current`` None: nothing is
    published yet). ``keys``: the columns that name a row (none, or repeated in either: rows are
    compared whole, as multisets). ``hints``: the body's (``ranked_by``, ``top``, ``shift``)."""
    import pandas as pd

    out: dict[str, Any] = {"rows": int(len(staged))}
    if current is None:
        out["current_rows"] = None
    else:
        out["current_rows"] = int(len(current))
    keys = [k for k in keys if k in staged.columns and (current is None or k in current.columns)]
    keyed = bool(keys) and not staged.duplicated(keys).any() and (current is None or not current.duplicated(keys).any())
    out["keys"] = keys if keyed else []
    if current is not None and keyed:
        merged = staged.merge(current, on=keys, how="outer", suffixes=("", "__was"), indicator=True)
        both = merged[merged["_merge"] == "both"]
        values = [c for c in staged.columns if c not in keys and c in current.columns]
        changed = both[[any(not _same(r[c], r[f"{c}__was"]) for c in values) for _, r in both.iterrows()]] \
            if values else both.iloc[0:0]
        out.update(added=int((merged["_merge"] == "left_only").sum()), removed=int((merged["_merge"] == "right_only").sum()),
                   changed=int(len(changed)), unchanged=int(len(both) - len(changed)))
        largest = {}
        for c in values:
            diffs = [abs(x - y) for _, r in both.iterrows()
                     for x, y in zip(_numbers(r[c]), _numbers(r[f"{c}__was"]))]
            if diffs:
                largest[c] = max(diffs)
        out["largest_change"] = largest
    elif current is not None:  # no key: rows as multisets
        def counts(frame) -> dict[str, int]:
            hashed = pd.util.hash_pandas_object(frame.astype(str), index=False)
            return hashed.value_counts().to_dict()
        new, old = counts(staged), counts(current)
        out.update(added=sum(max(0, n - old.get(h, 0)) for h, n in new.items()),
                   removed=sum(max(0, n - new.get(h, 0)) for h, n in old.items()), changed=None)
    ranked = hints.get("ranked_by")
    if ranked in staged.columns:
        out["top"] = _top(staged, current, keys if keyed else [], ranked, int(hints.get("top", 10) or 10))
    if hints.get("shift") and keyed and current is not None:
        out["shift"] = _shift(staged, current, keys)
    return out


def _order(frame, keys: Sequence[str], ranked: str):
    return frame.sort_values([ranked, *keys], ascending=[False, *([True] * len(keys))], kind="mergesort")


def _top(staged, current, keys: Sequence[str], ranked: str, k: int) -> dict[str, Any]:
    """The top ``k`` rows of ``staged`` by ``ranked`` (descending, ties by key), each with its
    place before (in ``current``, by the same order) and how it moved; and the rows that left
    the top."""
    ordered = _order(staged, keys, ranked).head(k)
    before: dict[tuple, tuple[int, float]] = {}
    if current is not None and keys and ranked in current.columns:
        for place, (_, r) in enumerate(_order(current, keys, ranked).iterrows(), start=1):
            before[tuple(r[c] for c in keys)] = (place, float(r[ranked]))
    rows = []
    for place, (_, r) in enumerate(ordered.iterrows(), start=1):
        key = tuple(r[c] for c in keys)
        was = before.get(key)
        rows.append({"place": place, "key": [_plain(v) for v in key], "value": float(r[ranked]),
                     "was_place": was[0] if was else None, "moved": (was[0] - place) if was else None,
                     "change": float(r[ranked]) - was[1] if was else None})
    left = [] if not before else [
        {"key": [_plain(v) for v in key], "was_place": place}
        for key, (place, _) in sorted(before.items(), key=lambda kv: kv[1][0])
        if place <= k and key not in {tuple(r[c] for c in keys) for _, r in ordered.iterrows()}]
    return {"by": ranked, "k": k, "rows": rows, "left": left}


def _shift(staged, current, keys: Sequence[str]) -> dict[str, Any]:
    """Per row in both: the Euclidean distance between its numeric values now and before."""
    merged = staged.merge(current, on=keys, how="inner", suffixes=("", "__was"))
    values = [c for c in staged.columns if c not in keys and c in current.columns]
    rows = []
    for _, r in merged.iterrows():
        now = [x for c in values for x in _numbers(r[c])]
        was = [x for c in values for x in _numbers(r[f"{c}__was"])]
        if len(now) == len(was) and now:
            rows.append({"key": [_plain(r[c]) for c in keys], "shift": math.dist(now, was)})
    rows.sort(key=lambda x: -x["shift"])
    shifts = [x["shift"] for x in rows]
    return {"rows": rows[:SHOWN], "max": max(shifts) if shifts else None,
            "mean": sum(shifts) / len(shifts) if shifts else None}


def _plain(value: Any) -> Any:
    """A cell as JSON holds it."""
    if hasattr(value, "item"):
        value = value.item()
    return value if isinstance(value, (int, float, str, bool)) or value is None else str(value)


def review_of(job, manifest: Manifest, staged: Mapping[str, Any]) -> dict[str, Any]:
    """What a person reviews of the publication of final checkpoint ``manifest`` of ``job``
    (an IterationJob), ``staged`` by ``Publisher.stage``: per output, the staged version, its
    rows and schema, and its comparison with the published one; the final checkpoint's data
    checks; the epoch it ended at and its metrics; the per-epoch outputs waiting with it."""
    body = job.body_meta
    hints = body.get("review", {})
    out_store = open_store(job.config.output_path, **job.store_options)
    records = staged.get("records") or {}
    outputs = []
    for name, ds in sorted(manifest.outputs.items()):
        record = records.get(f"final/{manifest.checkpoint_id}/{name}")
        where, refs = (out_store, _refs(record)) if record is not None else (job.store, ds.files)
        now = _frame(where, refs)
        current, version = _published(job, out_store, name)
        mine = dict(hints.get(name, {}))
        keys = list(mine.get("keys") or body.get("heads", {}).get(name, []))
        entry = {"name": name, "version": record["version"] if record else None, "rows": ds.rows,
                 "schema": schema_string(ds.schema), "files": len(ds.files), "bytes": ds.size,
                 "replaces": version}
        if now is not None:
            entry["comparison"] = compare(now, current, keys, mine)
        outputs.append(entry)
    increments: dict[str, dict[str, int]] = {}
    for outputs_ in manifest.pending_outputs.values():
        for name, ds in outputs_.items():
            got = increments.setdefault(name, {"epochs": 0, "rows": 0})
            got["epochs"] += 1
            got["rows"] += ds.rows
    decision = None
    if manifest.parent_id is not None:
        try:
            decision = job.log.load(manifest.parent_id, verify="none").decision
        except IterationError:
            decision = None
    return {"job_id": manifest.job_id, "checkpoint_id": manifest.checkpoint_id, "epoch": manifest.epoch,
            "drained": manifest.lifecycle.stop is not None and manifest.lifecycle.stop.value == "drain",
            "reason": decision.reason if decision else None, "metrics": dict(decision.metrics) if decision else {},
            "output_path": job.config.output_path, "staged_in": staged.get("location"),
            "outputs": outputs, "increments": increments, "checks": _checks(job, manifest),
            "forked_from": job.forked_from}


def stage_for_review(job, final: Manifest) -> dict[str, Any]:
    """A reviewed job's final checkpoint: its outputs staged (``Publisher.stage``: nothing
    visible) and what a reviewer needs (``review_of``), kept in the job's store beside it;
    returned. The finish of a reviewed DAG and ``IterationRunner.review`` both do this."""
    staged = job.publisher.stage(final)
    review = review_of(job, final, staged)
    job.log.reviews.record_review(final.checkpoint_id, review)
    return review


def _published(job, out: ObjectStore, name: str):
    """The version of output ``name`` readers see now (its rows, verified; its version name),
    or (None, None)."""
    if job.config.output_format == "delta":
        try:
            from deltalake import DeltaTable

            from include.publication.outputs import delta_storage_options

            table = DeltaTable(out.url(name), storage_options=delta_storage_options(job.store_options))
            return table.to_pyarrow_table().to_pandas(), f"delta version {table.version()}"
        except Exception:  # no table yet (or unreadable): nothing to compare with
            return None, None
    try:
        raw = out.get(f"{name}/_PUBLISHED.json")
    except ObjectNotFound:
        return None, None
    from include.checkpoints.record_schemas import OUTPUT_MANIFEST

    try:
        record = OUTPUT_MANIFEST.load(raw, out.location(name))
    except DamagedRecord as e:
        log.warning("output %s: its manifest cannot be read (%s): nothing to compare with", out.location(name), e)
        return None, None
    return _frame(out, _refs(record)), record["version"]


def _checks(job, manifest: Manifest) -> dict[str, Any] | None:
    """The data checks of the final checkpoint's attempt (what the staged bytes are: each copy was
    verified against them): counts and what did not pass; None if none ran."""
    key = f"{job.log.layout.checks(manifest.checkpoint_id, manifest.attempt_id)}/validation.json"
    try:
        view = check_view(manifest.checkpoint_id, manifest.attempt_id, json.loads(job.store.get(key)), key,
                          job.store.location(key))
    except ObjectNotFound:
        return None
    except (ValueError, DamagedRecord):
        return {"unreadable": job.store.location(key)}
    return {"counts": dict(view.counts), "not_passed": [dict(o) for o in view.not_passed]}


def _num(value: Any, digits: int = 6) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return md(f"{value:.{digits}g}", 40)
    return md(value, 40)


def review_markdown(review: Mapping[str, Any]) -> tuple[str, str]:
    """(subject, Markdown body) of the request to publish what ``review`` describes."""
    job_id = review.get("job_id")
    subject = f"Publish the outputs of job {job_id}?"
    ended = "is drained (stopped on request)" if review.get("drained") else \
        f"terminated: {md(review.get('reason') or 'terminated')}"
    lines = [f"Job **{md(job_id)}** {ended} at epoch {_num(review.get('epoch'))} (final checkpoint "
             f"{_num(review.get('checkpoint_id'))}). Its outputs are staged in {md(review.get('staged_in') or '-', 400)}, "
             "not published: no reader sees them until you approve.", ""]
    forked = review.get("forked_from")
    if isinstance(forked, Mapping):
        lines += [f"A fork of job {md(forked.get('job_id'))} at epoch {_num(forked.get('epoch'))}.", ""]
    metrics = review.get("metrics") or {}
    if metrics:
        lines += ["| final metric | value |", "|---|---|"]
        lines += [f"| {md(k, 80)} | {_num(v)} |" for k, v in sorted(metrics.items())]
        lines.append("")
    for o in review.get("outputs", []):
        lines += _output_lines(o)
    for name, got in sorted((review.get("increments") or {}).items()):
        lines += [f"Per-epoch output **{md(name, 80)}**: {_num(got.get('epochs'))} epochs, {_num(got.get('rows'))} rows, "
                  "appended at once if approved.", ""]
    lines += _check_lines(review.get("checks"), review.get("checkpoint_id"))
    lines += ["", f"**{APPROVE}**: the staged versions become the published ones, in one switch, with one asset event. "
              f"**{REJECT}** (or no answer in time): the staged versions are deleted, nothing visible changes, and the "
              f"job waits: triggering its DAG again with job\\_id {md(job_id)} asks again."]
    return subject, "\n".join(lines)


def _output_lines(o: Mapping[str, Any]) -> list[str]:
    c = o.get("comparison") or {}
    lines = [f"**{md(o.get('name'), 80)}** → {md(o.get('version') or 'the final checkpoint', 120)}: "
             f"{_num(o.get('rows'))} rows, {_num(o.get('files'))} files, {_num(o.get('bytes'))} bytes; "
             f"schema `{md(o.get('schema'), 300)}`", ""]
    if c.get("current_rows") is None:
        lines += ["Nothing is published there yet: every row is new.", ""]
    else:
        lines += [f"Against the published version ({md(o.get('replaces') or '-', 120)}, {_num(c.get('current_rows'))} "
                  f"rows{', by ' + md(', '.join(c['keys'])) if c.get('keys') else ', rows compared whole'}):", "",
                  "| added | removed | changed | unchanged |", "|---|---|---|---|",
                  f"| {_num(c.get('added'))} | {_num(c.get('removed'))} | {_num(c.get('changed'))} | "
                  f"{_num(c.get('unchanged'))} |", ""]
        for col, value in sorted((c.get("largest_change") or {}).items()):
            lines.append(f"- largest change of {md(col, 80)}: {_num(value)}")
        if c.get("largest_change"):
            lines.append("")
    top = c.get("top")
    if top:
        lines += [f"Top {_num(top.get('k'))} by {md(top.get('by'), 80)}:", "",
                  "| # | key | value | was # | moved | change |", "|---|---|---|---|---|---|"]
        for r in top.get("rows", [])[:SHOWN]:
            moved = r.get("moved")
            lines.append(f"| {_num(r.get('place'))} | {md(', '.join(map(str, r.get('key', []))), 80)} | "
                         f"{_num(r.get('value'))} | {_num(r.get('was_place'))} | "
                         f"{'new' if r.get('was_place') is None else ('+' if moved > 0 else '') + str(moved)} | "
                         f"{_num(r.get('change'))} |")
        left = top.get("left") or []
        if left:
            lines.append(f"- left the top: {md('; '.join(', '.join(map(str, x.get('key', []))) for x in left[:SHOWN]), 400)}")
        lines.append("")
    shift = c.get("shift")
    if shift and shift.get("rows"):
        lines += [f"Shift (distance from the published values): largest {_num(shift.get('max'))}, mean "
                  f"{_num(shift.get('mean'))}", "", "| key | shift |", "|---|---|"]
        lines += [f"| {md(', '.join(map(str, r.get('key', []))), 80)} | {_num(r.get('shift'))} |"
                  for r in shift["rows"][:SHOWN]]
        lines.append("")
    return lines


def _check_lines(checks: Any, checkpoint_id: Any) -> list[str]:
    if checks is None:
        return ["Data checks: none ran on the final checkpoint."]
    if "unreadable" in checks:
        return [f"Data checks: their result at {md(checks['unreadable'], 400)} cannot be read."]
    counts = checks.get("counts") or {}
    not_passed = checks.get("not_passed") or []
    total = sum(v for v in counts.values() if isinstance(v, int)) or len(not_passed)
    lines = [f"Data checks of the final checkpoint {_num(checkpoint_id)} (the staged bytes are its outputs, each copy "
             f"verified): {_num(counts.get('passed', 0))} of {_num(total)} passed."]
    for o in not_passed:
        note = f": {md(o.get('note'))}" if o.get("note") else ""
        lines.append(f"- {md(o.get('status'), 20)} {md(o.get('name'), 120)} ({md(o.get('severity'), 20)}){note}")
    return lines


__all__ = ["APPROVE", "REJECT", "compare", "md", "review_markdown", "review_of", "stage_for_review"]
