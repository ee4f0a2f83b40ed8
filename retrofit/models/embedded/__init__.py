"""The embedded hosts: small TabPFN-v3 models shipped with the package.

The regressor is always shipped; a classifier host is shipped once it clears
its bar (``hostgen.train_classifier``), as a file of the same kind beside it,
so ``model_path="embedded"`` resolves per estimator kind from the files
present (:func:`embedded_model_path`).

Real TabPFN weights need a licence acceptance and a download; this checkpoint
works offline. It has the real ``TabPFNV3`` architecture, was pretrained by this
project on a synthetic prior (``hostgen.pretrain``; see
``MODEL_CARD.md``) and loads through tabpfn's normal loader::

    from retrofit.models.embedded import embedded_model_path
    tabpfn.TabPFNRegressor(model_path=embedded_model_path(),
                           inference_precision=torch.float32)

The file's SHA-256 is committed next to it (``<file>.sha256``) and checked by
:func:`embedded_model_path`; ``EMBEDDED_SHA256`` (read from that file on access)
is the expected digest.
"""

from __future__ import annotations

from pathlib import Path

from retrofit.errors import EmbeddedCheckpointError
from retrofit.files import sha256_of_checkpoint
from retrofit.models.aliases import alias_list
from retrofit.models.weights import Which

__all__ = [
    "EMBEDDED_FILENAME",
    "EMBEDDED_FILENAMES",
    "EMBEDDED_SHA256",
    "embedded_is_shipped",
    "embedded_model_path",
    "verify_checkpoint",
]

EMBEDDED_FILENAME = "tabpfn_v3_embedded_regressor.safetensors"
"""File name of the shipped checkpoint (tabpfn reads ``v3`` from it)."""

EMBEDDED_FILENAMES: dict[Which, str] = {
    "regressor": EMBEDDED_FILENAME,
    "classifier": "tabpfn_v3_embedded_classifier.safetensors",
}
"""File name of each kind's embedded host; a kind is shipped when its digest file is."""

_HERE = Path(__file__).resolve().parent


def _read_expected_sha256(sha_file: Path) -> str:
    try:
        digest = sha_file.read_text().split()[0].strip().lower()
    except (OSError, IndexError) as exc:
        raise EmbeddedCheckpointError(
            f"cannot read the checkpoint digest file {sha_file}: {exc}"
        ) from exc
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise EmbeddedCheckpointError(f"{sha_file} does not hold a SHA-256 hex digest")
    return digest


def verify_checkpoint(path: str | Path, expected_sha256: str) -> Path:
    """Check a checkpoint file against a SHA-256 digest.

    Args:
        path: The checkpoint file.
        expected_sha256: Hex digest it must have.

    Returns:
        The path, resolved.

    Raises:
        EmbeddedCheckpointError: If the file is missing or its digest differs.
    """
    path = Path(path).resolve()
    if not path.is_file():
        raise EmbeddedCheckpointError(
            f"embedded checkpoint {path} is missing; reinstall tabpfn-retrofit or "
            "regenerate it with `python -m hostgen.pretrain` (see MODEL_CARD.md)"
        )
    actual = sha256_of_checkpoint(path)
    if actual != expected_sha256.lower():
        raise EmbeddedCheckpointError(
            f"embedded checkpoint {path} is corrupted or was replaced: SHA-256 {actual} "
            f"!= expected {expected_sha256.lower()}"
        )
    return path


def __getattr__(name: str) -> str:
    # EMBEDDED_SHA256 is read lazily, so the training code in this package imports
    # even where the checkpoint has not been generated yet.
    if name == "EMBEDDED_SHA256":
        return _read_expected_sha256(_HERE / (EMBEDDED_FILENAME + ".sha256"))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def embedded_is_shipped(which: Which = "regressor") -> bool:
    """Whether this installation ships an embedded host of kind ``which`` (its digest file)."""
    return (_HERE / (EMBEDDED_FILENAMES[which] + ".sha256")).is_file()


def embedded_model_path(which: Which = "regressor") -> Path:
    """Path of the shipped checkpoint of kind ``which``, after checking its SHA-256.

    Args:
        which: ``"regressor"`` (always shipped) or ``"classifier"``.

    Returns:
        Absolute path of ``tabpfn_v3_embedded_<which>.safetensors``.

    Raises:
        EmbeddedCheckpointError: (a ``ValueError``) if no host of that kind is
            shipped, or the file is missing or does not match its digest.
    """
    name = EMBEDDED_FILENAMES[which]
    if which != "regressor" and not embedded_is_shipped(which):
        raise EmbeddedCheckpointError(
            f"model_path='embedded': this installation ships no embedded {which} host; give a "
            f"{which} checkpoint file, {alias_list(auto=True)} (whose weights tabpfn "
            "downloads into its model cache), or a tabpfn.ModelSpecs"
        )
    expected = _read_expected_sha256(_HERE / (name + ".sha256"))
    return verify_checkpoint(_HERE / name, expected)
