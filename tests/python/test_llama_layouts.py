"""LLaMA (grouped-query attention, rotary, SwiGLU) in every layout: tensor
parallelism 2 and 4 (key/value heads split with their query heads), with
sequence parallelism, pipeline parallelism with every schedule, data
parallelism at ZeRO 0-3, the 2 x 2 x 2 grid; each equal to the single rank.
Multi-query attention at tp 2 is refused by name (a key/value head is not
split)."""
import pytest

import families_layouts as fl
import pipeline_support as ps

LLAMA = fl.LLAMA


@pytest.mark.parametrize("tp,sp,model", [(2, False, fl.LLAMA), (2, True, fl.LLAMA),
                                         (4, False, fl.LLAMA_TP4)])
def test_tensor_parallel_equals_single_rank(tmp_path, build_dir, tp, sp, model):
    fl.check(tmp_path, build_dir, model, f"tp {tp}, sp {sp}", tp=tp, sp=sp)


@pytest.mark.parametrize("schedule,virtual", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2),
                                              ("zb-h1", 1)])
def test_pipeline_schedules_equal_single_rank(tmp_path, build_dir, schedule, virtual):
    fl.check(tmp_path, build_dir, LLAMA, f"pp 2, {schedule}", pp=2, schedule=schedule,
             virtual=virtual)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_data_parallel_zero_stages_equal_single_rank(tmp_path, build_dir, stage):
    fl.check(tmp_path, build_dir, LLAMA, f"dp 2, ZeRO {stage}", dp=2, stage=stage)


def test_3d_grid_equals_single_rank(tmp_path, build_dir):
    fl.check(tmp_path, build_dir, LLAMA, "dp 2 x tp 2 (sp) x pp 2, ZeRO 1", pp=2, dp=2, tp=2,
             sp=True, stage=1)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_recomputation_is_bit_identical(tmp_path, build_dir, precision):
    fl.check_recomputation_is_bit_identical(tmp_path, build_dir, LLAMA, precision)


def test_multi_query_attention_is_not_split_across_tensor_parallel_ranks(tmp_path, build_dir):
    config = ps.make_config(tp=2, accum=4)
    with pytest.raises(AssertionError) as failed:
        ps.run_job(tmp_path, config, dict(LLAMA, num_key_value_heads=1), 2, "mqa",
                   build_dir=build_dir)
    assert "num_key_value_heads 1 does not divide into tensor-parallel size 2" in str(failed.value)
