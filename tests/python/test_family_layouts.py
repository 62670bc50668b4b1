"""LLaMA (grouped-query attention, rotary, SwiGLU) and BLOOM (ALiBi,
interleaved fused qkv, the embedding LayerNorm) in every layout: tensor
parallelism 2 and 4 (whole query and key/value heads per rank, each with its
own ALiBi slopes), with sequence parallelism, pipeline parallelism with
every schedule, data parallelism at ZeRO 0-3, the 2 x 2 x 2 grid; each equal
to the single rank, and recomputation bit for bit. Multi-query attention at
tp 2 is refused by name (a key/value head is not split)."""
import pytest

import families_layouts as fl
import pipeline_support as ps

FAMILIES = {"llama": fl.LLAMA, "bloom": fl.BLOOM}
# tp 4: LLaMA's 8 query heads over 4 key/value heads (the head tied); BLOOM's 4 heads.
TP4 = {"llama": fl.LLAMA_TP4, "bloom": fl.BLOOM}


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("tp,sp", [(2, False), (2, True), (4, False)])
def test_tensor_parallel_equals_single_rank(tmp_path, build_dir, family, tp, sp):
    model = TP4[family] if tp == 4 else FAMILIES[family]
    fl.check(tmp_path, build_dir, model, f"{family} tp {tp}, sp {sp}", tp=tp, sp=sp)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("schedule,virtual", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2),
                                              ("zb-h1", 1)])
def test_pipeline_schedules_equal_single_rank(tmp_path, build_dir, family, schedule, virtual):
    fl.check(tmp_path, build_dir, FAMILIES[family], f"{family} pp 2, {schedule}", pp=2,
             schedule=schedule, virtual=virtual)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_data_parallel_zero_stages_equal_single_rank(tmp_path, build_dir, family, stage):
    fl.check(tmp_path, build_dir, FAMILIES[family], f"{family} dp 2, ZeRO {stage}", dp=2,
             stage=stage)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_3d_grid_equals_single_rank(tmp_path, build_dir, family):
    fl.check(tmp_path, build_dir, FAMILIES[family], f"{family} dp 2 x tp 2 (sp) x pp 2, ZeRO 1",
             pp=2, dp=2, tp=2, sp=True, stage=1)


@pytest.mark.parametrize("family", sorted(FAMILIES))
# bf16: bit for bit where the GEMMs multiply in bf16 (selective recomputation
# rebuilds from the operands' bf16 copies); multiplying in fp32 it rebuilds
# from rounded values the forward did not use, equal within the rounding.
@pytest.mark.parametrize("precision",
                         ["fp32", pytest.param("bf16", marks=pytest.mark.bf16_compute)])
def test_recomputation_is_bit_identical(tmp_path, build_dir, family, precision):
    fl.check_recomputation_is_bit_identical(tmp_path, build_dir, FAMILIES[family], precision)


def test_multi_query_attention_is_not_split_across_tensor_parallel_ranks(tmp_path, build_dir):
    config = ps.make_config(tp=2, accum=4)
    with pytest.raises(AssertionError) as failed:
        ps.run_job(tmp_path, config, dict(fl.LLAMA, num_key_value_heads=1), 2, "mqa",
                   build_dir=build_dir)
    assert "num_key_value_heads 1 does not divide into tensor-parallel size 2" in str(failed.value)
