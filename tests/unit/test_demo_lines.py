"""The demo shows a DAG run's progress as sentences: Airflow's console lines without the
logger's name and the source location (issue 49: no logger internals in the demo's output)."""

from __future__ import annotations

from spark_jobs.demo import readable


def test_progress_lines_read_as_sentences():
    line = ("2026-11-28T20:50:27.253316Z [info     ] epoch 3 committed: feedback=40 l1_delta=1.2e-03 "
            "[airflow.task.operators.iterations.operators.head.EpochHeadOperator] loc=head.py:108")
    assert readable(line) == "20:50:27 epoch 3 committed: feedback=40 l1_delta=1.2e-03"
    line = ("2026-11-28T20:50:29.116830Z [warning  ] job events epoch 2: attempt a2-x failed in partition(s) 1 "
            "(PythonException: RuntimeError: boom); retrying in this process [iterations] loc=protocol.py:436")
    assert readable(line) == ("20:50:29 WARNING job events epoch 2: attempt a2-x failed in partition(s) 1 "
                              "(PythonException: RuntimeError: boom); retrying in this process")
    published = ("2026-11-28T21:00:01.000001Z [info     ] published output ranks of job pr checkpoint 5 to /o/ranks "
                 "(2 files, 22 rows) [iterations] loc=outputs.py:175")
    assert readable(published) == "21:00:01 published output ranks of job pr checkpoint 5 to /o/ranks (2 files, 22 rows)"


def test_airflows_own_chatter_is_left_out():
    assert readable("2026-11-28T20:50:25.845033Z [warning  ] Could not import graphviz. [airflow.models] loc=x.py:1") is None
    assert readable("2026-11-28T20:50:26.000000Z [info     ] [DAG TEST] end task task_id=epoch_0.run "
                    "[airflow.sdk.definitions.dag] loc=dag.py:1563") is None
    assert readable("some other line") is None
    assert readable("2026-11-28T20:50:26.000000Z [error    ] Task failed with exception [task] loc=t.py:1") == \
        "20:50:26 ERROR Task failed with exception"


def test_fields_after_the_logger_and_airflows_client_errors_are_left_out():
    skipped = ("2026-11-28T22:06:25.1Z [info     ] Skipping task.                 [task] loc=task_runner.py:1622 "
               "reason='job demo-pagerank is TERMINATED: nothing to continue'")
    assert readable(skipped) is None
    xcom = ("2026-11-28T22:06:25.2Z [error    ] XCom not found                 [airflow.sdk.api.client] "
            "dag_id=iterate_pagerank detail={'reason': 'not_found'} key=trigger_run_id loc=client.py:1")
    assert readable(xcom) is None, "a 404 Airflow's client logs as an error is not the job's"
    checks = ("2026-11-28T22:06:12.1Z [error    ] epoch 2: the data checks refused the attempt: FAILED  rank_mass "
              "[critical] [airflow.task.operators.iterations.operators.head.EpochHeadOperator] loc=commit.py:80")
    assert readable(checks) == "22:06:12 ERROR epoch 2: the data checks refused the attempt: FAILED  rank_mass [critical]"
