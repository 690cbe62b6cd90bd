"""The host name Airflow records for a task instance (``[core] hostname_callable``): each Celery
worker of the native stack plays a machine of its own and says so; anything else is itself."""

from __future__ import annotations

import os
import socket


def machine_name() -> str:
    return os.environ.get("ITERATIONS_STACK_HOSTNAME") or socket.getfqdn()
