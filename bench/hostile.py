"""Cost of hostile tool inputs: time and peak memory of each attack, on one or more source trees.

Each attack runs in its own child process (a fresh interpreter, capped at 4 GiB of address space and
--timeout seconds), so a hang or a memory blow-up is measured, not suffered. Pass `--tree DIR` more
than once to compare checkouts (e.g. main before the fix and this branch): the attacks alternate
between the trees, --rounds times, and the medians are printed. Prints figures; asserts nothing.

    python -m bench.hostile [--tree DIR ...] [--only NAME ...] [--rounds 1] [--timeout 60]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HUGE_BYTES = 2 * 1024**3
MEMORY_CAP = 4 * 1024**3


# --- the attacks (run in the child; they use only APIs that exist on every tree compared) ---------


def _context(root: Path):  # type: ignore[no-untyped-def]
    from agent.core.approvals import AllowList, ApprovalOrchestrator, ApprovalPolicy
    from agent.core.tools.changes import ChangeGate
    from agent.core.tools.readstate import ReadState
    from agent.sandbox.runner import LocalRunner
    from agent.core.tools import ToolContext
    from agent.core.tools.base import ShellState

    class Yes:
        def decide(self, request):  # type: ignore[no-untyped-def]
            from agent.core.approvals import ApprovalDecision

            return ApprovalDecision(approved=True)

    read_state = ReadState()
    policy = ApprovalPolicy("ask", AllowList(None), sandboxed=True)
    approvals = ApprovalOrchestrator(policy, Yes(), lambda event: None)
    gate = ChangeGate(root=root, approvals=approvals, read_state=read_state)
    return ToolContext(
        root=root, read_state=read_state, changes=gate, runner=LocalRunner(root), approvals=approvals,
        shell=ShellState(cwd=root),
    )


def _call(ctx, name: str, **arguments: object) -> str:  # type: ignore[no-untyped-def]
    from agent.core.tools import ToolError, default_tools

    tool = default_tools()[name]
    try:
        return tool.run(tool.args_model.model_validate(arguments), ctx)
    except ToolError as exc:
        return f"Error: {exc}"


def _repo(work: Path, name: str) -> Path:
    root = (work / name).resolve()
    root.mkdir()
    for i in range(300):
        (root / f"pkg{i % 10}").mkdir(exist_ok=True)
        (root / f"pkg{i % 10}" / f"mod{i}.py").write_text("x = 1\n")
    return root


def repeated_lines(count: int) -> str:
    """A file of `count` lines drawn from a handful of distinct ones (the worst case for difflib)."""
    shapes = ["    pass\n", "\n", "    return None\n", "}\n", "    x += 1\n"]
    return "".join(shapes[i % len(shapes)] for i in range(count))


def glob_braces(work: Path) -> Callable[[], str]:
    ctx = _context(_repo(work, "repo"))
    return lambda: _call(ctx, "Glob", pattern="{a,b}" * 26 + ".py")


def glob_backtracking(work: Path) -> Callable[[], str]:
    root = _repo(work, "repo")
    (root / ("a" * 200)).write_text("x\n")
    ctx = _context(root)
    return lambda: _call(ctx, "Glob", pattern="*a" * 12 + "*b")


def glob_deep_globstars(work: Path) -> Callable[[], str]:
    root = _repo(work, "repo")
    deep = root.joinpath(*["x"] * 80)
    deep.mkdir(parents=True)
    (deep / "z").write_text("x\n")
    ctx = _context(root)
    return lambda: _call(ctx, "Glob", pattern="**/x/" * 10 + "**/y")


HOSTILE_IGNORE = "*a*a*a*a*a*a*a*a*c\n**/*a*a*a*a*a*a*a*a*c/**\n"


def _nested_hostile_ignore(work: Path) -> Path:
    """A repository holding a nested one whose .gitignore backtracks on a 200-letter name."""
    root = _repo(work, "repo")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "init", "-q", str(root / "sub")], check=True)
    (root / "sub" / ".gitignore").write_text(HOSTILE_IGNORE)
    (root / "sub" / ("a" * 200)).write_text("x\n")
    (root / "sub" / "deep" / "a" / "a").mkdir(parents=True)
    (root / "sub" / "deep" / "a" / "a" / ("a" * 200)).write_text("x\n")
    return root


def ignore_backtracking_glob(work: Path) -> Callable[[], str]:
    """Glob's own .gitignore walk (no session: the whole tree is walked by ribbit)."""
    root = _nested_hostile_ignore(work)
    (root / ".gitignore").write_text(HOSTILE_IGNORE)
    ctx = _context(root)
    return lambda: _call(ctx, "Glob", pattern="**/" + "a" * 200)


