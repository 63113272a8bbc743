"""An LLM export is one whole thing: written into a fresh directory that takes the old one's
place (an export there before is replaced, never mixed with; a directory that is not an export
is refused, not emptied), its manifest listing every file's size and sha256, and ``llm
generate`` refusing, in one line naming the file, an export whose files are not those."""

from __future__ import annotations

import errno
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from qnn_custom_ops import atomic_files
from qnn_custom_ops.atomic_files import OutputWriteError
from qnn_custom_ops.llm.export_files import ExportDirectoryError, verify_files, write_export
from qnn_custom_ops.llm.manifest_json import checksum

pytest.importorskip("transformers", reason="transformers is a dev extra (pip install -e '.[dev]')")

from tests.llm.exports import cli_error  # noqa: E402

FILES = {"model.pte": b"program" * 100, "model.ptd": bytes(range(256)) * 4, "tokenizer/tokenizer.json": b"{}"}


def written(directory: Path, files: dict[str, bytes] = FILES) -> Path:
    """``files`` written as an export, the manifest being the table as JSON."""
    write_export(directory, list(files.items()), lambda table: json.dumps([f.to_json() for f in table]).encode())
    return directory


def listed(directory: Path) -> list:
    from qnn_custom_ops.llm.export_files import ExportFile

    return [ExportFile.from_json(entry) for entry in json.loads((directory / "manifest.json").read_text())]


def tree(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two renames"])
def test_an_export_written_again_replaces_the_old_one_whole(exchange, tmp_path, monkeypatch):
    if not exchange:  # a system or filesystem without RENAME_EXCHANGE
        monkeypatch.setattr(atomic_files, "_exchange", lambda first, second: False)
    out = written(tmp_path / "out", {**FILES, "tokenizer/chat_template.jinja": b"stale"})
    written(out)
    assert sorted(tree(out)) == ["manifest.json", "model.ptd", "model.pte", "tokenizer/tokenizer.json"]
    assert [f.path for f in listed(out)] == list(FILES) and [f.size for f in listed(out)] == [700, 1024, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # nothing staged is left beside it


def test_a_directory_that_is_not_an_export_is_refused_not_emptied(tmp_path, checkpoint, capsys):  # noqa: F811
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ExportDirectoryError, match="holds notes.txt, so it is not an export this one may replace"):
        written(tmp_path)
    assert tree(tmp_path) == {"notes.txt": b"mine"}
    error = cli_error(capsys, "llm", "export", str(checkpoint), "-o", str(tmp_path))  # before the checkpoint is read
    assert error == (f"error: -o {tmp_path}: holds notes.txt, so it is not an export this one may replace; "
                     "choose a new or empty directory")


def test_an_export_holding_the_current_directory_is_not_replaced(tmp_path, monkeypatch):
    """Swapped out whole, it would leave the shell in a deleted directory."""
    out = written(tmp_path / "out")
    monkeypatch.chdir(out / "tokenizer")
    for target in (Path("."), Path("..")):
        with pytest.raises(ExportDirectoryError, match=r"holds the current directory, which replacing it whole"):
            written(target)
    assert tree(out) == tree(written(tmp_path / "again"))


def test_a_write_that_fails_half_way_leaves_the_old_export_as_it_was(tmp_path):
    out = written(tmp_path / "out")
    before = tree(out)

    def full_disk(stream) -> None:
        stream.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OutputWriteError, match=r"No space left on device \(ENOSPC\); nothing was written"):
        written(out, {**FILES, "model.ptd": full_disk})
    assert tree(out) == before and [p.name for p in tmp_path.iterdir()] == ["out"]


def flip(name: str, at: float = 0.5) -> Callable[[Path], None]:
    def damage(directory: Path) -> None:
        data = bytearray((directory / name).read_bytes())
        data[int(len(data) * at)] ^= 0x04
        (directory / name).write_bytes(bytes(data))

    return damage


def link_outside(directory: Path) -> None:
    outside = directory.parent / "elsewhere.ptd"
    shutil.move(directory / "model.ptd", outside)
    (directory / "model.ptd").symlink_to(outside)


