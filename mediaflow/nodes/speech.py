"""``use = "speech"``: offline speech recognition of an audio stream, utterance by utterance.

Port ``audio`` takes the ``audio/wav`` chunks of one stream (a microphone, a
file) in order; any rate and channel count is resampled to 16 kHz mono. Port
``text`` gets one string per finished utterance, ``partial`` the hypothesis
while it is spoken (only when it changes). Each is also published as a
``transcript`` event with ``port``, ``text``, ``final`` and ``start``/``end``: seconds on
the stream's clock (chunk ``pts``; counted samples when a chunk has none).

The recogniser (see :mod:`mediaflow.nodes.recognizer`) is pocketsphinx
(:mod:`mediaflow.nodes.pocketsphinx_engine`) with its bundled en-us model unless
``engine`` names another. It is stateful, not thread-safe and CPU-bound: the node
calls it from one thread of its own. And
pocketsphinx keeps the GIL inside each call, so by default (``isolate =
"process"``) the recogniser lives in a host process shared with other speech
nodes (:mod:`mediaflow.nodes.speech_host`) and the node's thread waits on a pipe,
without the GIL; the event loop and the encoders go on meanwhile. With
``isolate = "thread"`` it lives on the node's thread, and every other thread of
the process waits out each call: a few ms per 30 ms frame while an utterance is
spoken, and its whole decode when it ends (up to ~0.1 s with a grammar; with
the default language model about half the utterance's length or more:
``python -m bench.speech --redecode``).

Finals. Each final is what pocketsphinx gives for that utterance's audio
decoded whole by a fresh decoder (batch CMN, on every utterance, the first of a
stream included), not the streaming decoder's own, whose live CMN has no
estimate yet for a stream's first utterance and lags after. The audio decoded
runs from the endpointer's start to 0.2 s after its end (the recogniser's
``pad_after_s``; ``pad_before_s``, 0, before the start): the endpointer ends an
utterance about 0.2 s after the voice stops, short of the silence a recording
of the sentence ends with, and without it a near word flips ("warm" where the
recording says "cold"; measured, see :mod:`mediaflow.nodes.whole_utterance`).
The endpointer reports an end 0.27 s late anyway: the final comes no later. A
final's start and end are those of the audio decoded. The utterance's audio is
kept until it ends, at most ``max_utterance_s`` (30 s, ~1 MB, pads included): a
longer one is cut there, a final for each piece. Partials are the streaming
decoder's: a final may differ from the last partial before it.

Holes and disorder. A chunk that starts later than the previous one ended (a
dead-lettered chunk, a device hole) is preceded by that much silence, at most
1 s, so words are not glued across the hole and later times stay right. A
chunk that starts earlier finishes the utterance in progress and starts afresh.

Redelivery. The recogniser's state is this process's memory; the queue only
guarantees each chunk is delivered until acked, and a chunk is acked after its
results were emitted (``emit`` is durable when it returns). Hence:

* A chunk retried in this process after a failure *before* it reached the
  recogniser (unreadable, not a WAV) is fed as usual; if it is dead-lettered
  instead, the next chunk is a hole (above). A chunk that failed *after* it was
  fed (an ``emit`` failed) is not fed again, which would duplicate audio
  inside the utterance: the node remembers the highest ``seq`` it fed and only
  emits the results still waiting, each once. If the recogniser itself raised,
  it is reset (the utterance in progress is lost) and the retry feeds the
  chunk to the fresh one.
* After a crash, the new process's recogniser starts at the first redelivered
  chunk (the first one not acked). An utterance whose text ``emit`` returned is
  never lost; one is lost only if the process died between the recogniser
  finishing it and that ``emit`` returning. The utterance in progress restarts
  at the redelivered chunk: its audio in acked chunks went with the dead
  process, so its first words are lost from it, and the rest may decode as a
  fragment, as the nearest grammar sentence, or as nothing. If the crash came
  after a chunk's results were emitted but before its ack, that chunk comes
  again. Its utterance ended inside it only after ~0.27 s of non-speech (the
  endpointer's 0.3 s window, 90 %), so it holds at most its length minus that
  of the utterance's speech, and a fresh endpointer needs ~0.27 s of speech to
  start one: chunks shorter than ~0.5 s (the microphone's default is 100 ms)
  cannot emit that utterance again; longer ones may emit its tail as a second,
  shorter utterance. A partial emitted before a crash may never see its final.
* A clean stop loses the utterance in progress the same way (the next run
  starts after the last acked chunk); the node logs what it had heard (the
  whole decode of its audio so far).
* The audio of the utterance in progress lives only in the recogniser (never in
  the store): a reset or a crash loses it with the utterance, as above; the
  final of an utterance that restarted at a redelivered chunk is the whole
  decode of the audio heard since, which is what the second bullet describes.

The engine ends no utterance when the input stream ends: the last one is
finished only by the silence after it. Run one speech node per stream in one
process: two workers sharing a stream would each hear only part of it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from mediaflow.media import MediaError, MediaRef
from mediaflow.node import Context, Node
from mediaflow.nodes.recognizer import Recognizer, RecognizerError
from mediaflow.nodes.speech_audio import AudioFormatError, is_wav_media_type
from mediaflow.nodes.speech_host import HostedRecognizer, HostPool
from mediaflow.nodes.speech_options import (
    ISOLATIONS,
    POCKETSPHINX,
    WHISPER,
    SphinxOptions,
    check_options,
    sphinx_options,
    whisper_settings,
)
from mediaflow.nodes.speech_recipe import EngineRecipe, RecognizerRecipe
from mediaflow.nodes.speech_stream import MAX_HOLE_FILL_S, SpeechStream, Transcript
from mediaflow.nodes.whisper_engine import WhisperSettings
from mediaflow.store import ArtifactNotFound
from mediaflow.timeline.events import TimelineEvent

log = logging.getLogger("mediaflow.nodes.speech")

__all__ = ["MAX_HOLE_FILL_S", "SpeechInputError", "SpeechNode", "SpeechStream", "Transcript"]

T = TypeVar("T")


class SpeechInputError(ValueError):
    """A chunk the speech node cannot hear; names the node and the chunk.

    ``chunk_seq`` is the chunk's own ``seq`` (its meta: the source's numbering, what
    a user sees); without one, the queue item's ``seq`` is named instead.
    """

    def __init__(
        self, node: str, reason: str, *, chunk_seq: object = None, item_seq: int | None = None
    ) -> None:
        if isinstance(chunk_seq, int):
            where = f"chunk seq {chunk_seq}"
        elif item_seq is not None:
            where = f"item seq {item_seq}"
        else:
            where = "a chunk"
        super().__init__(f"speech node {node!r}: {where} {reason}")
        self.node = node
        self.chunk_seq = chunk_seq if isinstance(chunk_seq, int) else None
        self.item_seq = item_seq


class SpeechNode(Node):
    """Speech to text (see the module doc).

    Options (pocketsphinx): ``grammar`` (a JSGF file, relative to the flow file),
    ``keyphrase`` with ``kws_threshold`` (default 1e-20), or ``lm`` (an n-gram
    model) — at most one; none means the bundled en-us language model. ``model``
    (acoustic model directory) and ``dictionary`` for other languages;
    ``decoder_options`` for any other pocketsphinx setting. ``vad_mode``: 0-3 or
    loose / medium_loose / medium_strict / strict. ``partials`` (true): emit
    hypotheses while speaking. ``redecode`` (true): each final is the utterance
    decoded whole, as a fresh pocketsphinx decoder would (false: the streaming
    decoder's own, cheaper and less accurate); ``max_utterance_s`` (30): an
    utterance is cut at this length, a new one starts with the speech after it;
    ``pad_before_s`` (0) and ``pad_after_s`` (0.2): stream audio decoded with
    each final before and after the endpointer's span (see "Finals" above).
    Whisper (``engine = "whisper"``, :mod:`mediaflow.nodes.whisper_engine`):
    ``model`` (``"tiny.en"``, a directory, or a cached name), ``download``
    (false), ``language``, ``beam_size`` (5), ``compute_type`` ("int8"),
    ``threads`` (0: automatic), ``partials``, ``partial_every_s`` (1.5),
    ``vad_threshold`` (0.5), ``pad_s`` (0.4), ``max_utterance_s`` (20).
    Or ``engine = "package.module:Class"`` with ``engine_options`` (keyword
    arguments of the class) for another recogniser. ``isolate``: ``"process"``
    (pocketsphinx's default) builds the recogniser in a host process shared by the
    speech nodes (:mod:`mediaflow.nodes.speech_host`: off the GIL), ``"thread"``
    (an ``engine``'s default) on the node's own thread in this process.
    Raises ``ValueError`` for a contradictory set of options.

    The node keeps the chosen engine's settings: ``sphinx``
    (:class:`~mediaflow.nodes.speech_options.SphinxOptions`), ``whisper``
    (:class:`~mediaflow.nodes.whisper_engine.WhisperSettings`) or ``engine`` with
    ``engine_options``; the others are None.
    """

    inputs: ClassVar[Mapping[str, str]] = {"audio": "audio"}
    outputs: ClassVar[Mapping[str, str]] = {"text": "text", "partial": "text"}

    def __init__(
        self,
        grammar: str | None = None,
        keyphrase: str | None = None,
        kws_threshold: float | None = None,
        model: str | None = None,
        dictionary: str | None = None,
        lm: str | None = None,
        vad_mode: int | str = "loose",
        partials: bool = True,
        engine: str | None = None,
        engine_options: Mapping[str, Any] | None = None,
        decoder_options: Mapping[str, Any] | None = None,
        redecode: bool | None = None,
        max_utterance_s: float | None = None,
        isolate: str | None = None,
        pad_before_s: float | None = None,
        pad_after_s: float | None = None,
        language: str | None = None,
        beam_size: int | None = None,
        compute_type: str | None = None,
        threads: int | None = None,
        download: bool | None = None,
        partial_every_s: float | None = None,
        vad_threshold: float | None = None,
        pad_s: float | None = None,
    ) -> None:
        if isolate is not None and isolate not in ISOLATIONS:
            raise ValueError(f"speech: isolate must be one of {ISOLATIONS}; got {isolate!r}")
        searches: dict[str, Any] = {"grammar": grammar, "keyphrase": keyphrase, "lm": lm}
        sphinx: dict[str, Any] = {
            "model": model,
            "dictionary": dictionary,
            "decoder_options": decoder_options,
            "redecode": redecode,
            "max_utterance_s": max_utterance_s,
            "pad_before_s": pad_before_s,
            "pad_after_s": pad_after_s,
        }
        whisper: dict[str, Any] = {
            "language": language,
            "beam_size": beam_size,
            "compute_type": compute_type,
            "threads": threads,
            "download": download,
            "partial_every_s": partial_every_s,
            "vad_threshold": vad_threshold,
            "pad_s": pad_s,
        }
        check_options(
            searches,
            sphinx,
            kws_threshold=kws_threshold,
            engine=engine,
            engine_options=engine_options,
            whisper_settings=whisper,
        )
        self.engine = None if engine == POCKETSPHINX else engine
        self.engine_options = dict(engine_options or {})
        self.partials = bool(partials)
        # Checked whatever the engine (a bad vad_mode or max_utterance_s is refused
        # with any of them); used with pocketsphinx only.
        checked = sphinx_options(
            **searches,
            **sphinx,
            kws_threshold=kws_threshold,
            vad_mode=vad_mode,
            partials=self.partials,
        )
        self.sphinx: SphinxOptions | None = checked if self.engine is None else None
        self.whisper: WhisperSettings | None = (
            whisper_settings(model, max_utterance_s, partials=self.partials, **whisper)
            if self.engine == WHISPER
            else None
        )
        self.isolate = isolate or ("thread" if self.engine not in (None, WHISPER) else "process")
        self._executor: ThreadPoolExecutor | None = None
        self._stream: SpeechStream | None = None
        self._node = "speech"
        self._fed_seq: int | None = None  # highest item seq fed in this process
        self._outbox: deque[Transcript] = deque()  # results not yet emitted
        self._wall_offset: float | None = None  # captured_at - pts of the newest chunk
        self._source: str | None = None  # the microphone the chunks come from

    async def setup(self, ctx: Context) -> None:
        """Start the node's thread and build the recogniser from there (blocks that
        thread ~0.1-0.4 s while the model loads, and starts a host process first when
        none has room). Raises :class:`RecognizerError` naming the node."""
        self._node = ctx.node
        # The session's hosts, shared by its speech nodes (none started until needed).
        pool = ctx.more.shared(HostPool.for_settings)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"speech-{ctx.node}")
        try:
            recognizer = await self._call(self._build, ctx.more.flow_dir, pool)
        except RecognizerError as exc:
            # The same class (ModelNotFound is also a configuration error: exit 2).
            raise type(exc)(f"speech node {ctx.node!r}: {exc}") from exc
        self._stream = SpeechStream(recognizer, partials=self.partials)

    def _build(self, flow_dir: Path, pool: HostPool) -> Recognizer:
        recipe = self._recipe(flow_dir, pool)
        if self.isolate == "process":
            return HostedRecognizer(recipe, pool)
        return recipe.build()

    def _recipe(self, flow_dir: Path, pool: HostPool) -> RecognizerRecipe:
        if self.sphinx is not None:
            return self.sphinx.recipe(flow_dir)
        if self.whisper is not None:
            threads = self.whisper.threads or pool.threads_per_process  # 0: automatic
            return replace(self.whisper, flow_dir=flow_dir, threads=threads)
        assert self.engine is not None  # neither pocketsphinx nor Whisper: another engine
        return EngineRecipe(self.engine, self.engine_options, flow_dir)

    async def run(self, ctx: Context) -> None:
        """Feed one chunk; emit what it completed. Raises :class:`SpeechInputError`
        for a chunk that is not a readable WAV (the engine retries, then dead-letters)."""
        stream = self._require_stream()
        seq = ctx.item.seq if ctx.item is not None else None
        if seq is None or self._fed_seq is None or seq > self._fed_seq:
            if ctx.redelivery and self._fed_seq is None:
                ctx.log.info("item seq %s redelivered after a restart: recognition restarts", seq)
            ref = ctx.inputs["audio"]
            wav = await self._read(ctx, ref, seq)
            pts = ref.meta.get("pts")
            self._follow_wall_clock(ref)
            try:
                transcripts = await self._call(
                    stream.push, wav, float(pts) if isinstance(pts, int | float) else None
                )
            except AudioFormatError as exc:
                raise self._refuse(ref, seq, f"is unreadable: {exc}") from None
            self._fed_seq = seq
            self._outbox.extend(transcripts)
        await self._deliver(ctx)

    def _follow_wall_clock(self, ref: MediaRef) -> None:
        """Where the stream's clock (the chunks' ``pts``) is on the wall clock, and which
        microphone it is: a final transcript is noted on the timeline there."""
        pts, captured_at = ref.meta.get("pts"), ref.meta.get("captured_at")
        if isinstance(pts, int | float) and isinstance(captured_at, int | float):
            self._wall_offset = float(captured_at) - float(pts)
        source = ref.meta.get("source")
        if isinstance(source, str):
            self._source = source

    def _note_final(self, ctx: Context, item: Transcript) -> None:
        if self._wall_offset is None or not item.text:
            return  # chunks without capture times: nowhere on the timeline to put it
        offset = self._wall_offset
        event = TimelineEvent(
            "transcript",
            self._source or ctx.node,
            item.start + offset,
            max(item.end, item.start) + offset,
            score=item.confidence or 0.0,
            text=item.text,
        )
        ctx.more.note_event(event, publish=False)  # published as a transcript already

    async def _read(self, ctx: Context, ref: object, seq: int | None) -> bytes:
        if not isinstance(ref, MediaRef):
            raise self._refuse(None, seq, f"is a {type(ref).__name__}, not a reference")
        if not is_wav_media_type(ref.media_type):
            raise self._refuse(ref, seq, f"is {ref.media_type}, expected audio/wav")
        try:
            return await ctx.read_artifact(ref)
        except (ArtifactNotFound, MediaError, OSError) as exc:
            raise self._refuse(ref, seq, f"cannot be read: {exc!r}") from None

    def _refuse(self, ref: MediaRef | None, seq: int | None, reason: str) -> SpeechInputError:
        chunk_seq = ref.meta.get("seq") if ref is not None else None
        return SpeechInputError(self._node, reason, chunk_seq=chunk_seq, item_seq=seq)

    async def _deliver(self, ctx: Context) -> None:
        # Each result leaves the outbox only once emitted: a retry emits the rest.
        while self._outbox:
            item = self._outbox[0]
            port = "text" if item.final else "partial"
            await ctx.emit(port, item.text)
            # ``port`` lets a reader (the wall) put the event where the value went.
            confidence = {} if item.confidence is None else {"confidence": item.confidence}
            ctx.more.publish(
                "transcript",
                port=port,
                text=item.text,
                start=item.start,
                end=item.end,
                final=item.final,
                **confidence,
            )
            if item.final:
                self._note_final(ctx, item)
            self._outbox.popleft()

    async def teardown(self) -> None:
        """Finish on the node's thread, log an utterance that was cut off, stop the thread."""
        executor, stream = self._executor, self._stream
        self._executor = self._stream = None
        if executor is None:
            return
        loop = asyncio.get_running_loop()
        try:
            if stream is not None:
                lost = await loop.run_in_executor(executor, stream.flush)
                for item in lost:
                    log.warning("speech node %r stopped mid-utterance: %r", self._node, item.text)
        finally:
            if stream is not None and isinstance(stream.recognizer, HostedRecognizer):
                await loop.run_in_executor(executor, stream.recognizer.close)
            executor.shutdown(wait=False)

    def _require_stream(self) -> SpeechStream:
        if self._stream is None:
            raise RuntimeError(f"speech node {self._node!r} runs before setup")
        return self._stream

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._executor is None:
            raise RuntimeError(f"speech node {self._node!r} runs before setup")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)
