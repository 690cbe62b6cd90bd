"""A committed checkpoint as its manifest says it: the datasets it references (``DatasetRef``),
the manifest itself (``Manifest``, checksummed JSON) and the check of an object's bytes
against it (``verify_bytes``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

from include.checkpoints.head_state import AlignmentDecision, FileRef, HeadStatus, JobHeadState
from include.checkpoints.lifecycle import Lifecycle
from include.errors import CheckpointCorrupted
from include.store import sha256_hex

MANIFEST_FORMAT = "iterations.checkpoint/1"


@dataclass(frozen=True)
class DatasetRef:
    """A dataset an attempt wrote: its Spark schema and its files, grouped by partition."""

    schema: str  # Spark StructType as JSON
    partitions: tuple[tuple[FileRef, ...], ...]

    @property
    def files(self) -> list[FileRef]:
        return [f for part in self.partitions for f in part]

    @property
    def rows(self) -> int:
        return sum(f.rows or 0 for f in self.files)

    @property
    def size(self) -> int:
        """Stored bytes, all files."""
        return sum(f.size for f in self.files)

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "partitions": [[f.to_dict() for f in p] for p in self.partitions]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "DatasetRef":
        return cls(d["schema"], tuple(tuple(FileRef.from_dict(f) for f in p) for p in d["partitions"]))


@dataclass(frozen=True)
class Manifest:
    """A committed checkpoint. ``kind`` is ``epoch`` (state after an epoch) or ``final``
    (the finish step's checkpoint, which references the job's outputs). ``outputs`` of an
    epoch checkpoint are the body's per-epoch outputs staged by that epoch; ``lifecycle`` the
    state of every operator when it committed (``include.checkpoints.lifecycle``)."""

    job_id: str
    checkpoint_id: int
    kind: str
    epoch: int
    parent_id: int | None
    attempt_id: str
    batch_id: str | None
    num_partitions: int
    body: dict[str, Any]
    head_state: JobHeadState
    decision: AlignmentDecision | None
    variables: dict[str, DatasetRef]
    outputs: dict[str, DatasetRef] = field(default_factory=dict)
    extra_objects: tuple[FileRef, ...] = ()
    committed_at: str = ""  # informational only: ordering is by checkpoint id
    lifecycle: Lifecycle = field(default_factory=lambda: Lifecycle({}))
    # coordinator name -> its snapshot taken when this checkpoint was triggered (include.epoch.coordinators)
    coordinators: dict[str, Any] = field(default_factory=dict)
    # how the checkpoint's epoch was computed, for people (include.epoch.commit.Committer._history): who
    # ran it, its phases' seconds, the epoch's other attempts; never read by the runtime
    history: dict[str, Any] = field(default_factory=dict)
    # a reviewed job's per-epoch outputs not published yet (they wait for the approval of the
    # job's publication: include.publication.publish), carried from checkpoint to checkpoint:
    # epoch checkpoint id -> output name -> dataset; kept (and verified when staged) as they are
    pending_outputs: dict[int, dict[str, DatasetRef]] = field(default_factory=dict)

    @property
    def objects(self) -> list[FileRef]:
        """Every object this checkpoint references (what GC must never delete)."""
        refs = list(self.extra_objects)
        datasets = [*self.variables.values(), *self.outputs.values(),
                    *(ds for outputs in self.pending_outputs.values() for ds in outputs.values())]
        for ds in datasets:
            refs.extend(ds.files)
        return refs

    @property
    def state_objects(self) -> list[FileRef]:
        """What a restore needs: the variables, and a final checkpoint's outputs. An epoch's
        staged outputs are not state: they are released once published."""
        refs = list(self.extra_objects)
        datasets = list(self.variables.values()) + (list(self.outputs.values()) if self.kind == "final" else [])
        for ds in datasets:
            refs.extend(ds.files)
        return refs

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "job_id": self.job_id,
            "checkpoint_id": self.checkpoint_id,
            "kind": self.kind,
            "epoch": self.epoch,
            "parent_id": self.parent_id,
            "attempt_id": self.attempt_id,
            "batch_id": self.batch_id,
            "num_partitions": self.num_partitions,
            "body": self.body,
            "head_state": self.head_state.to_dict(),
            "decision": self.decision.to_dict() if self.decision else None,
            "variables": {k: v.to_dict() for k, v in sorted(self.variables.items())},
            "outputs": {k: v.to_dict() for k, v in sorted(self.outputs.items())},
            "extra_objects": [f.to_dict() for f in self.extra_objects],
            "committed_at": self.committed_at,
            "lifecycle": self.lifecycle.to_dict(),
            "coordinators": self.coordinators,
            "history": self.history,
            **({"pending_outputs": {str(cid): {k: v.to_dict() for k, v in sorted(outputs.items())}
                                    for cid, outputs in sorted(self.pending_outputs.items())}}
               if self.pending_outputs else {}),
        }

    def to_bytes(self) -> bytes:
        body = self.to_dict()
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
        body["manifest_sha256"] = hashlib.sha256(canonical.encode()).hexdigest()
        return json.dumps(body, sort_keys=True, indent=1, allow_nan=False).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> "Manifest":
        try:
            d = json.loads(data)
            claimed = d.pop("manifest_sha256")
        except (ValueError, KeyError, AttributeError) as e:
            raise CheckpointCorrupted(f"manifest {where} is not a valid manifest: {e}") from e
        canonical = json.dumps(d, sort_keys=True, separators=(",", ":"), allow_nan=False)
        if hashlib.sha256(canonical.encode()).hexdigest() != claimed:
            raise CheckpointCorrupted(f"manifest {where} fails its own checksum: it was damaged")
        if d.get("format") != MANIFEST_FORMAT:
            raise CheckpointCorrupted(
                f"manifest {where} has format {d.get('format')!r}, expected {MANIFEST_FORMAT!r}"
            )
        try:
            return cls(
                job_id=d["job_id"],
                checkpoint_id=int(d["checkpoint_id"]),
                kind=d["kind"],
                epoch=int(d["epoch"]),
                parent_id=d["parent_id"],
                attempt_id=d["attempt_id"],
                batch_id=d.get("batch_id"),
                num_partitions=int(d["num_partitions"]),
                body=d["body"],
                head_state=JobHeadState.from_dict(d["head_state"]),
                decision=AlignmentDecision.from_dict(d["decision"]) if d.get("decision") else None,
                variables={k: DatasetRef.from_dict(v) for k, v in d["variables"].items()},
                outputs={k: DatasetRef.from_dict(v) for k, v in d.get("outputs", {}).items()},
                extra_objects=tuple(FileRef.from_dict(f) for f in d.get("extra_objects", [])),
                committed_at=d.get("committed_at", ""),
                lifecycle=Lifecycle.from_dict(d.get("lifecycle")),
                coordinators=d.get("coordinators", {}),
                history=d["history"] if isinstance(d.get("history"), dict) else {},
                pending_outputs={int(cid): {k: DatasetRef.from_dict(v) for k, v in outputs.items()}
                                 for cid, outputs in d.get("pending_outputs", {}).items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise CheckpointCorrupted(f"manifest {where} is not a valid manifest: {type(e).__name__}: {e}") from None



def verify_bytes(data: bytes, ref: FileRef, where: str) -> None:
    if len(data) != ref.size:
        raise CheckpointCorrupted(f"{where} has {len(data)} bytes, the manifest says {ref.size}")
    digest = sha256_hex(data)
    if digest != ref.sha256:
        raise CheckpointCorrupted(
            f"{where} fails its checksum (sha256 {digest[:12]}…, manifest says {ref.sha256[:12]}…): "
            "the checkpoint is damaged"
        )


__all__ = ["DatasetRef", "MANIFEST_FORMAT", "Manifest", "verify_bytes"]


@dataclass(frozen=True)
class JobState:
    latest: Manifest | None
    status: HeadStatus
    next_epoch: int
