"""The S3 store's boto client: every store signs with its own credentials and region, while the
clients of one process share botocore's parsed service descriptions (``service_descriptions``)."""

from __future__ import annotations

import io

from botocore.awsrequest import AWSResponse
from urllib3.response import HTTPResponse

from include.store.s3 import S3Store, service_descriptions


def signed(store: S3Store) -> str:
    """The Authorization header of the request ``store`` sends for a HEAD of a key (answered
    here, nothing leaves the process)."""
    seen = {}

    def answer(request, **kwargs):
        seen["authorization"] = request.headers["Authorization"].decode()
        headers = {"Content-Length": "0", "ETag": '"x"'}
        return AWSResponse(request.url, 200, headers, HTTPResponse(body=io.BytesIO(b""), headers=headers,
                                                                            status=200, preload_content=False))

    store.client.meta.events.register("before-send", answer)
    store.info("some/key")
    return seen["authorization"]


def test_each_store_signs_with_its_own_credentials_and_region():
    one = S3Store("bucket-one", endpoint_url="http://127.0.0.1:9", access_key_id="KEYONE",
                  secret_access_key="s1", region="eu-west-1")
    two = S3Store("bucket-two", endpoint_url="http://127.0.0.1:9", access_key_id="KEYTWO",
                  secret_access_key="s2", session_token="token-two")
    assert one.client is not two.client
    first, second = signed(one), signed(two)
    assert "Credential=KEYONE/" in first and "/eu-west-1/s3/aws4_request" in first, first
    assert "Credential=KEYTWO/" in second and "/us-east-1/s3/aws4_request" in second, second
    assert two.client.meta.region_name == "us-east-1" and one.client.meta.region_name == "eu-west-1"
    assert service_descriptions() is service_descriptions(), "one loader per process"
