"""Test tiers, decided from what each test uses (docs/testing.md); loaded by tests/conftest.py.

`quick` — unit and replay-driven tests in this process: no llama.cpp model, no Textual Pilot or
snapshot, no terminal (tmux), no ribbit started as a process of its own, no 1,000-deep trees.
`python -m pytest -m quick -n 3` runs them. `slow` — everything else; the whole suite runs both.
`alone` — of the slow ones, those that run llama.cpp (its 2 threads wait for each other at every step,
so they need both cores): `python -m tests.suite` runs them after the others, in one process, and all the
rest on two workers.

At collection a test is `slow` when it is marked `real_model` or `slow`, asks for a fixture that builds
or drives one of those (SLOW_FIXTURES), or when its code — its body, the test helpers it calls
(functions and classes in tests/, followed), and its fixtures' code — names one of SLOW_NAMES or
SLOW_STRINGS. So a new test lands in its tier by what it calls, with nobody remembering a marker.
What the scan cannot see (a model loaded through a SPEC string) is caught as it runs: a `quick` test
that loads a llama.cpp model or starts a Pilot fails, saying to mark it `slow` or `real_model`.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

import pytest

ALONE_FIXTURES = frozenset({
    "tiny_qwen35", "thinking_qwen35", "tiny_gemma4",  # tiny GGUFs built to be loaded
    "own_shipped",  # each test makes the embedded model's Q8_0 copy anew, with llama.cpp's quantiser
})
ALONE_NAMES = frozenset({
    # llama.cpp: the backend, its runtime, and tests/engine/conftest.py's helpers that load the embedded model
    "LlamaCppModel", "LlamaRuntime", "open_llama", "Llama", "make_model", "fresh_logits",
    "load_llama", "open_for_logits",  # a GGUF loaded to generate from or compare logits
})
# llama-cpp-python's server on the embedded model.
ALONE_STRINGS = frozenset({"tests.engine.guarded_server"})
SLOW_FIXTURES = ALONE_FIXTURES | frozenset({
    "tui_app",  # a replay-driven app, for Pilot (tests/tui/conftest.py)
    "snap_compare",  # pytest-textual-snapshot runs the app
    "removes_deep_trees", "deep_cleanup",  # trees 1,500-2,000 folders deep, made and walked
})
SLOW_NAMES = ALONE_NAMES | frozenset({
    # Textual's Pilot
    "run_test",
    # ribbit as a process of its own (tests/safety/cli.py, tests/functional/helpers.py)
    "ribbit_cli", "ribbit_cli_on_tty", "ribbit_cli_interrupted", "ribbit_subprocess",
})
# A terminal; `python -m app.cli` started by the test.
SLOW_STRINGS = ALONE_STRINGS | frozenset({"tmux", "app.cli"})


def test_code(obj: Any) -> types.CodeType | None:
    """The code of a function (a fixture's, a test's) defined in tests/; None for anything else."""
    func = inspect.unwrap(getattr(obj, "__func__", obj))
    module = getattr(func, "__module__", "") or ""
    code = getattr(func, "__code__", None)
    return code if module.split(".")[0] == "tests" and isinstance(code, types.CodeType) else None


STRING = "str:"  # a string constant among the names a scan finds (an import's `app.cli` is a name, not one)


class CodeScan:
    """Names and strings a test's code uses, following the helpers in tests/ it names (memoised)."""

    def __init__(self) -> None:
        self.found: dict[types.CodeType, frozenset[str]] = {}

    def words(self, code: types.CodeType, scope: dict[str, Any]) -> frozenset[str]:
        if code in self.found:
            return self.found[code]
        self.found[code] = frozenset()  # a helper calling itself, or two calling each other
        words = set(code.co_names) | {STRING + c for c in code.co_consts if isinstance(c, str)}
        for const in code.co_consts:
            if isinstance(const, types.CodeType):  # nested functions, lambdas, comprehensions
                words |= self.words(const, scope)
        for name in code.co_names:
            words |= self.of_object(scope.get(name))
        self.found[code] = frozenset(words)
        return self.found[code]

    def of_object(self, obj: Any) -> frozenset[str]:
        """A helper function in tests/, or every method of a helper class in tests/."""
        if inspect.isclass(obj) and obj.__module__.split(".")[0] == "tests":
            words: set[str] = set()
            for member in vars(obj).values():
                words |= self.of_object(member)
            return frozenset(words)
        code = test_code(obj)
        if code is None:
            return frozenset()
        func = inspect.unwrap(getattr(obj, "__func__", obj))
        return self.words(code, func.__globals__)


