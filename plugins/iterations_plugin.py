"""The iterations Airflow plugin: registers the operators' extra link ("Data checks", the
report of the data checks a commit or finish task ran), so the UI shows it."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from iterations.operators.epoch import DataChecksLink


class IterationsPlugin(AirflowPlugin):
    name = "iterations"
    operator_extra_links = [DataChecksLink()]