def ignore_backtracking_journal(work: Path) -> Callable[[], str]:
    """The journal's snapshot, which walks the nested repository itself."""
    from agent.undo.journal import Journal

    journal = Journal(_nested_hostile_ignore(work))
    return lambda: str(journal.snapshot("start"))


def glob_bad_range(work: Path) -> Callable[[], str]:
    ctx = _context(_repo(work, "repo"))
    return lambda: _call(ctx, "Glob", pattern="[z-a]*.py")


def read_fifo(work: Path) -> Callable[[], str]:
    root = _repo(work, "repo")
    os.mkfifo(root / "pipe")
    ctx = _context(root)
    return lambda: _call(ctx, "Read", file_path="pipe")


def read_huge(work: Path) -> Callable[[], str]:
    root = (work / "huge").resolve()  # made once by the parent: 2 GiB of text lines
    ctx = _context(root)
    return lambda: _call(ctx, "Read", file_path="big.txt", offset=1000, limit=20)


def edit_repeated_lines(work: Path) -> Callable[[], str]:
    root = _repo(work, "repo")
    text = repeated_lines(40_000)
    middle = text.count("\n") // 2
    lines = text.splitlines(keepends=True)
    lines[middle] = "    marker = 'here'\n"
    (root / "big.py").write_text("".join(lines))
    ctx = _context(root)
    _call(ctx, "Read", file_path="big.py", limit=1)
    return lambda: _call(ctx, "Edit", file_path="big.py", old_string="    marker = 'here'\n", new_string="    marker = 'there'\n    pass\n")


def write_repeated_lines(work: Path) -> Callable[[], str]:
    root = _repo(work, "repo")
    old = repeated_lines(40_000)
    (root / "big.py").write_text(old)
    lines = old.splitlines(keepends=True)
    for i in range(0, len(lines), 400):
        lines[i] = f"    changed_{i} = True\n"
    ctx = _context(root)
    _call(ctx, "Read", file_path="big.py", limit=1)
    return lambda: _call(ctx, "Write", file_path="big.py", content="".join(lines))


def edit_many_occurrences(work: Path) -> Callable[[], str]:
    root = _repo(work, "repo")
    (root / "a.txt").write_text(("a" * 99 + "\n") * 100_000)  # 10 MB, 9.9 M occurrences of "a"
    ctx = _context(root)
    _call(ctx, "Read", file_path="a.txt", limit=1)
    return lambda: _call(ctx, "Edit", file_path="a.txt", old_string="a", new_string="b")


def edit_closest_long_lines(work: Path) -> Callable[[], str]:
    root = _repo(work, "repo")
    (root / "long.txt").write_text("".join(f"{i} " + "abcd" * 5_000 + "\n" for i in range(200)))
    ctx = _context(root)
    _call(ctx, "Read", file_path="long.txt", limit=1)
    return lambda: _call(ctx, "Edit", file_path="long.txt", old_string="dcba" * 5_000, new_string="x")


def edit_closest_similar_lines(work: Path) -> Callable[[], str]:
    root = _repo(work, "repo")
    (root / "similar.txt").write_text(("abcd" * 50 + "\n") * 50_000)
    ctx = _context(root)
    _call(ctx, "Read", file_path="similar.txt", limit=1)
    return lambda: _call(ctx, "Edit", file_path="similar.txt", old_string="dcba" * 50, new_string="x")


def _parse(dialect: str, text: str) -> Callable[[], str]:
    from models.dialects import parser_for
    from agent.core.tools import default_tools

    parser = parser_for(dialect, [t.spec() for t in default_tools().values()])

    def run() -> str:
        turn = parser.parse(text)
        return f"{len(turn.tool_calls)} calls, errors: {turn.errors}"[:200]

    return run


NESTED = "[" * 100_000


def nested_qwen3_coder(work: Path) -> Callable[[], str]:
    text = f"<tool_call>\n<function=Read>\n<parameter=offset>\n{NESTED}\n</parameter>\n</function>\n</tool_call>"
    return _parse("qwen3_coder", text)


def unclosed_functions(work: Path) -> Callable[[], str]:
    return _parse("qwen3_coder", "<tool_call>\n" + "<function=" * 20_000)