def slow_reason(item: pytest.Item, scan: CodeScan) -> str | None:
    return alone_reason(item, scan) or _reason(item, scan, ("slow",), SLOW_FIXTURES, SLOW_NAMES, SLOW_STRINGS)


def alone_reason(item: pytest.Item, scan: CodeScan) -> str | None:
    """Why a test runs llama.cpp (so it runs alone, after the others), or None."""
    return _reason(item, scan, ("real_model", "alone"), ALONE_FIXTURES, ALONE_NAMES, ALONE_STRINGS)


def _reason(
    item: pytest.Item, scan: CodeScan, markers: tuple[str, ...], fixture_names: frozenset[str],
    names: frozenset[str], strings: frozenset[str],
) -> str | None:
    for marker in markers:
        if item.get_closest_marker(marker):
            return f"marked {marker}"
    fixtures: list[str] = getattr(item, "fixturenames", [])
    for name in fixtures:
        if name in fixture_names:
            return f"uses the {name} fixture"
    funcs: list[Callable[..., Any]] = [getattr(item, "function", None)] if hasattr(item, "function") else []
    info = getattr(item, "_fixtureinfo", None)
    if info is not None:
        funcs += [d.func for name in fixtures for d in info.name2fixturedefs.get(name, ())]
    for func in funcs:
        code = test_code(func)
        if code is None:
            continue
        words = scan.words(code, inspect.unwrap(func).__globals__)
        hit = sorted(words & names) or sorted({w.removeprefix(STRING) for w in words if w.startswith(STRING)} & strings)
        if hit:
            return f"{func.__name__} uses {hit[0]}"
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "quick: set by tests/tiers.py: no llama.cpp model, no Pilot, no terminal")
    config.addinivalue_line("markers", "slow: a test for the whole suite only (set by tests/tiers.py, or by hand)")
    config.addinivalue_line("markers", "alone: runs llama.cpp, so runs after the others in one process (set by "
                            "tests/tiers.py for real_model and llama.cpp tests, or by hand for a model a subprocess loads)")
    watch_slow_parts()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    scan = CodeScan()
    for item in items:
        alone = alone_reason(item, scan)
        reason = alone or slow_reason(item, scan)
        if reason is None:
            item.add_marker(pytest.mark.quick)
        else:
            item.add_marker(pytest.mark.slow)
            item.user_properties.append(("tier", f"slow: {reason}"))
        if alone is not None:
            item.add_marker(pytest.mark.alone)


# The run-time check: what a quick test started that the scan did not see.
_running: list[pytest.Item] = []
_started: list[str] = []


def _noting(what: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _running:
            _started.append(what)
        return original(*args, **kwargs)

    return wrapper


def watch_slow_parts() -> None:
    try:
        from llama_cpp._internals import LlamaModel  # what ribbit's runtime and llama_cpp.Llama both load through
        from textual.app import App
    except ImportError:  # pragma: no cover - both are dependencies of ribbit
        return
    if not getattr(LlamaModel.__init__, "__wrapped__", None):
        LlamaModel.__init__ = _noting(LOADS_A_MODEL, LlamaModel.__init__)  # type: ignore[method-assign]
        App.run_test = _noting("drives the TUI with Pilot", App.run_test)  # type: ignore[method-assign]


LOADS_A_MODEL = "loads a llama.cpp model"


@pytest.fixture(autouse=True)
def tier_guard(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    """A quick test must not load a model or drive the TUI, and only an `alone` test may load a model (the
    others share the machine with a second worker); this says so, and how to fix it."""
    quick = request.node.get_closest_marker("quick") is not None
    watched = request.node.get_closest_marker("alone") is None
    if watched:
        _running.append(request.node)
        _started.clear()
    yield
    if watched:
        _running.clear()
        started = [what for what in _started if quick or what == LOADS_A_MODEL]
        if started:
            pytest.fail(f"{request.node.nodeid} {started[0]}, so it is no {'quick' if quick else 'shared'} test: mark it "
                        "@pytest.mark.real_model (or slow); tests/tiers.py names what puts a test there by itself")
