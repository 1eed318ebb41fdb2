"""tests/tiers.py puts a test in the slow tier by what it uses: its markers, its fixtures, the names its
code and the test helpers it calls reach; anything else is quick. And a quick test that loads a
llama.cpp model anyway is caught as it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.tiers import _noting, _running, _started, CodeScan, alone_reason, slow_reason


@dataclass
class FakeItem:
    """What slow_reason reads of a pytest item."""

    function: Any
    fixturenames: list[str] = field(default_factory=list)
    markers: tuple[str, ...] = ()

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None


def pure() -> int:
    return sum(range(3))


def helper_that_loads() -> None:
    from tests.engine.conftest import make_model

    make_model  # noqa: B018 (named, as a test helper would call it)


class Driver:
    def start(self) -> None:
        self.app.run_test()  # type: ignore[attr-defined]


def calls_a_helper_that_loads() -> None:
    helper_that_loads()


def uses_a_helper_class() -> None:
    Driver().start()


def calls_tmux() -> None:
    import subprocess

    subprocess.run(["tmux", "-V"], check=False)


def in_a_lambda() -> object:
    return lambda: helper_that_loads()


@pytest.mark.parametrize("function", [calls_a_helper_that_loads, uses_a_helper_class, calls_tmux, in_a_lambda])
def test_code_that_reaches_a_model_a_pilot_or_a_terminal_is_slow(function: Any) -> None:
    assert slow_reason(FakeItem(function), CodeScan()) is not None  # type: ignore[arg-type]


def test_pure_code_is_quick() -> None:
    assert slow_reason(FakeItem(pure), CodeScan()) is None  # type: ignore[arg-type]


def test_markers_and_fixtures_make_a_test_slow() -> None:
    assert slow_reason(FakeItem(pure, markers=("real_model",)), CodeScan()) == "marked real_model"  # type: ignore[arg-type]
    assert slow_reason(FakeItem(pure, fixturenames=["tui_app"]), CodeScan()) == "uses the tui_app fixture"  # type: ignore[arg-type]


def ping(n: int) -> int:
    return pong(n - 1) if n else 0


def pong(n: int) -> int:
    return ping(n - 1) if n else 1


def test_helpers_that_call_each_other_end_the_scan() -> None:
    words = CodeScan().words(ping.__code__, globals())
    assert {"pong", "ping"} <= words


def test_this_test_is_quick(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("quick") is not None
    assert request.node.get_closest_marker("slow") is None


def test_a_load_the_scan_missed_is_caught(request: pytest.FixtureRequest) -> None:
    loaded: list[str] = []
    load = _noting("loads a llama.cpp model", lambda path: loaded.append(path))
    assert _running == [request.node]  # the guard watches this quick test
    load("model.gguf")
    assert loaded == ["model.gguf"] and _started == ["loads a llama.cpp model"]
    _started.clear()  # (else the guard would fail this test at teardown, as it should a real load)


def test_llama_cpp_makes_a_test_run_alone_and_a_pilot_or_a_terminal_does_not() -> None:
    assert alone_reason(FakeItem(calls_a_helper_that_loads), CodeScan()) is not None  # type: ignore[arg-type]
    assert alone_reason(FakeItem(pure, markers=("real_model",)), CodeScan()) == "marked real_model"  # type: ignore[arg-type]
    assert alone_reason(FakeItem(pure, fixturenames=["tiny_qwen35"]), CodeScan()) == "uses the tiny_qwen35 fixture"  # type: ignore[arg-type]
    for shared in (uses_a_helper_class, calls_tmux):  # slow, yet they may share the machine
        assert alone_reason(FakeItem(shared), CodeScan()) is None  # type: ignore[arg-type]
        assert slow_reason(FakeItem(shared), CodeScan()) is not None  # type: ignore[arg-type]


@pytest.mark.parametrize("codes, expected", [((0, 0), 0), ((1, 0), 1), ((0, 2), 2), ((5, 0), 0), ((0, 5), 0), ((5, 5), 5), ((5, 1), 1)])
def test_the_suite_fails_when_either_run_fails(monkeypatch: pytest.MonkeyPatch, codes: tuple[int, int], expected: int) -> None:
    import tests.suite

    given = iter(codes)
    ran: list[list[str]] = []
    monkeypatch.setattr(tests.suite.subprocess, "call", lambda argv: (ran.append(argv), next(given))[1])
    assert tests.suite.main(["-k", "x"]) == expected
    assert [argv[argv.index("-m", 2) + 1] for argv in ran] == ["not alone", "alone"]  # shared first, then alone
    assert all(argv[-2:] == ["-k", "x"] for argv in ran)
