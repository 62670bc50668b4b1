"""Pipeline parallelism, sequential models (DeepSpeed's PipelineModule
examples: Linear/ReLU stacks with MSE): every layout reproduces the
single-rank run — losses, parameters and gradients within 1e-5 relative."""
import pytest

import pipeline_support as ps
from test_pipeline_gpt import SCHEDULES, check_layout


@pytest.mark.parametrize("dp", [1, 2])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("schedule,virtual", SCHEDULES)
@pytest.mark.parametrize("pp", [2, 4])
def test_sequential_layout_equals_single_rank(tmp_path, build_dir, pp, schedule, virtual, stage,
                                              dp):
    check_layout(tmp_path, build_dir, ps.SEQUENTIAL, pp, dp, schedule, virtual, stage)


@pytest.mark.parametrize("partition", ["parameters", "uniform", "cost", "type:linear"])
def test_every_partition_method_trains_the_same_model(tmp_path, build_dir, partition):
    ref = ps.run_job(tmp_path, ps.make_config(accum=8), ps.SEQUENTIAL, 1, "ref",
                     build_dir=build_dir)[0]
    reports = ps.run_job(tmp_path, ps.make_config(pp=2, accum=8, partition=partition),
                         ps.SEQUENTIAL, 2, "partition", build_dir=build_dir)
    ps.assert_equivalent(reports, ref, "fp32", f"partition {partition}")
