"""Hook for the checkpoint store: an Airflow ``aws`` connection (endpoint configurable for MinIO)
for s3:// roots, the embedded local directory store otherwise."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseHook


class IterationStoreHook(BaseHook):
    """Opens the object stores of a job. Credentials come from the connection (or boto3's
    environment chain when the connection does not exist) and stay in memory."""

    conn_name_attr = "aws_conn_id"
    default_conn_name = "aws_default"
    hook_name = "Iteration checkpoint store"

    def __init__(self, aws_conn_id: str | None = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.aws_conn_id = aws_conn_id

    def store_options(self, url: str) -> dict[str, Any]:
        """Options for ``include.store.open_store``: empty for local paths."""
        if not str(url).startswith(("s3://", "s3a://")) or not self.aws_conn_id:
            return {}
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

        try:
            self.get_connection(self.aws_conn_id)
        except Exception:  # no such connection: boto3's own chain (environment, instance role)
            self.log.info("no Airflow connection %r: S3 credentials from the environment", self.aws_conn_id)
            return {}
        aws = AwsBaseHook(aws_conn_id=self.aws_conn_id, client_type="s3")
        credentials = aws.get_credentials()
        options: dict[str, Any] = {
            "access_key_id": credentials.access_key,
            "secret_access_key": credentials.secret_key,
            "session_token": credentials.token,
        }
        endpoint = aws.conn_config.endpoint_url
        if endpoint:
            options["endpoint_url"] = endpoint
        if aws.conn_region_name:
            options["region"] = aws.conn_region_name
        return options

    def get_store(self, url: str):
        from include.store import open_store

        return open_store(url, **self.store_options(url))
