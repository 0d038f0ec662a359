"""Real human speech for the speech node's tests: pocketsphinx's own test recordings.

pocketsphinx's source distribution carries them under ``test/data`` (16 kHz
mono s16): ``goforward.raw`` ("go forward ten meters", ``goforward.gram``),
``cards/00[1-5].wav`` (``cards.gram``, ``cards.transcription``) and
``librivox/*.wav`` (read speech, a ``.txt`` transcript each; the default LM).
:func:`load_corpus` gets that sdist with ``pip download`` for the *installed*
pocketsphinx version and extracts only ``test/data`` into a cache directory:
``$MEDIAFLOW_TEST_CACHE`` if set, else ``<repo>/.cache`` (kept out of git).
Nothing of it is committed. A download that fails raises
:class:`CorpusUnavailable`: a missing corpus is a failure, never a skip.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
RATE = 16000


class CorpusUnavailable(RuntimeError):
    """The pocketsphinx test recordings could not be obtained."""


@dataclass(frozen=True)
class Recording:
    """One recording: its name, its 16 kHz mono s16 PCM, what was said."""

    name: str
    pcm: bytes
    reference: str


@dataclass(frozen=True)
class Corpus:
    root: Path  # test/data of the sdist
    cards: tuple[Recording, ...]
    goforward: Recording
    librivox: tuple[Recording, ...]

    @property
    def cards_grammar(self) -> str:
        return (self.root / "cards" / "cards.gram").read_text()

    @property
    def goforward_grammar(self) -> str:
        return (self.root / "goforward.gram").read_text()


def cache_dir() -> Path:
    return Path(os.environ.get("MEDIAFLOW_TEST_CACHE") or REPO / ".cache")


def corpus_root(version: str | None = None) -> Path:
    """``test/data`` of the pocketsphinx sdist of ``version`` (the installed one by
    default), downloaded and extracted once into :func:`cache_dir`. Blocks (~5 s
    the first time). Raises :class:`CorpusUnavailable` naming what failed."""
    version = version or importlib.metadata.version("pocketsphinx")
    target = cache_dir() / f"pocketsphinx-{version}-test-data"
    if (target / "cards" / "cards.gram").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        command = [
            sys.executable, "-m", "pip", "download", "--no-binary", "pocketsphinx",
            "--no-deps", f"pocketsphinx=={version}", "-d", tmp,
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        sdists = list(Path(tmp).glob("pocketsphinx-*.tar.gz"))
        if done.returncode != 0 or not sdists:
            raise CorpusUnavailable(
                f"`{' '.join(command)}` failed (exit {done.returncode}): "
                f"{done.stderr.strip()[-1000:]}"
            )
        extracted = Path(tmp) / "data"
        prefix = f"pocketsphinx-{version}/test/data/"
        with tarfile.open(sdists[0]) as sdist:
            members = [m for m in sdist.getmembers() if m.name.startswith(prefix)]
            if not members:
                raise CorpusUnavailable(f"{sdists[0].name} has no {prefix}")
            for member in members:
                member.name = member.name[len(prefix) :]
            _extract_files(sdist, [m for m in members if m.name], extracted, sdists[0].name)
        if target.exists():  # a concurrent run got there first
            shutil.rmtree(extracted)
        else:
            extracted.rename(target)
    return target


def _extract_files(
    sdist: tarfile.TarFile, members: list[tarfile.TarInfo], into: Path, label: str
) -> None:
    """Write the regular files among ``members`` under ``into``; links, devices and
    names that would leave ``into`` are refused. By hand rather than with
    ``extractall(filter="data")``: that filter arrived in Python 3.11.4, and Debian
    12's python3 is 3.11.2."""
    root = into.resolve()
    for member in members:
        if member.isdir():
            continue
        path = (root / member.name).resolve()
        if not member.isfile() or not path.is_relative_to(root):
            raise CorpusUnavailable(f"refusing {member.name!r} in {label}")
        source = sdist.extractfile(member)
        if source is None:
            raise CorpusUnavailable(f"cannot read {member.name!r} in {label}")
        path.parent.mkdir(parents=True, exist_ok=True)
        with source, path.open("wb") as out:
            shutil.copyfileobj(source, out)


def read_pcm(path: Path) -> bytes:
    """A 16 kHz mono s16 WAV's samples (or a ``.raw`` file's bytes)."""
    if path.suffix == ".raw":
        return path.read_bytes()
    with wave.open(str(path), "rb") as wav:
        if (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) != (RATE, 1, 2):
            raise CorpusUnavailable(f"{path} is not 16 kHz mono s16")
        return wav.readframes(wav.getnframes())


def load_corpus() -> Corpus:
    """The recordings, with their reference transcripts."""
    root = corpus_root()
    cards_said = {}
    for line in (root / "cards" / "cards.transcription").read_text().splitlines():
        found = re.fullmatch(r"<s>(.*)</s>\s*\((\w+)\)", line.strip())
        if found:
            cards_said[found[2]] = found[1].split()
    cards = tuple(
        Recording(name, read_pcm(root / "cards" / f"{name}.wav"), " ".join(words))
        for name, words in sorted(cards_said.items())
    )
    librivox = tuple(
        Recording(wav.stem, read_pcm(wav), " ".join(wav.with_suffix(".txt").read_text().split()))
        for wav in sorted((root / "librivox").glob("*.wav"))
    )
    goforward = Recording("goforward", read_pcm(root / "goforward.raw"), "go forward ten meters")
    if len(cards) != 5 or len(librivox) != 5:
        raise CorpusUnavailable(f"{root}: expected 5 cards and 5 librivox recordings")
    return Corpus(root, cards, goforward, librivox)


def gap(seconds: float, *, sigma: float = 30.0, seed: int = 0) -> bytes:
    """Quiet room noise (Gaussian, ``sigma`` in sample units, seeded): what sits
    between utterances in a real stream. Digital zeros are not what a microphone
    gives, and much louder noise (sigma 100) keeps the endpointer in speech."""
    noise = np.random.default_rng(seed).normal(0.0, sigma, round(seconds * RATE))
    return np.clip(np.round(noise), -32768, 32767).astype("<i2").tobytes()


def join(recordings: tuple[Recording, ...] | list[Recording], gap_s: float = 1.0) -> bytes:
    """One stream: the recordings one after another, with :func:`gap` before, between
    and after them (each gap its own noise). The first recording is heard by a
    fresh decoder, the others by one that has heard the ones before."""
    parts = [gap(gap_s, seed=0)]
    for index, recording in enumerate(recordings, start=1):
        parts += [recording.pcm, gap(gap_s, seed=index)]
    return b"".join(parts)
