"""``--calibrate DIR``: the importance matrix llama.cpp's eval callback collects from a repository's text,
its file format, what quantising with it changes, and every bad input as one line."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType

from quantize._calibrate_worker import MIN_ROWS, batches, plan_chunks
from quantize.calibrate import calibrate, calibration_text
from agent.git import tracked_files
from quantize.cli import quantize_main as _quantize_main
from quantize.imatrix import ImportanceMatrix, load_imatrix, read_imatrix
from models.llama_runtime import open_for_logits as load_llama
from quantize.verify import greedy
from tests.quantize.checkpoints import SAMPLE_CODE
from tests.quantize.test_bad_input import PREFIX, run_failing


def quantize(argv: list[str]) -> int:
    """`ribbit quantize` as the CLI calls it: with ribbit's hardened git listing the tracked files."""
    return _quantize_main(argv, list_tracked=tracked_files)


MODULE = '''"""A small module: parsing and formatting of version strings."""

import re

_VERSION = re.compile(r"(\\d+)\\.(\\d+)(?:\\.(\\d+))?")


def parse(text: str) -> tuple[int, int, int]:
    match = _VERSION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not a version: {text!r}")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def bump(version: tuple[int, int, int], part: str = "patch") -> tuple[int, int, int]:
    major, minor, patch = version
    if part == "major":
        return major + 1, 0, 0
    if part == "minor":
        return major, minor + 1, 0
    return major, minor, patch + 1
'''


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                   check=True, capture_output=True)


def make_repo(root: Path, files: dict[str, bytes]) -> Path:
    root.mkdir(parents=True)
    _git(root, "init", "-q")
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "files")
    return root


