"""The README's and evals/README.md's ```sh blocks, run as written by a newcomer with a fresh HOME (issue 40).

Every block is listed below with what happens to it, so a new block fails this test until someone decides:
- run: each command line runs in bash, in order, in a fresh HOME holding a small git project at
  ~/src/myproject and, at ~/Downloads/FrogNano-4B-2609, a tiny random checkpoint of FrogNano's architecture
  (qwen35) standing in for the 9.32 GB download. Each line's exit code is checked: 0, unless the line is
  one whose documented outcome here is another (below, with why).
- skip: with the reason (a server on another machine, a hosted key, the whole suite).
Substitutions, all of them: the install line (`python3 -m venv ~/.ribbit && ~/.ribbit/bin/pip install .`)
becomes a ~/.ribbit/bin/ribbit that runs this checkout — a real pip install compiles llama.cpp for minutes
and needs the network; `[SESSION]` (optional) is left out; RIBBIT_MODEL (the README's own alternative to
--model) is a `replay:` recording that fixes calc.py and then adds a test: the embedded demo model, which
these blocks would otherwise run, wrote a hex dump until its context filled (exit 3, 6m45s for this test on
2 shared cores), and FrogNano is too large for CI. Lines that open the TUI need a terminal: here they must
refuse with that line and exit 2 (tests/tui/test_tmux.py and test_tour.py run them in tmux).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import git, xml_call
from tests.quantize.checkpoints import make_qwen35

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "evals/README.md")
INSTALL = "python3 -m venv ~/.ribbit && ~/.ribbit/bin/pip install ."


@dataclass(frozen=True)
class Block:
    doc: str
    text: str

    @property
    def first(self) -> str:
        return self.text.strip().splitlines()[0]


def sh_blocks(doc: str) -> list[Block]:
    text = (ROOT / doc).read_text()
    return [Block(doc, body) for body in re.findall(r"^```sh\n(.*?)^```", text, flags=re.S | re.M)]


# The block's first line (a prefix of it) -> (run it, where, or why not).
DECISIONS: dict[str, tuple[str, str]] = {
    INSTALL: ("run", "clone"),
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]'": ("skip", "runs the whole test suite, this test included"),
    "ribbit quantize ~/Downloads/FrogNano-4B-2609 -o ~/models/frognano-q4_k_m.gguf   # once": ("run", "home"),
    'ribbit run "fix the failing test in tests/test_calc.py"': ("run", "project"),
    "ribbit undo --list": ("run", "project"),
    "ribbit quantize ~/Downloads/FrogNano-4B-2609 -o frognano.gguf": ("run", "home"),
    "ribbit eval evals/starter --model ~/models/frognano-q4_k_m.gguf --model 'openai:http://gpu-box":
        ("skip", "a server on another machine (gpu-box)"),
    "# 1. FrogNano, quantised once": ("skip", "a hosted endpoint (OpenRouter) and its key"),
    "ribbit eval evals/starter --model 'replay:evals/replays/oracle/{task}.jsonl'": ("run", "clone"),
}

NEEDS_TERMINAL = "needs a terminal"
# Lines whose outcome here is not exit 0, and what they must say instead.
EXPECTED: dict[str, tuple[set[int], str]] = {
    "ribbit tour": ({2}, NEEDS_TERMINAL),
    "ribbit --model ~/models/frognano-q4_k_m.gguf": ({2}, NEEDS_TERMINAL),
    "ribbit -c": ({2}, NEEDS_TERMINAL),
}


def decision(block: Block) -> tuple[str, str]:
    found = [v for k, v in DECISIONS.items() if block.first.startswith(k)]
    assert len(found) == 1, f"{block.doc}: no decision (or two) for the block starting {block.first!r}"
    return found[0]


def command_lines(text: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines left out."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def newcomer_home(home: Path) -> dict[str, str]:
    """A fresh HOME with the user's project and (a tiny stand-in for) FrogNano's download; the environment."""
    project = home / "src" / "myproject"
    (project / "tests").mkdir(parents=True)
    (project / "calc.py").write_text("def add(a, b):\n    return a - b\n\n\ndef parse(line):\n    return line.split()\n")
    (project / "tests" / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "-c", "user.name=Me", "-c", "user.email=me@example.com", "commit", "-q", "-m", "start")
    make_qwen35(home / "Downloads" / "FrogNano-4B-2609")
    recording = home / "recording.jsonl"  # `ribbit run`'s model here (see the module's docstring)
    recording.write_text("".join(json.dumps({"text": t}) + "\n" for t in [
        xml_call("Read", file_path="calc.py"),
        "add() subtracts.\n" + xml_call("Edit", file_path="calc.py", old_string="a - b", new_string="a + b"),
        "Fixed: add() adds.",
        xml_call("Write", file_path="tests/test_more.py", content="from calc import add\n\n\ndef test_zero():\n"
                 "    assert add(0, 0) == 0\n"),
        "Added a test.",
    ]))
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "ribbit").exists()]
    return {**os.environ, "HOME": str(home), "PATH": os.pathsep.join([str(home / ".local" / "bin"), *path]),
            "PYTHONPATH": str(ROOT), "RIBBIT_MODEL": f"replay:{recording}"}


def run_block(block: Block, cwd: Path, env: dict[str, str], rc_file: Path) -> tuple[list[tuple[str, int]], str]:
    lines = command_lines(block.text.replace(" [SESSION]", ""))
    script = ["set +e"]
    for number, line in enumerate(lines):
        if line.startswith(INSTALL):  # the one substitution: this checkout instead of a 7-minute compile
            shim = f'#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m app.cli "$@"\n'
            line = (f"mkdir -p ~/.ribbit/bin && printf '%s' '{shim}' > ~/.ribbit/bin/ribbit && "
                    "chmod +x ~/.ribbit/bin/ribbit")
        script += [line, f'echo "{number} $?" >> {rc_file}']
    rc_file.unlink(missing_ok=True)
    proc = subprocess.run(["bash", "--norc", "-c", "\n".join(script)], cwd=cwd, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=900)
    codes = dict(line.split() for line in rc_file.read_text().splitlines())
    return [(line, int(codes[str(n)])) for n, line in enumerate(lines)], proc.stdout + proc.stderr


@pytest.mark.slow  # every README command in a shell: ribbit started a dozen times as a process of its own
def test_the_readme_blocks_run_as_written_on_a_fresh_machine(tmp_path: Path) -> None:
    assert shutil.which("bwrap"), "full-auto in the README's block needs the sandbox"
    home = tmp_path / "home"
    env = newcomer_home(home)
    # The clone: the README's commands run from its top folder; eval-out goes to a copy's folder, not ROOT.
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "evals").symlink_to(ROOT / "evals")
    where = {"clone": clone, "home": home, "project": home / "src" / "myproject"}
    blocks = [b for doc in DOCS for b in sh_blocks(doc)]
    ran: list[str] = []
    for block in blocks:
        kind, place = decision(block)
        if kind == "skip":
            continue
        results, output = run_block(block, where[place], env, tmp_path / "rc")
        for line, code in results:
            expected = next((e for k, e in EXPECTED.items() if line.startswith(k) or line.strip() == k.strip()),
                            ({0}, ""))
            assert code in expected[0], f"{block.doc}: `{line}` exited {code}:\n{output[-3000:]}"
            assert expected[1] in output, f"{block.doc}: `{line}` did not say {expected[1]!r}:\n{output[-3000:]}"
            ran.append(line)

    # What each block did, on disk.
    assert (home / ".local" / "bin" / "ribbit").resolve() == home / ".ribbit" / "bin" / "ribbit"
    models = home / "models"
    assert (models / "frognano-q4_k_m.gguf").read_bytes()[:4] == b"GGUF"  # -o made ~/models
    assert (home / "frognano.gguf").is_file() and (home / "frognano-q3.gguf").is_file()
    project = where["project"]
    assert "+    return a + b" in (project / "fix.patch").read_text()  # `ribbit run ... > fix.patch`
    # `ribbit undo` put back what the last session that changed files (the run and its --continue) changed.
    assert (project / "calc.py").read_text().startswith("def add(a, b):\n    return a - b")
    assert not (project / "tests" / "test_more.py").exists()
    report = (clone / "eval-out" / "report.md").read_text()
    assert "resolved 12 more of 12 tasks" in report
    assert any(line.startswith("ribbit tour") for line in ran) and len(ran) >= 12


def test_every_block_has_a_decision() -> None:
    """Cheap and separate: a block added to either README fails here until it is sorted into run or skip."""
    for doc in DOCS:
        for block in sh_blocks(doc):
            decision(block)


@pytest.mark.parametrize("text, lines", [
    ("a \\\n   b  # c\n# only\n\nd\n", ["a  b  # c", "d"]),
])
def test_command_lines(text: str, lines: list[str]) -> None:
    assert command_lines(text) == lines
