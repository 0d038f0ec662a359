"""Media references and port kinds.

Bytes never travel in a message: a node that has bytes saves them with
``save_artifact`` and passes the returned :class:`MediaRef` on. A reference is
plain JSON on the wire (``to_json`` / ``from_json``), so every queue backend
carries it unchanged.

Port kinds narrow what a port accepts. ``image``, ``audio`` and ``video`` take
references whose media type has that top-level type; ``text``, ``number`` and
``json`` take plain JSON values. :func:`check_port_value` is called by the
engine at the producer, so a wrong value fails where it was made, naming the
node, the port and both types.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, get_args

Kind: TypeAlias = Literal["image", "audio", "video", "text", "number", "json"]
KINDS: frozenset[str] = frozenset(get_args(Kind))
MEDIA_KINDS: frozenset[str] = frozenset({"image", "audio", "video"})

DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
# RFC 6838 section 4.2: type "/" subtype, restricted-name characters, optional parameters.
MEDIA_TYPE_RE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}"
    r"(\s*;\s*[A-Za-z0-9!#$&^_.+-]+=(\"[^\"]*\"|[A-Za-z0-9!#$&^_.+-]+))*$"
)


class MediaError(ValueError):
    """A reference, digest or media type is malformed."""


class PortKindError(TypeError):
    """A value does not fit the kind of the port it was emitted on."""

    def __init__(self, node: str, port: str, expected: str, got: str) -> None:
        super().__init__(f"node {node!r} port {port!r} expects {expected}, got {got}")
        self.node = node
        self.port = port
        self.expected = expected
        self.got = got


def is_digest(value: object) -> bool:
    """True when ``value`` is a well-formed ``sha256:<64 lowercase hex>`` digest."""
    return isinstance(value, str) and DIGEST_RE.fullmatch(value) is not None


def check_digest(value: object) -> str:
    """Return ``value`` if it is a well-formed digest; raise :class:`MediaError` otherwise."""
    if not is_digest(value):
        raise MediaError(f"malformed digest {value!r}: expected 'sha256:' and 64 lowercase hex")
    assert isinstance(value, str)
    return value


def check_media_type(value: object) -> str:
    """Return ``value`` if it is a syntactically valid media type; raise otherwise."""
    if not isinstance(value, str) or MEDIA_TYPE_RE.fullmatch(value) is None:
        raise MediaError(f"malformed media type {value!r}: expected 'type/subtype'")
    return value


@dataclass(frozen=True)
class MediaRef:
    """A typed, content-addressed reference to stored bytes.

    ``meta`` is free-form for users; mediaflow records capture facts there
    under fixed keys (``source``, ``seq``, ``pts``, ``captured_at``,
    ``duration``, ``width``, ``height``, ``rate``, ``channels``, ``codec``).
    """

    digest: str
    media_type: str
    size: int
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_digest(self.digest)
        check_media_type(self.media_type)
        if not isinstance(self.size, int) or isinstance(self.size, bool) or self.size < 0:
            raise MediaError(f"size must be a non-negative integer, got {self.size!r}")

    @property
    def kind(self) -> str:
        """The top-level media type: ``image``, ``audio``, ``video``, ``text`` ..."""
        return self.media_type.split("/", 1)[0].lower()

    @property
    def hex(self) -> str:
        """The 64 hex digits of the digest, without the algorithm prefix."""
        return self.digest.split(":", 1)[1]

    def with_meta(self, **meta: Any) -> MediaRef:
        """A copy whose meta has ``meta`` merged over the current one."""
        return MediaRef(self.digest, self.media_type, self.size, {**self.meta, **meta})

    def to_json(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "media_type": self.media_type,
            "size": self.size,
            "meta": dict(self.meta),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MediaRef:
        """Build a reference from its JSON form; raise :class:`MediaError` if malformed."""
        if not isinstance(data, Mapping):
            raise MediaError(f"a reference is a JSON object, got {type(data).__name__}")
        missing = {"digest", "media_type", "size"} - set(data)
        if missing:
            raise MediaError(f"reference lacks {', '.join(sorted(missing))}")
        meta = data.get("meta") or {}
        if not isinstance(meta, Mapping):
            raise MediaError("reference meta must be a JSON object")
        return cls(data["digest"], data["media_type"], data["size"], dict(meta))

    @staticmethod
    def looks_like(data: object) -> bool:
        """True for a JSON object shaped like a reference (used when decoding payloads)."""
        return isinstance(data, Mapping) and "digest" in data and "media_type" in data


def describe_value(value: object) -> str:
    """How a value reads in an error message: its media type, or its Python type."""
    if isinstance(value, MediaRef):
        return f"{value.media_type} reference"
    return type(value).__name__


def check_port_value(node: str, port: str, kind: str, value: object) -> object:
    """Validate ``value`` against a port of ``kind``; return it in canonical form.

    A reference in JSON form on a media port is turned into a :class:`MediaRef`.
    Raises :class:`PortKindError` naming the node, the port and both types.
    """
    if kind in MEDIA_KINDS:
        if isinstance(value, Mapping) and MediaRef.looks_like(value):
            try:
                value = MediaRef.from_json(value)
            except MediaError as exc:
                raise PortKindError(node, port, kind, f"a malformed reference ({exc})") from None
        if not isinstance(value, MediaRef):
            raise PortKindError(node, port, f"an {kind} reference", describe_value(value))
        if value.kind != kind:
            raise PortKindError(node, port, f"an {kind}/* reference", describe_value(value))
        return value
    if kind == "text":
        if not isinstance(value, str):
            raise PortKindError(node, port, "text (str)", describe_value(value))
        return value
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise PortKindError(node, port, "a number", describe_value(value))
        return value
    if kind == "json":
        if isinstance(value, MediaRef):
            raise PortKindError(node, port, "plain JSON", describe_value(value))
        return value
    raise PortKindError(node, port, f"one of {sorted(KINDS)}", f"unknown kind {kind!r}")


def encode_value(value: object) -> object:
    """The JSON form of a port value (references become objects tagged ``$ref``)."""
    if isinstance(value, MediaRef):
        return {"$ref": value.to_json()}
    return value


def present_value(data: object) -> object:
    """An encoded port value as readers outside the engine see it (the JSONL
    output, events, the API): a reference as its plain JSON object."""
    if isinstance(data, Mapping) and len(data) == 1 and "$ref" in data:
        return data["$ref"]
    return data


def decode_value(data: object) -> object:
    """Inverse of :func:`encode_value`."""
    if type(data) is dict:  # the usual case, without an ABC check
        if len(data) == 1 and "$ref" in data:
            return MediaRef.from_json(data["$ref"])
        return data
    if isinstance(data, Mapping) and len(data) == 1 and "$ref" in data:
        return MediaRef.from_json(data["$ref"])
    return data
