"""The memory planner: context, KV type, batch and threads from free RAM and cores; a clear refusal."""

from __future__ import annotations

import pytest

from models.base import ModelError
from models.chat import ChatMessage
from models.memory import MemoryPlan, model_shape, plan_memory
from tests.engine.conftest import SYSTEM, make_model, run_turn

GiB = 1 << 30
# FrogNano-4B's header as the converter writes it (FROGNANO.md): 32 layers, every 4th full attention.
FROGNANO = {
    "general.architecture": "qwen35", "qwen35.block_count": 32, "qwen35.context_length": 262144,
    "qwen35.embedding_length": 2560, "qwen35.feed_forward_length": 9216, "qwen35.attention.head_count": 16,
    "qwen35.attention.head_count_kv": 4, "qwen35.attention.key_length": 256, "qwen35.attention.value_length": 256,
    "qwen35.full_attention_interval": 4, "qwen35.ssm.inner_size": 4096, "qwen35.ssm.state_size": 128,
    "qwen35.ssm.group_count": 16, "qwen35.ssm.conv_kernel": 4, "tokenizer.ggml.tokens": {"array_length": 248320},
}


@pytest.fixture
def frognano_file(tmp_path):
    path = tmp_path / "frognano-Q4_K_M.gguf"
    with path.open("wb") as handle:
        handle.truncate(int(2.7 * GiB))  # sparse: only its size matters to the planner
    return path


def test_frognano_shape_matches_the_model_card():
    shape = model_shape(FROGNANO)
    assert shape.attention_layers == 8 and shape.recurrent_layers == 24
    assert shape.kv_bytes_per_token("f16") == 32 * 1024  # ~32 KiB per token at f16
    assert 40e6 < shape.recurrent_state_bytes < 60e6  # ~50 MB of recurrent state


def test_roomy_machine_gets_the_full_context_with_an_f16_cache_and_flash_attention(frognano_file):
    plan = plan_memory(frognano_file, 131072, free=32 * GiB, cores=2, meta=FROGNANO)
    assert plan.n_ctx == 131072
    assert plan.kv_type == "f16" and plan.flash_attn  # the faster prompt reading at depth (README, section 9)
    assert plan.kv_bytes == 4 * GiB and plan.total_bytes <= 16 * GiB
    assert plan.n_threads == 2


def test_where_f16_would_take_over_half_the_free_memory_the_cache_is_q8(frognano_file):
    plan = plan_memory(frognano_file, 131072, free=12 * GiB, cores=2, meta=FROGNANO)
    assert plan.n_ctx == 131072  # the context is kept: the cache is halved instead
    assert plan.kv_type == "q8_0" and plan.flash_attn
    assert plan.kv_bytes < 2.2 * GiB


def test_tight_machine_gets_a_smaller_context(frognano_file):
    plan = plan_memory(frognano_file, 131072, free=5 * GiB, cores=2, meta=FROGNANO)
    assert 2048 <= plan.n_ctx < 131072
    assert plan.total_bytes <= 5 * GiB
    assert any("reduced" in note for note in plan.notes)
    assert "context" in plan.describe() and "GiB" in plan.describe()


def test_a_model_that_cannot_fit_is_refused_clearly(frognano_file):
    with pytest.raises(ModelError, match=r"cannot fit in memory.*2\.\d GiB.*free"):
        plan_memory(frognano_file, 131072, free=2 * GiB, cores=2, meta=FROGNANO)


def test_small_model_keeps_an_f16_cache_and_its_trained_context(tmp_path):
    meta = {**FROGNANO, "qwen35.context_length": 8192}
    path = tmp_path / "small.gguf"
    path.write_bytes(b"GGUF")
    plan = plan_memory(path, 131072, free=16 * GiB, cores=4, meta=meta)
    assert plan.n_ctx == 8192 and plan.kv_type == "f16" and not plan.flash_attn


def test_rollback_snapshots_multiply_the_recurrent_state(frognano_file):
    plain = plan_memory(frognano_file, 8192, free=32 * GiB, cores=2, meta=FROGNANO)
    drafting = plan_memory(frognano_file, 8192, free=32 * GiB, cores=2, meta=FROGNANO, rollback_tokens=8)
    assert drafting.recurrent_bytes == 9 * plain.recurrent_bytes
    assert "8 rollback snapshots" in drafting.describe()


def test_a_q8_cache_with_flash_attention_runs(tmp_path):
    plan = MemoryPlan(n_ctx=512, kv_type="q8_0", flash_attn=True, n_batch=64, n_threads=1)
    model = make_model(tmp_path / "states", plan=plan, persist_states=False)
    try:
        assert model.info.context_length == 512
        text, end, _ = run_turn(model, [SYSTEM, ChatMessage(role="user", content="Hi.")], max_tokens=3)
        assert end.usage.completion_tokens >= 1 and end.usage.evaluated_tokens > 0
    finally:
        model.close()


def test_doctor_prints_the_plan():
    from models.diagnostics import model_checks

    checks = {c.name: c for c in model_checks()}
    assert checks["memory plan"].ok
    assert "context" in checks["memory plan"].detail and "KV" in checks["memory plan"].detail


def test_the_context_starts_small_and_grows_to_the_largest_the_plan_allows(frognano_file):
    plan = plan_memory(frognano_file, 131072, free=32 * GiB, cores=2, meta=FROGNANO)
    assert plan.initial_ctx == 4096 and plan.n_ctx == 131072
    assert plan.bytes_at(4096) < plan.total_bytes - 3 * GiB  # the f16 cache for 131,072 tokens is 4 GiB
    assert "context 4096 (grows to 131072)" in plan.describe()
    whole = plan_memory(frognano_file, 131072, free=32 * GiB, cores=2, meta=FROGNANO, start_context=1 << 30)
    assert whole.initial_ctx == 131072 and "grows" not in whole.describe()


def test_a_tight_machine_gets_the_largest_context_that_fits_and_says_why(frognano_file):
    plan = plan_memory(frognano_file, 131072, free=5 * GiB, cores=2, meta=FROGNANO, rollback_tokens=8)
    assert plan.total_bytes <= 5 * GiB - 512 * 2**20
    assert plan.n_ctx % 1024 == 0
    assert plan.n_ctx > 32768  # not just halved until it fit
    assert any("q8_0" in note and "half" in note for note in plan.notes)
    assert any(f"to {plan.n_ctx}" in note for note in plan.notes)


def test_growth_goes_half_again_in_steps_up_to_the_largest():
    from models.memory import grown_context

    assert grown_context(4096, 4200, 131072) == 6144  # half again, not just what is needed
    assert grown_context(4096, 9000, 131072) == 9216  # what is needed, rounded up to a step
    assert grown_context(98304, 140000, 131072) == 131072  # never past the largest
