"""The wait for a person's answer to a publication's review, deferred to the triggerer: the
standard provider's human-in-the-loop trigger (``HITLTrigger``: it polls the request and, at
the timeout, answers with the request's defaults), whose timeout also holds where it cannot
read the request: ``airflow dags test`` runs a deferred task's trigger in its own process, whose
stand-in supervisor serves no human-in-the-loop request. There the wait ends at the timeout,
with the defaults (a rejection), and an answer given meanwhile is not seen (docs/airflow.md,
"Approving a publication")."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any, AsyncIterator

from airflow.providers.standard.triggers.hitl import HITLTrigger, HITLTriggerEventSuccessPayload
from airflow.triggers.base import TriggerEvent


def requests_readable() -> bool:
    """Whether this process's trigger runner serves human-in-the-loop requests: the triggerer's
    does; the in-process one of ``airflow dags test`` does not."""
    try:
        from airflow.sdk.execution_time import task_runner
        from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms
    except ImportError:  # another Airflow layout: assume the triggerer's
        return True
    return not isinstance(getattr(task_runner, "SUPERVISOR_COMMS", None), InProcessSupervisorComms)


class ReviewTrigger(HITLTrigger):
    """``HITLTrigger``, whose timeout holds where the request cannot be read (``dags test``)."""

    def serialize(self) -> tuple[str, dict[str, Any]]:
        _, kwargs = super().serialize()
        return "iterations.triggers.review.ReviewTrigger", kwargs

    async def run(self) -> AsyncIterator[TriggerEvent]:
        if requests_readable():
            async for event in super().run():
                yield event
            return
        self.log.info("this process cannot read the request (airflow dags test runs the trigger in its own "
                      "process): the wait ends at its timeout%s, with %s",
                      f" ({self.timeout_datetime.isoformat()})" if self.timeout_datetime else " (none is set)",
                      self.defaults)
        while self.timeout_datetime is None or self.timeout_datetime > dt.datetime.now(dt.timezone.utc):
            await asyncio.sleep(self.poke_interval)
        yield TriggerEvent(HITLTriggerEventSuccessPayload(
            chosen_options=list(self.defaults or []), params_input={}, responded_by_user=None,
            responded_at=dt.datetime.now(dt.timezone.utc), timedout=True))
