"""Child process of test_resume.py: materialize one rollout partition (the test kills it midway).

Usage: python rollout_child.py <pipeline settings file> <checkpoint id>
"""

from __future__ import annotations

import sys

import dagster as dg

from shopsimrl_dagster.definitions import build_definitions
from shopsimrl_dagster.settings import load_pipeline_settings

if __name__ == "__main__":
    settings = load_pipeline_settings(sys.argv[1])
    checkpoint_id = sys.argv[2]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoints", [checkpoint_id])
        location = build_definitions(settings)
        location.resolve_job_def("prepare_plans").execute_in_process(instance=instance)
        location.resolve_job_def("evaluate_val").execute_in_process(instance=instance, partition_key=checkpoint_id)
