"""Word error rate: word-level Levenshtein distance over reference words. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence


def word_errors(reference: Sequence[str], hypothesis: Sequence[str]) -> int:
    """Fewest substitutions, deletions and insertions turning ``hypothesis`` into
    ``reference`` (lists of words)."""
    previous = list(range(len(hypothesis) + 1))
    for i, ref_word in enumerate(reference, start=1):
        current = [i]
        for j, hyp_word in enumerate(hypothesis, start=1):
            current.append(
                min(
                    previous[j] + 1,  # a reference word deleted
                    current[j - 1] + 1,  # a word inserted
                    previous[j - 1] + (ref_word != hyp_word),  # kept or substituted
                )
            )
        previous = current
    return previous[-1]


def wer(pairs: Iterable[tuple[str, str]]) -> float:
    """Corpus WER of (reference, hypothesis) texts: total word errors over total
    reference words (0.0 for no reference words and no hypothesis words)."""
    errors = words = 0
    for reference, hypothesis in pairs:
        ref, hyp = reference.split(), hypothesis.split()
        errors += word_errors(ref, hyp)
        words += len(ref)
    if words == 0:
        return 0.0 if errors == 0 else float("inf")
    return errors / words


_SPOKEN_FORMS = {"mr": "mister", "mrs": "missus", "dr": "doctor", "st": "saint"}


def normalise(text: str) -> str:
    """``text`` as words to score: lower case, hyphens as spaces, punctuation
    dropped, the abbreviations Whisper writes ("Mr.") as the words read ("mister").
    Digits stay digits: "ten" and "10" differ. Pure."""
    words = re.sub(r"[^a-z0-9' ]", " ", text.lower().replace("-", " ")).split()
    return " ".join(_SPOKEN_FORMS.get(word, word) for word in words)
