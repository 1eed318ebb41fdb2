"""Regenerate docs/review.svg: a diff review in progress, driven by Pilot on a fixture repo.

    python docs/make_screenshot.py
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.app import make_app  # noqa: E402
from app.screens.review import EditReviewScreen  # noqa: E402

ORIGINAL = '''import math


def area(radius):
    """Area of a circle."""
    return 3.14 * radius * radius


def describe(shape, size):
    print("shape: " + shape + ", size: " + str(size))
    return None


def total(values):
    result = 0
    for v in values:
        result = result + v
    return result
'''

PROPOSED = '''import math


def area(radius: float) -> float:
    """Area of a circle."""
    return math.pi * radius**2


def describe(shape, size):
    print("shape: " + shape + ", size: " + str(size))
    return None


def total(values):
    return sum(values)
'''


def call(name: str, **params: str) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


async def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="ribbit-shot-"))
    os.environ["XDG_STATE_HOME"] = str(work / "state")
    repo = work / "geometry"
    repo.mkdir()
    (repo / "shapes.py").write_text(ORIGINAL)
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "init"], check=True)
    replay = work / "frognano-demo.jsonl"
    turns = [
        "<think>Two things to tidy: the pi constant and the manual sum.</think>Let me read it first.\n"
        + call("Read", file_path="shapes.py"),
        "I'll use `math.pi`, add type hints, and replace the loop with `sum`.\n"
        + call("Write", file_path="shapes.py", content=PROPOSED),
    ]
    replay.write_text("".join(json.dumps({"text": t}) + "\n" for t in turns))
    app = make_app(repo, f"replay:{replay}", no_sandbox=True)
    async with app.run_test(size=(110, 34)) as pilot:
        while app.workspace is None:
            await pilot.pause(0.05)
        app.main.prompt.cursor_blink = False
        app.main.prompt.insert("tidy up shapes.py")
        await pilot.press("enter")
        while not isinstance(app.screen, EditReviewScreen):
            await pilot.pause(0.05)
        await pilot.press("j", "space", "k")  # skip the second hunk, back on the first
        await pilot.pause(0.2)
        out = ROOT / "docs"
        app.save_screenshot("review.svg", path=str(out))
        print(out / "review.svg")
        app.screen.dismiss(None)


if __name__ == "__main__":
    asyncio.run(main())
