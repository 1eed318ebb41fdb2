"""The status bar on a narrow terminal (issue 40): the mode and the sandbox always stay; the figures that
matter least go first; what fits again is put back; the model's name is shortened only when it must be."""

from __future__ import annotations

from app.widgets.status_bar import KEPT, SEPARATOR, fit

PARTS = [("SmolLM2-135M-Instruct Q8_0", "bold", KEPT), ("2t", "", 1), ("ctx 1.1k/4.1k (grows to 8.2k)", "", 5),
         ("step 0/150", "", 4), ("61.2 tok/s", "", 2), ("mode ask", "", KEPT), ("sandbox on", "", KEPT),
         ("2 changed outside", "", 8)]


def shown(width: int) -> list[str]:
    return [text for text, _, _ in fit(PARTS, width)]


def test_everything_when_it_fits_and_nothing_lost_when_not_laid_out() -> None:
    assert shown(200) == [p[0] for p in PARTS] and shown(0) == [p[0] for p in PARTS]


def test_80_columns_keep_mode_sandbox_and_outside_changes_and_put_back_what_fits() -> None:
    line = shown(78)
    assert len(SEPARATOR.join(line)) <= 78
    assert {"SmolLM2-135M-Instruct Q8_0", "mode ask", "sandbox on", "2 changed outside"} <= set(line)
    assert line == [p[0] for p in PARTS if p[0] in line]  # in their places
    for missing in (p[0] for p in PARTS if p[0] not in line):  # nothing left out that would have fitted
        assert len(SEPARATOR.join([*line, missing])) > 78


def test_very_narrow_shortens_the_model_name_last() -> None:
    line = shown(40)
    assert line[1:] == ["mode ask", "sandbox on"] and line[0].endswith("…") and len(SEPARATOR.join(line)) <= 40
