"""llama.cpp built with AMX segfaults at the first prompt on some machines (this project's 2-core Xeon VM
among them): ribbit then loads every model — its own runtime and any `llama_cpp.Llama` it opens —
without the extra weight buffers (AMX, repacked), unless RIBBIT_LLAMA_AMX=1."""

from __future__ import annotations

import llama_cpp
import llama_cpp.llama_cpp as bindings
import pytest

from models.embedded import embedded_model_path
from models.llama_runtime import KEEP_AMX_ENV, LlamaRuntime, guard_llama_class, model_params, open_llama

AMX_INFO = b"CPU : AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | OPENMP = 1 | REPACK = 1 | "
PLAIN_INFO = b"CPU : AVX2 = 1 | AVX512 = 1 | OPENMP = 1 | REPACK = 1 | "


def build_reports(monkeypatch: pytest.MonkeyPatch, info: bytes) -> None:
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: info)
    monkeypatch.setattr(bindings, "llama_print_system_info", lambda: info)


@pytest.mark.parametrize(("info", "keep", "expected"), [
    (AMX_INFO, "", False), (AMX_INFO, "1", True), (PLAIN_INFO, "", True),
])
def test_extra_buffers_are_off_only_on_an_amx_build(monkeypatch: pytest.MonkeyPatch, info: bytes, keep: str, expected: bool) -> None:
    build_reports(monkeypatch, info)
    monkeypatch.setenv(KEEP_AMX_ENV, keep)
    assert model_params(llama_cpp).use_extra_bufts is expected


def test_ribbits_runtime_and_a_bare_llama_load_with_the_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    build_reports(monkeypatch, AMX_INFO)
    monkeypatch.delenv(KEEP_AMX_ENV, raising=False)
    default = bindings.llama_model_default_params
    runtime = LlamaRuntime(embedded_model_path(), n_ctx=256, n_batch=64, n_threads=1)
    try:
        assert runtime.model_params.use_extra_bufts is False
        runtime.eval(runtime.tokenize(b"def add(a, b):", add_bos=True))  # the first prompt runs
        assert runtime.n_tokens > 0
    finally:
        runtime.close()
    bare = open_llama(model_path=str(embedded_model_path()), n_ctx=256, n_threads=1, verbose=False)
    try:
        assert bare.model_params.use_extra_bufts is False
        bare.eval(bare.tokenize(b"def add(a, b):"))
        assert bare.n_tokens > 0
    finally:
        bare.close()
    assert bindings.llama_model_default_params is default  # the library's own default is back
    assert default().use_extra_bufts is True


def test_a_process_that_keeps_the_guard_on_keeps_it_after_open_llama(monkeypatch: pytest.MonkeyPatch) -> None:
    build_reports(monkeypatch, AMX_INFO)
    monkeypatch.delenv(KEEP_AMX_ENV, raising=False)
    default = bindings.llama_model_default_params
    try:
        assert guard_llama_class() is default
        kept = bindings.llama_model_default_params
        assert guard_llama_class() is default  # guarding twice still knows the library's own
        bindings.llama_model_default_params = kept
        open_llama(model_path=str(embedded_model_path()), n_ctx=256, n_threads=1, verbose=False).close()
        assert bindings.llama_model_default_params is kept  # the server's guard is still on
        assert bindings.llama_model_default_params().use_extra_bufts is False
    finally:
        bindings.llama_model_default_params = default