def nested_hermes(work: Path) -> Callable[[], str]:
    return _parse("hermes", '<tool_call>{"name": "Read", "arguments": {"file_path": ' + NESTED + "}}</tool_call>")


def nested_json(work: Path) -> Callable[[], str]:
    return _parse("json", '{"tool": "Read", "arguments": {"file_path": ' + NESTED + "}}")


ATTACKS: dict[str, Callable[[Path], Callable[[], str]]] = {
    f.__name__: f
    for f in (
        glob_braces, glob_backtracking, glob_deep_globstars, glob_bad_range, ignore_backtracking_glob,
        ignore_backtracking_journal, read_fifo, read_huge,
        edit_repeated_lines, write_repeated_lines, edit_many_occurrences, edit_closest_long_lines, edit_closest_similar_lines,
        nested_qwen3_coder, nested_hermes, nested_json, unclosed_functions,
    )
}


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def child(name: str, work: Path) -> None:
    """Run one attack here and print one JSON line: seconds, memory before and at peak, outcome."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    attack = ATTACKS[name](work)
    before = _rss_kb()
    started = time.perf_counter()
    try:
        outcome = attack()
    except BaseException as exc:  # the point is to see what escapes
        outcome = f"EXCEPTION {type(exc).__name__}: {str(exc)[:120]}"
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    first = outcome.strip().splitlines()[0] if outcome.strip() else ""
    print(json.dumps({"seconds": seconds, "before_mb": before / 1024, "peak_mb": peak / 1024, "outcome": first[:150]}))


# --- the parent -------------------------------------------------------------------------------


def make_huge(folder: Path) -> None:
    folder.mkdir()
    line = b"".join(b"line %06d of a very large text file, padded to be long enough\n" % i for i in range(16_384))
    with (folder / "big.txt").open("wb") as handle:
        written = 0
        while written < HUGE_BYTES:
            handle.write(line)
            written += len(line)


def _peak_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def measure(tree: Path, name: str, base: Path, timeout: float) -> dict[str, object]:
    work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))
    if name == "read_huge":
        (work / "huge").symlink_to(base / "huge")
    env = dict(os.environ, PYTHONPATH=str(tree))
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--child", name, "--work", str(work)],
        cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        peak = _peak_mb(proc.pid)  # the high-water mark so far, read before the kill
        proc.kill()
        proc.communicate()
        killed: dict[str, object] = {"seconds": None, "outcome": f"still running after {timeout:.0f} s (killed)"}
        if peak is not None:
            killed.update(peak_mb=peak, before_mb=0.0)
        return killed
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=False)
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (err.strip().splitlines() or ["?"])[-1]
        return {"seconds": time.perf_counter() - started, "outcome": f"child died (rc {proc.returncode}): {tail[:120]}"}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", action="append", default=None, help="source tree to measure (repeatable)")
    parser.add_argument("--only", action="append", default=None, choices=sorted(ATTACKS))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--work", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, Path(args.work))
        return
    trees = [Path(t).resolve() for t in (args.tree or [Path(__file__).resolve().parents[1]])]
    names = args.only or list(ATTACKS)
    with tempfile.TemporaryDirectory(prefix="ribbit-hostile-") as tmp:
        base = Path(tmp)
        if "read_huge" in names:
            make_huge(base / "huge")
        results: dict[tuple[str, Path], list[dict[str, object]]] = {}
        for _ in range(args.rounds):
            for name in names:
                for tree in trees:  # alternate the trees, attack by attack
                    results.setdefault((name, tree), []).append(measure(tree, name, base, args.timeout))
    print(f"cap: {MEMORY_CAP // 1024**3} GiB address space, {args.timeout:.0f} s; medians of {args.rounds} round(s)")
    for name in names:
        print(f"\n{name}")
        for tree in trees:
            runs = results[(name, tree)]
            times = [r["seconds"] for r in runs if r.get("seconds") is not None]
            peaks = [r["peak_mb"] for r in runs if "peak_mb" in r]
            growth = [r["peak_mb"] - r["before_mb"] for r in runs if "peak_mb" in r]  # type: ignore[operator]
            when = f"{statistics.median(times):8.3f} s" if times else "       - "  # type: ignore[type-var]
            mem = f"peak {statistics.median(peaks):7.0f} MB (+{statistics.median(growth):.0f})" if peaks else " " * 22  # type: ignore[type-var]
            print(f"  {tree.name:<16} {when}  {mem}  {runs[-1]['outcome']}")


if __name__ == "__main__":
    main()
