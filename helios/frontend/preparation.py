"""Frontend preparation (host side): a validated OpenAI request becomes a runtime request.

Owns: `Preparer`, which renders the chat template, tokenizes, checks the prompt against the served
context, fills sampling from request values, then core defaults, then the runtime's defaults,
chooses the output limit, and builds the request's `OutputFilter` (decoding and stops) and
`OutputPipeline` (reasoning and tool parsing, starting in the prompt's reasoning state). Runs on a
frontend worker thread: it is CPU work.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from helios.frontend.bootstrap import Bootstrap
from helios.frontend.errors import InvalidFieldValue, OutsideCapacity, PromptTooLong, UnknownModel
from helios.frontend.openai_request import ChatRequest, CompletionRequest, SamplingOptions
from helios.frontend.pipeline import OutputPipeline
from helios.frontend.request_images import RequestImages
from helios.frontend.stops import OutputFilter, StopSpec
from helios.frontend.structured import (
    GrammarCompiler,
    GrammarUnavailable,
    added_token_ids,
    build_grammar,
    prompt_closed_reasoning,
)
from helios.frontend.syntaxes.recipient import FrameState, initial_frame_state
from helios.proto import contract_pb2
from helios.runtime.images import RequestImage
from helios.runtime.interface import PreparedRequest
from helios.runtime.request import GenerationRequest, SamplingParams

_SAMPLING_FIELDS = (
    "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty", "frequency_penalty",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class PreparedChat:
    runtime_request: PreparedRequest
    pipeline: OutputPipeline  # this response's parser state
    prompt_token_ids: tuple[int, ...]
    prompt: str  # the rendered prompt


@dataclass(frozen=True, slots=True)
class PreparedCompletion:
    runtime_request: PreparedRequest
    prompt_token_ids: tuple[int, ...]
    echo: str | None = None  # the prompt's text, returned before the completion (echo); None: not echoed
    scores_only: bool = False  # max_tokens 0: the token the prompt's last round samples is not returned


class Preparer:
    """Turns requests into `PreparedRequest`s for one served model."""

    def __init__(
        self,
        bootstrap: Bootstrap,
        *,
        served_id: str,
        aliases: Sequence[str] = (),
        context_tokens: int,
        sampled_tokens: int | None = None,
        mask_words: int | None = None,
        prompt_score_width: int = 0,
        vision: contract_pb2.VisionContract | None = None,
        allow_remote_images: bool = False,
    ) -> None:
        self.bootstrap = bootstrap
        # the core's image preparation and layout (docs/vision.md); a text-only core refuses image parts
        self.images = RequestImages(bootstrap.frontend, vision, allow_remote=allow_remote_images)
        # K of the core's scored prefill (alternatives a prompt token); 0: it has no SCORED_PREFILL graphs
        self.prompt_score_width = prompt_score_width
        # the core's vocabulary geometry: grammar masks are rows of `mask_words` int32 words
        self.sampled_tokens = sampled_tokens or bootstrap.vocab_size
        self.mask_words = mask_words or (self.sampled_tokens + 31) // 32
        self._grammars: GrammarCompiler | None = None  # built at the first constrained request
        self._grammars_lock = threading.Lock()  # frontend workers prepare concurrently
        self.served_id = served_id
        self.aliases = tuple(aliases)
        self.context_tokens = context_tokens
        self._markers = bootstrap.delimiter_markers()

    def check_model(self, model: str | None) -> str:
        """The served id a request addresses (a missing model means the served one)."""
        if model is None or model == self.served_id or model in self.aliases:
            return self.served_id
        raise UnknownModel("model", f"{model!r} is not served here; this server serves {self.served_id!r}")

    def prepare_chat(self, request: ChatRequest, request_id: str) -> PreparedChat:
        self.check_model(request.model)
        prompt = self.bootstrap.render_chat(
            request.messages,
            tools=request.tools or None,
            add_generation_prompt=True,
            **request.template_kwargs,
        )
        prepared_images = self.images.prepare(request.images)
        if prepared_images and request.prompt_logprobs is not None:
            raise InvalidFieldValue("prompt_logprobs", "prompt scores of a prompt with images are not served")
        prompt_ids, images = self.images.lay_out(self.bootstrap.encode(prompt), prepared_images, "messages")
        reasoning_open = self.bootstrap.prompt_opens_reasoning(prompt)
        frame = initial_frame_state(prompt, self.bootstrap.frontend)
        grammar = self._grammar(request, prompt, reasoning_open, frame) if request.structured is not None else None
        runtime_request = self._runtime_request(
            request_id,
            prompt_ids,
            param="messages",
            max_tokens=request.max_tokens,
            sampling=request.sampling,
            stops=request.stops,
            ignore_eos=request.ignore_eos,
            observe_tokens=request.return_token_ids,
            observe_timestamps=request.return_token_timestamps,
            grammar=grammar,
            prompt_logprobs=self._prompt_logprobs("prompt_logprobs", request.prompt_logprobs),
            speculation=request.speculation,
            images=images,
        )
        pipeline = OutputPipeline(
            self.bootstrap.frontend,
            tools=request.tools,
            parse_tools=request.parse_tools,
            token_only=frozenset(self._markers.values()),
            reasoning_open=reasoning_open,
            frame=frame,
            structured=request.structured is not None,
        )
        return PreparedChat(runtime_request, pipeline, prompt_ids, prompt)

    def _grammar(self, request: ChatRequest, prompt: str, reasoning_open: bool, frame: FrameState) -> object:
        """The request's grammar state: its Lark grammar over the model's envelope, compiled."""
        structured = request.structured
        assert structured is not None
        param = "tool_choice" if structured.forces_call else "response_format"
        bootstrap = self.bootstrap
        with self._grammars_lock:
            if self._grammars is None:
                self._grammars = GrammarCompiler(bootstrap.tokenizer_json, eos_ids=bootstrap.eos_token_ids,
                                                 vocab_size=self.sampled_tokens, mask_words=self.mask_words)  # fmt: skip
        added = added_token_ids(bootstrap.tokenizer)
        try:
            grammar = build_grammar(bootstrap.frontend, structured, token_id=added.get,
                                    eos_ids=bootstrap.eos_token_ids, reasoning_open=reasoning_open,
                                    reasoning_closed=prompt_closed_reasoning(prompt, bootstrap.frontend),
                                    frame=frame)  # fmt: skip
            return self._grammars.state(grammar)
        except GrammarUnavailable as error:
            raise InvalidFieldValue(param, str(error)) from None

    def prepare_completion(self, request: CompletionRequest, request_id: str) -> PreparedCompletion:
        self.check_model(request.model)
        if isinstance(request.prompt, str):
            prompt_ids = tuple(self.bootstrap.encode(request.prompt))
        else:
            prompt_ids = request.prompt
            vocab = self.bootstrap.vocab_size
            for index, token in enumerate(prompt_ids):
                if token >= vocab:
                    raise InvalidFieldValue(f"prompt.{index}", f"token id {token} is outside the vocabulary [0, {vocab})")
        prompt_ids, _ = self.images.lay_out(prompt_ids, [], "prompt")  # a completion prompt carries no image
        scores_param = "logprobs" if request.echo_logprobs else "prompt_logprobs"
        runtime_request = self._runtime_request(
            request_id,
            prompt_ids,
            param="prompt",
            # NOTE: every prompt's last round samples a token; with max_tokens 0 (echo) it is not returned
            max_tokens=1 if request.scores_only else request.max_tokens,
            sampling=request.sampling,
            stops=request.stops,
            ignore_eos=request.ignore_eos,
            observe_tokens=False,
            observe_timestamps=False,
            markers={},
            prompt_logprobs=self._prompt_logprobs(scores_param, request.prompt_logprobs),
            speculation=request.speculation,
        )
        echo = None
        if request.echo:
            echo = request.prompt if isinstance(request.prompt, str) else self.bootstrap.decode(list(prompt_ids))
        return PreparedCompletion(runtime_request, prompt_ids, echo=echo, scores_only=request.scores_only)

    def token_text(self, token_id: int) -> str:
        """The text of one token, as prompt scores name it."""
        return self.bootstrap.decode([token_id])

    def _prompt_logprobs(self, param: str, top: int | None) -> int | None:
        """The prompt scores a request asks for, checked against the core's scored prefill."""
        if top is None:
            return None
        if not self.prompt_score_width:
            raise InvalidFieldValue(param, "prompt scores need the core's SCORED_PREFILL graphs, which this core "
                                    "lacks (it was prepared before scored prefill): prepare it again to serve them")
        if top > self.prompt_score_width:
            raise InvalidFieldValue(param, f"{top} exceeds the {self.prompt_score_width} alternatives a prompt "
                                    "token this core's scored prefill gives")
        return top

    def _runtime_request(
        self,
        request_id: str,
        prompt_ids: tuple[int, ...],
        *,
        param: str,
        max_tokens: int | None,
        sampling: SamplingOptions,
        stops: StopSpec,
        ignore_eos: bool,
        observe_tokens: bool,
        observe_timestamps: bool,
        markers: dict[int, str] | None = None,
        grammar: object | None = None,
        prompt_logprobs: int | None = None,
        speculation: bool = True,
        images: tuple[RequestImage, ...] = (),
    ) -> PreparedRequest:
        if not prompt_ids:
            raise PromptTooLong(param, "the prompt encodes to no tokens")
        room = self.context_tokens - len(prompt_ids)
        if room < 1:
            raise PromptTooLong(
                param,
                f"the prompt is {len(prompt_ids)} tokens; the served context holds {self.context_tokens}",
            )
        if max_tokens is None:
            defaults = self.bootstrap.defaults
            max_tokens = (
                min(defaults.max_output_tokens, room) if defaults.HasField("max_output_tokens") else room
            )
        elif max_tokens > room:
            # NOTE: outside the prepared capacities: the specification's admission failure (503), not
            # a 400; it is permanent, so the response names the field and the limit, and no retry.
            raise OutsideCapacity(
                "max_tokens", f"{max_tokens} exceeds the {room} tokens the served context of {self.context_tokens} "
                f"leaves after the {len(prompt_ids)}-token prompt", limit=room, value=max_tokens)  # fmt: skip
        stops.check_vocabulary(self.bootstrap.vocab_size)
        generation = GenerationRequest(
            prompt_token_ids=prompt_ids,
            max_tokens=max_tokens,
            sampling=self.sampling_params(sampling),
            eos_token_ids=self.bootstrap.eos_token_ids,
            ignore_eos=ignore_eos,
            images=images,
        )
        output_filter = OutputFilter(
            self.bootstrap.tokenizer, stops, self._markers if markers is None else markers
        )
        return PreparedRequest(
            request_id=request_id,
            generation=generation,
            output_filter=output_filter,
            observe_tokens=observe_tokens,
            observe_timestamps=observe_timestamps,
            host_stop=stops.host_stop,
            grammar=grammar,
            prompt_logprobs=prompt_logprobs,
            speculation=speculation,
        )

    def sampling_params(self, options: SamplingOptions) -> SamplingParams:
        """Request values win over the core's sampling defaults, which win over the runtime's."""
        core = self.bootstrap.defaults.sampling
        values: dict[str, float | int] = {}
        for name in _SAMPLING_FIELDS:
            requested = getattr(options, name)
            if requested is not None:
                values[name] = requested
            elif core.HasField(name):
                values[name] = getattr(core, name)
        values["seed"] = options.seed if options.seed is not None else secrets.randbits(63)
        return SamplingParams(**values)
