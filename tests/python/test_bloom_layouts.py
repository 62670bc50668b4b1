"""BLOOM (ALiBi, interleaved fused qkv, the embedding LayerNorm) in every
layout: tensor parallelism 2 and 4 (each rank's heads with their own ALiBi
slopes), with sequence parallelism, pipeline parallelism with every schedule,
data parallelism at ZeRO 0-3, the 2 x 2 x 2 grid; each equal to the single
rank."""
import pytest

import families_layouts as fl

BLOOM = fl.BLOOM


@pytest.mark.parametrize("tp,sp", [(2, False), (2, True), (4, False)])
def test_tensor_parallel_equals_single_rank(tmp_path, build_dir, tp, sp):
    fl.check(tmp_path, build_dir, BLOOM, f"tp {tp}, sp {sp}", tp=tp, sp=sp)


@pytest.mark.parametrize("schedule,virtual", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2),
                                              ("zb-h1", 1)])
def test_pipeline_schedules_equal_single_rank(tmp_path, build_dir, schedule, virtual):
    fl.check(tmp_path, build_dir, BLOOM, f"pp 2, {schedule}", pp=2, schedule=schedule,
             virtual=virtual)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_data_parallel_zero_stages_equal_single_rank(tmp_path, build_dir, stage):
    fl.check(tmp_path, build_dir, BLOOM, f"dp 2, ZeRO {stage}", dp=2, stage=stage)


def test_3d_grid_equals_single_rank(tmp_path, build_dir):
    fl.check(tmp_path, build_dir, BLOOM, "dp 2 x tp 2 (sp) x pp 2, ZeRO 1", pp=2, dp=2, tp=2,
             sp=True, stage=1)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_recomputation_is_bit_identical(tmp_path, build_dir, precision):
    fl.check_recomputation_is_bit_identical(tmp_path, build_dir, BLOOM, precision)