@pytest.fixture(scope="session")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small project: two modules, a README, a binary and an ignored file that must not be read."""
    root = tmp_path_factory.mktemp("calib") / "project"
    make_repo(root, {"pkg/version.py": MODULE.encode(), "pkg/sample.py": SAMPLE_CODE.encode() * 3,
                     "README.md": b"# project\n\nParses versions. Run `python -m pkg` to try it.\n" * 4,
                     "logo.png": b"\x89PNG\r\n\x1a\n\0\0\0" + bytes(range(256)) * 8, ".gitignore": b"secret.txt\n"})
    (root / "secret.txt").write_text("an untracked file the matrix must not see\n")
    return root


def _matmul_weights(gguf: Path) -> dict[str, int]:
    """Every weight the forward pass multiplies by (name -> its column count): the 2-D block weights
    but the convolution kernel, and not those of the MTP block, which a plain forward pass skips."""
    reader = GGUFReader(gguf)
    arch = reader.fields["general.architecture"].contents()
    n_block = reader.fields[f"{arch}.block_count"].contents()
    nextn = reader.fields.get(f"{arch}.nextn_predict_layers")
    first_mtp = n_block - (nextn.contents() if nextn else 0)
    return {t.name: int(t.shape[0]) for t in reader.tensors
            if t.name.startswith("blk.") and len(t.shape) == 2 and "conv1d" not in t.name
            and int(t.name.split(".")[1]) < first_mtp}


@pytest.mark.parametrize("arch", ["llama", "qwen35"])
def test_matrix_has_one_entry_per_matmul_weight(arch: str, converted: Callable, repo: Path, tmp_path: Path) -> None:
    gguf = converted(arch)
    result = calibrate(gguf, calibration_text(repo, 300, tracked_files), tmp_path / "m.imatrix.gguf", tokens=300)
    matrix = read_imatrix(result.path)
    expected = _matmul_weights(gguf)
    assert {name: e.n_cols for name, e in matrix.entries.items()} == expected
    for name, entry in matrix.entries.items():
        assert entry.counts.tolist() == [300], name  # every token reached every weight (logits at all positions)
        assert np.all(np.isfinite(entry.sums)) and entry.sums.min() >= 0 and entry.sums.max() > 0, name
    assert (result.entries, result.tokens) == (len(expected), 300)


def test_matrix_holds_the_squared_activations(converted: Callable, repo: Path, tmp_path: Path) -> None:
    """blk.0.attn_q's input is RMSNorm(token embedding) * attn_norm: recomputed here from the GGUF and
    the tokens llama.cpp reads, it must be what the eval callback summed."""
    gguf = converted("llama")
    text = calibration_text(repo / "pkg", 10_000, tracked_files)
    matrix = read_imatrix(calibrate(gguf, text, tmp_path / "m.gguf", tokens=10_000).path)
    llm = load_llama(gguf)
    stream: list[int] = []
    for path in text.files:
        stream += llm.tokenize((path.read_text() + "\n\n").encode(), add_bos=False, special=False)
    tokens = [t for chunk in plan_chunks(stream, matrix.chunk_size, llm.token_bos()) for t in chunk]
    assert matrix.entries["blk.0.attn_q.weight"].counts.tolist() == [len(tokens)]  # all the text
    reader = GGUFReader(gguf)
    weights = {t.name: t for t in reader.tensors}
    embd = weights["token_embd.weight"]
    table = (np.asarray(embd.data).view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(-1, int(embd.shape[0]))
    eps = reader.fields["llama.attention.layer_norm_rms_epsilon"].contents()
    x = table[tokens].astype(np.float64)
    normed = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * np.asarray(weights["blk.0.attn_norm.weight"].data)
    expected = (normed * normed).sum(axis=0)
    got = matrix.entries["blk.0.attn_q.weight"].sums[0]
    np.testing.assert_allclose(got, expected, rtol=2e-3)
    # the three projections read the same input
    for name in ("blk.0.attn_k.weight", "blk.0.attn_v.weight"):
        np.testing.assert_array_equal(matrix.entries[name].sums, matrix.entries["blk.0.attn_q.weight"].sums)


def test_only_tracked_text_is_read(repo: Path) -> None:
    text = calibration_text(repo, 10_000, tracked_files)
    assert sorted(p.name for p in text.files) == [".gitignore", "README.md", "sample.py", "version.py"]
    assert text.n_tracked == 5 and text.dataset.startswith("project@")
    assert calibration_text(repo, 10_000, tracked_files).files == text.files  # a fixed order: the same tree, the same matrix


def test_the_file_is_llama_imatrix_format(converted: Callable, repo: Path, tmp_path: Path) -> None:
    """What llama-quantize's loader requires (common/imatrix-loader.cpp, tools/quantize): the three
    metadata keys, F32 `<weight>.in_sum2` (n_cols x n_mat) and `<weight>.counts` (1 x n_mat)."""
    path = calibrate(converted("qwen3"), calibration_text(repo, 200, tracked_files), tmp_path / "m.gguf", tokens=200).path
    reader = GGUFReader(path)
    assert reader.fields["general.type"].contents() == "imatrix"
    assert reader.fields["imatrix.datasets"].types == [GGUFValueType.ARRAY, GGUFValueType.STRING]
    assert reader.fields["imatrix.datasets"].contents()[0].startswith("project@")
    assert reader.fields["imatrix.chunk_count"].types == [GGUFValueType.UINT32]
    assert reader.fields["imatrix.chunk_size"].contents() == 200
    names = [t.name for t in reader.tensors]
    weights = [n.removesuffix(".in_sum2") for n in names[::2]]
    assert weights == sorted(weights) and names[1::2] == [f"{w}.counts" for w in weights]  # llama-imatrix's order
    for t in reader.tensors:
        assert t.tensor_type.name == "F32"
        assert [int(n) for n in t.shape][1:] == [1] and (t.name.endswith(".in_sum2") or t.shape[0] == 1), t.name


def test_matrix_changes_the_quantised_bytes_and_the_result_generates(checkpoints: Callable, repo: Path, tmp_path: Path) -> None:
    src = str(checkpoints("llama"))
    plain, calibrated = tmp_path / "plain.gguf", tmp_path / "cal.gguf"
    assert quantize([src, "-o", str(plain), "--type", "Q4_K_M"]) == 0
    assert quantize([src, "-o", str(calibrated), "--type", "Q4_K_M", "--calibrate", str(repo),
                          "--calibrate-tokens", "256"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.gguf", "cal.imatrix.gguf", "plain.gguf"]
    a = {t.name: bytes(t.data) for t in GGUFReader(plain).tensors}
    b = {t.name: bytes(t.data) for t in GGUFReader(calibrated).tensors}
    assert a.keys() == b.keys()
    changed = [n for n in a if a[n] != b[n]]
    assert changed and all(n.startswith("blk.") for n in changed)
    fields = GGUFReader(calibrated).fields
    assert fields["quantize.imatrix.file"].contents() == "cal.imatrix.gguf"
    assert fields["quantize.imatrix.entries_count"].contents() == 14  # 2 layers x 7 weights
    assert greedy(load_llama(calibrated), "def fibonacci(n):\n", 8)  # llama.cpp loads it and generates


def test_low_bit_types_quantise(converted: Callable, repo: Path, tmp_path: Path) -> None:
    matrix = calibrate(converted("qwen3"), calibration_text(repo, 128, tracked_files), tmp_path / "m.gguf", tokens=128).path
    for qtype in ("Q2_K", "Q3_K_S", "Q3_K_M", "IQ4_XS"):
        out = tmp_path / f"{qtype}.gguf"
        assert quantize([str(converted("qwen3")), "-o", str(out), "--type", qtype, "--imatrix", str(matrix)]) == 0
        assert GGUFReader(out).fields["general.file_type"].contents() == {"Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "IQ4_XS": 30}[qtype]


@pytest.mark.real_model
def test_the_embedded_model_is_calibrated_and_requantised(repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from models.embedded import shipped_model_path

    shipped = shipped_model_path()
    out = tmp_path / "smol-IQ3_XXS.gguf"
    # IQ3_XXS: llama.cpp refuses it for any weight without a matrix entry of the right size (SmolLM2's
    # ffn_down takes it; its other weights, 576 columns, fall back to IQ4_NL)
    assert quantize([str(shipped), "-o", str(out), "--type", "IQ3_XXS", "--calibrate", str(repo),
                          "--calibrate-tokens", "128"]) == 0
    err = capsys.readouterr().err
    assert "warning: SmolLM2-135M-Instruct.Q4_1.gguf is Q4_1: requantising" in err
    matrix = read_imatrix(tmp_path / "smol-IQ3_XXS.imatrix.gguf")
    assert len(matrix.entries) == 30 * 7 and {int(e.counts[0]) for e in matrix.entries.values()} == {128}
    reader = GGUFReader(out)
    assert reader.fields["general.file_type"].contents() == 23
    assert {t.tensor_type.name for t in reader.tensors if "ffn_down" in t.name} <= {"IQ3_XXS", "IQ3_S", "Q4_K", "IQ4_XS", "Q2_K"}
    assert "IQ3_XXS" in {t.tensor_type.name for t in reader.tensors}
    assert greedy(load_llama(out), "def fibonacci(n):\n", 8).strip()


def test_a_type_that_needs_a_matrix(converted: Callable, repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = converted("qwen35")  # with an MTP block, which a forward pass does not run
    capsys.readouterr()  # building the checkpoint talks
    rc = quantize([str(src), "-o", str(tmp_path / "no.gguf"), "--type", "IQ3_XXS"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err == [f"{PREFIX}IQ3_XXS needs an importance matrix: add --calibrate DIR (or --imatrix FILE)"]
    out = tmp_path / "yes.gguf"
    assert quantize([str(src), "-o", str(out), "--type", "IQ3_XXS", "--calibrate", str(repo), "--calibrate-tokens", "128"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("quantize: ")]
    assert len(notes) == 1 and "did not reach (blk.4." in notes[0] and "Q4_K" in notes[0], notes
    assert GGUFReader(out).fields["general.file_type"].contents() == 23
    assert sorted(p.name for p in tmp_path.iterdir()) == ["yes.gguf", "yes.imatrix.gguf"]


def test_gguf_sources_need_no_warning_when_exact(converted: Callable, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    q8 = tmp_path / "q8.gguf"
    assert quantize([str(converted("qwen3")), "-o", str(q8), "--type", "Q8_0"]) == 0  # a BF16 GGUF as SRC
    out = tmp_path / "q4.gguf"
    assert quantize([str(q8), "-o", str(out)]) == 0  # Q8_0 -> Q4_K_M: requantised, no warning
    assert "warning" not in capsys.readouterr().err
    assert GGUFReader(out).fields["general.file_type"].contents() == 15
    assert quantize([str(out), "-o", str(tmp_path / "q3.gguf"), "--type", "Q3_K_M"]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "Q4_K_M" in warnings[0] and "loses quality" in warnings[0]


# -- bad input: one line, nothing left behind ------------------------------------------------------


def test_empty_dir(ckpt: Path, repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = repo / "empty"
    empty.mkdir(exist_ok=True)
    line = run_failing([str(ckpt), "--calibrate", str(empty)], capsys, tmp_path / "out")
    assert "empty" in line and "tracks no files" in line


def test_binary_only_dir(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = make_repo(tmp_path / "bin", {"a.png": b"\x89PNG\0\0" * 100, "b.bin": bytes(range(256)), "c.txt": b""})
    line = run_failing([str(ckpt), "--calibrate", str(binary)], capsys, tmp_path / "out")
    assert "none of the 3 tracked files here is text" in line


def test_dir_outside_any_repository(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.py").write_text(MODULE)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    line = run_failing([str(ckpt), "--calibrate", str(plain)], capsys, tmp_path / "out")
    assert "plain" in line and "not inside a git repository" in line


@pytest.mark.parametrize("args, words", [
    (["--calibrate", "{repo}", "--calibrate-tokens", "0"], "--calibrate-tokens must be at least 64 (got 0)"),
    (["--calibrate-tokens", "500"], "--calibrate-tokens goes with --calibrate DIR"),
    (["--calibrate", "{repo}", "--imatrix", "m.gguf"], "not allowed with argument"),
    (["--calibrate", "{repo}", "--type", "BF16"], "BF16 is not quantised"),
])
def test_usage_errors(args: list[str], words: str, ckpt: Path, repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    rc = quantize([str(ckpt), "-o", str(out / "m.gguf"), *[a.format(repo=repo) for a in args]])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith(PREFIX) and words in err[0], err
    assert list(out.iterdir()) == []


def test_gguf_src_refusals(converted: Callable, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = quantize([str(converted("qwen3")), "-o", str(tmp_path / "x.gguf"), "--type", "BF16"])
    assert rc == 2 and "--type BF16 converts a checkpoint folder" in capsys.readouterr().err
    not_gguf = tmp_path / "model.safetensors"
    not_gguf.write_bytes(b"\x08\0\0\0\0\0\0\0{}      ")
    line = run_failing([str(not_gguf)], capsys, tmp_path / "out")
    assert "model.safetensors" in line and "not a GGUF file" in line


@pytest.fixture
def ckpt(checkpoints: Callable) -> Path:
    return Path(checkpoints("qwen3"))


# -- the matrix's arithmetic -----------------------------------------------------------------------


def test_dense_and_routed_sums() -> None:
    rng = np.random.default_rng(0)
    m = ImportanceMatrix()
    x = rng.normal(size=(1, 3, 5, 4)).astype(np.float32)  # 3 stacked inputs, 5 rows, 4 columns
    m.add_dense("blk.0.w.weight", x, w_ne2=3)
    e = m.entries["blk.0.w.weight"]
    np.testing.assert_allclose(e.sums, (x[0].astype(np.float64) ** 2).sum(axis=1))
    assert e.counts.tolist() == [5, 5, 5]
    x2 = rng.normal(size=(1, 1, 7, 4)).astype(np.float32)
    m.add_dense("blk.0.v.weight", x2)
    assert m.entries["blk.0.v.weight"].counts.tolist() == [7]
    experts = np.array([[0, 2], [2, 1], [2, 0]], dtype=np.int32)  # 3 tokens, 2 experts each, of 4
    xr = rng.normal(size=(3, 2, 4)).astype(np.float32)
    m.add_routed("blk.0.ffn_up_exps.weight", xr, experts, 4)
    r = m.entries["blk.0.ffn_up_exps.weight"]
    want = np.zeros((4, 4))
    for t in range(3):
        for s in range(2):
            want[experts[t, s]] += xr[t, s].astype(np.float64) ** 2
    np.testing.assert_allclose(r.sums, want)
    assert r.counts.tolist() == [2, 1, 3, 0]


def test_save_read_and_normalise(tmp_path: Path) -> None:
    m = ImportanceMatrix(datasets=["repo@abc"], chunk_count=2, chunk_size=512)
    m.add_routed("blk.0.e.weight", np.ones((2, 1, 3), np.float32) * 2, np.array([[1], [1]], np.int32), 2)
    m.add_dense("blk.0.d.weight", np.full((1, 1, 4, 3), 3.0, np.float32))
    m.save(tmp_path / "m.gguf")
    back = read_imatrix(tmp_path / "m.gguf")
    assert (back.datasets, back.chunk_count, back.chunk_size) == (["repo@abc"], 2, 512)
    np.testing.assert_array_equal(back.entries["blk.0.d.weight"].sums, [[36.0] * 3])
    norm = load_imatrix(tmp_path / "m.gguf")
    np.testing.assert_array_equal(norm["blk.0.d.weight"], [9.0] * 3)  # sum / count
    np.testing.assert_array_equal(norm["blk.0.e.weight"], [1.0] * 3 + [4.0] * 3)  # an unused expert weighs 1


def test_chunks_and_batches() -> None:
    chunks = plan_chunks(list(range(1000)), 512, bos=7)
    assert [len(c) for c in chunks] == [512, 490] and all(c[0] == 7 for c in chunks)
    assert [len(c) for c in plan_chunks(list(range(520)), 512, bos=None)] == [512]  # an 8-token tail is dropped
    for n in (16, 17, 300, 512):
        parts = batches(list(range(n)), 256)
        assert sum(map(len, parts)) == n and min(map(len, parts)) >= MIN_ROWS and max(map(len, parts)) <= 256
