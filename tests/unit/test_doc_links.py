"""Every relative link in the README and docs/*.md (and the Markdown files they reach) names a file
that exists, and every `#anchor` a heading of that file, as GitHub renders it. External links
(http, mailto) are left alone: the tests run offline."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(number, line) outside fenced code blocks (a link or heading inside one is code, not Markdown)."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps its words
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(path.read_text()):
        match = HEADING.match(line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for number, line in prose_lines(path.read_text()):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{number}: {target}"
            if not linked.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{where} (no heading #{anchor} in {linked.relative_to(root)})")
    return broken


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("*/README.md"))]


def test_slug_follows_github() -> None:
    assert slug("Resume, rewind, compaction") == "resume-rewind-compaction"
    assert slug("Calibration quality on real weights (SmolLM2-135M)") == "calibration-quality-on-real-weights-smollm2-135m"
    assert slug("The `Bash` sandbox") == "the-bash-sandbox"


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n\n```\n[code](x.md)\n```\n[ok](#top) [gone](b.md) [no heading](a.md#nowhere)\n")
    assert broken_links(tmp_path / "a.md", tmp_path) == [
        "a.md:6: b.md (no such file)", "a.md:6: a.md#nowhere (no heading #nowhere in a.md)"]


def test_docs_links_resolve() -> None:
    broken = [problem for path in documents() for problem in broken_links(path)]
    assert broken == [], "\n".join(broken)