FILE_CASES = {
    "a bit flipped in the weights": (flip("model.ptd"), "model.ptd: its content is not what manifest.json lists"),
    "a bit flipped in the program": (flip("model.pte", 0.1), "model.pte: its content is not what manifest.json"),
    "the weights truncated": (lambda d: (d / "model.ptd").write_bytes(b"x"), "model.ptd: 1 bytes, where manifest"),
    "the tokenizer gone": (lambda d: shutil.rmtree(d / "tokenizer"), "tokenizer/tokenizer.json: missing, though"),
    "a file beside them": (lambda d: (d / "tokenizer" / "chat_template.jinja").write_text("{{ 1 }}"),
                           "tokenizer/chat_template.jinja: not a file of this export (manifest.json does not list"),
    "the weights a link outside": (link_outside, "model.ptd: leads outside"),
}


@pytest.mark.parametrize("case", FILE_CASES)
def test_every_file_is_checked_against_the_manifest(case, tmp_path):
    out = written(tmp_path / "out")
    verify_files(out, listed(out))
    damage, said = FILE_CASES[case]
    damage(out)
    with pytest.raises(ExportDirectoryError, match="export again \\(or pass --no-verify to use it as it is\\)") as e:
        verify_files(out, listed(out))
    assert str(e.value).startswith(str(out)) and said in str(e.value), e.value


def renumber_tokenizer(directory: Path) -> None:
    """Two tokens' ids swapped: another tokenizer."""
    path = directory / "tokenizer" / "tokenizer.json"
    body = json.loads(path.read_text())
    vocab = body["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[100:102]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    path.write_text(json.dumps(body))


def edit_manifest(change: Callable[[dict], None], seal: bool) -> Callable[[Path], None]:
    """The manifest changed, and with ``seal`` its checksum made again (as an attacker would)."""

    def damage(directory: Path) -> None:
        body = json.loads((directory / "manifest.json").read_text())
        change(body)
        (directory / "manifest.json").write_text(json.dumps({**body, "checksum": checksum(body)} if seal else body))

    return damage


EXPORT_CASES = {
    "a bit flipped in the weights": (flip("model.ptd"), "model.ptd: its content is not what manifest.json lists"),
    "a tokenizer with its ids renumbered": (renumber_tokenizer, "/tokenizer/tokenizer.json: "),
    "a stale chat template": (lambda d: (d / "tokenizer" / "stale.jinja").write_text("x"), "not a file of this"),
    "an eos id edited": (edit_manifest(lambda b: b.update(eos_ids=[5]), seal=False), "its checksum differs"),
    "a context the program does not have": (edit_manifest(lambda b: b["shape"].update(ctx_len=10**9), seal=True),
                                            "manifest.json: its shape (1 layers, ctx_len 1000000000"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", EXPORT_CASES)
def test_llm_generate_refuses_a_damaged_export_in_one_line(case, float_export, tmp_path, capsys):  # noqa: F811
    damage, said = EXPORT_CASES[case]
    copy = shutil.copytree(float_export, tmp_path / "export")
    damage(copy)
    error = cli_error(capsys, "llm", "generate", str(copy), "--prompt", "hi")
    assert error.startswith(f"error: {copy}") and said in error, error


@pytest.mark.slow
def test_a_manifest_of_another_export_is_refused_by_the_program_itself(float_export, quantized_export, tmp_path,  # noqa: F811
                                                                       capsys):
    """--no-verify skips the files' hashes, never the manifest's agreement with its program:
    a float export's manifest beside a 16a8w program is refused before anything is sized."""
    from qnn_custom_ops.llm.text_generation import load_export

    copy = shutil.copytree(quantized_export, tmp_path / "export")
    shutil.copy(float_export / "manifest.json", copy / "manifest.json")
    error = cli_error(capsys, "llm", "generate", str(copy), "--prompt", "hi", "--no-verify")
    assert error.endswith("manifest.json: it describes a float program, and the program is a quantized one; "
                          "export again"), error
    (copy / "tokenizer" / "stale.jinja").write_text("x")
    shutil.copy(quantized_export / "manifest.json", copy / "manifest.json")
    assert load_export(copy, verify=False).manifest.quant == "16a8w"  # what --no-verify is for
    emptied = edit_manifest(lambda b: [m.update(inputs=[]) for m in b["encodings"].values()], seal=True)
    emptied(copy)
    error = cli_error(capsys, "llm", "generate", str(copy), "--prompt", "hi", "--no-verify")
    assert "manifest.json: encodings.prefill_forward lists 0 inputs and 3 outputs, the program's method takes 5" \
        in error, error
