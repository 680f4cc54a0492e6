"""The one LLM layer: any OpenAI-compatible endpoint through the `openai` client.

Retries with backoff on timeouts, dropped connections, 429 (honouring Retry-After) and 5xx; a
limit of requests in flight per endpoint, shared by the processes of a machine; JSON-schema replies
validated with one repair attempt; JPEG frames as image parts; token counts per call; and a
persistent response cache in the store keyed by the endpoint's model, the messages and every
parameter, so a re-run costs no call.
"""

import base64
import collections
import contextvars
import functools
import hashlib
import json
import logging
import os
import random
import threading
from typing import Annotated
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import tenacity

from vidprep.conf.checks import EndpointUnreachable, ModelRefused, Range, check_range
from vidprep.stages.context import Component, Usage, WorkerContext, count_in_scopes
from vidprep.stages.models.endpoint_slots import endpoint_slots
from vidprep.stages.models.profiles import ModelProfile

# Usage counts of requests in flight at once (any client of this process).
_BOOKKEEPING = threading.Lock()


def api_keys(config) -> dict[str, str]:
    """The API keys a config's LLM clients read (every `api_key_env` named in it that is set), to
    hand to Ray workers, which on a cluster do not share the driver's environment."""
    names, stack = set(), [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            names.update(v for k, v in node.items() if k == "api_key_env" and isinstance(v, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return {name: os.environ[name] for name in sorted(names) if name in os.environ}


# Failures worth another attempt: the endpoint was slow, dropped the connection, was busy or broke;
# also a 408 (request timeout) and a 409 (conflict), which OpenAI's own client retries.
TRANSIENT = (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError,
             openai.ConflictError)


def transient(error: BaseException) -> bool:
    return isinstance(error, TRANSIENT) or isinstance(error, openai.APIStatusError) and error.status_code == 408


class LLMError(RuntimeError):
    """The endpoint could not give a usable reply within the retry budget."""


class LLMRefused(LLMError):
    """The endpoint refused the request for what it asks (a 400, 413 or 422: a prompt past the context
    window, a malformed request): asked again, it would be refused again."""


# Refusals of the request itself. A 401, 403 or 404 (a key, a permission, a model name) refuses the setup,
# not the question: fixed, the question is answered, so it stays a failure that is asked again.
REFUSED_REQUEST = (400, 413, 422)


# Words of a 400 that refuses the request's form rather than its content: the model's profile is wrong.
REFUSED_FORMATS = ("response_format", "json_schema", "json_object", "image")


def check_endpoints(config) -> None:
    """Ask each distinct LLM endpoint a config names (every node built as an LLMClient) for its models,
    once, so a run against an endpoint that is down stops within seconds, naming it."""
    from hydra.utils import instantiate

    nodes, stack = {}, [config]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("_target_") == f"{__name__}.LLMClient":
                nodes.setdefault(node["base_url"], node)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    for node in nodes.values():
        instantiate(node).check()


class LLMReplyError(LLMError):
    """The reply did not match the asked-for schema, even after one repair attempt."""

    def __init__(self, message: str, raw: str):
        super().__init__(f"{message}; raw reply: {raw[:2000]!r}")
        self.raw = raw


def _text_only(message: dict) -> dict:
    """A message whose parts are all text, as one string: text-only chat templates (llama.cpp's) take no parts."""
    content = message["content"]
    if isinstance(content, list) and all(p.get("type") == "text" for p in content):
        return {**message, "content": "\n".join(p["text"] for p in content)}
    return message


def image_part(jpeg: bytes) -> dict:
    """A stored JPEG frame as an image part of a chat message (vision-language endpoints)."""
    url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
    return {"type": "image_url", "image_url": {"url": url}}


class LLMClient(Component):
    """Chat completions against `base_url`; the API key is read from the `api_key_env` variable. Its
    reply cache is the worker's store (set up with the context). A failed request is retried
    `max_retries` times, the wait doubling from `backoff_s` up to `max_backoff_s`; a 429's Retry-After
    wins."""

    def __init__(self, base_url: str, profile: ModelProfile, model: str | None = None,
                 api_key_env: str = "OPENAI_API_KEY", temperature: Annotated[float, Range(0, 2)] = 0.0,
                 max_tokens: Annotated[int, Range(1, unit="tokens")] = 512,
                 timeout_s: Annotated[float, Range(0.1, unit="seconds")] = 60.0,
                 max_retries: Annotated[int, Range(0, 100)] = 5,
                 backoff_s: Annotated[float, Range(0, unit="seconds")] = 1.0,
                 max_backoff_s: Annotated[float, Range(0, unit="seconds")] = 30.0,
                 concurrency: Annotated[int, Range(1, unit="requests")] = 4, cache: bool = True,
                 seed: Annotated[int | None, Range(0)] = 0):
        # Bounds that depend on another setting; each setting's own range is declared with its type.
        check_range("llm.client.max_tokens", max_tokens, 1, profile.max_output_tokens, "tokens (the profile's max_output_tokens)")
        check_range("llm.client.max_backoff_s", max_backoff_s, backoff_s, unit="seconds (backoff_s)")
        self.base_url, self.profile = base_url, profile
        # The endpoint's name for the model: the profile's unless the server serves it by another.
        self.model = model or profile.model
        self.api_key_env = api_key_env
        self.temperature, self.max_tokens, self.seed = temperature, max_tokens, seed
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.cache = cache
        # Requests in flight to this endpoint at most, shared with every client of it on this machine (the
        # actors of every pool, other jobs: `endpoint_slots`); `in_flight` runs that many at once.
        self.concurrency = concurrency
        # The store holding the reply cache (None: no persistent cache); every call also counts in the
        # usage scopes open where it is made (`counted`).
        self.store = None
        self.usage = Usage()
        self._slots = endpoint_slots(base_url, concurrency)
        self._client = None

    def setup(self, context: WorkerContext) -> None:
        self.store = context.store if self.cache else None

    def teardown(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def key_params(self) -> dict:
        return {"model": self.model_id, "temperature": self.temperature, "max_tokens": self.max_tokens}

    def context_chars(self, share: float) -> int:
        """The characters of prompt text that fit in `share` of the model's context left after a reply of
        this client's max_tokens: a budget derived from the model rather than set by hand."""
        profile = self.profile
        return int((profile.context_tokens - self.max_tokens) * share * profile.chars_per_token)

    @property
    def model_id(self) -> str:
        """Names the model in stage keys and cache keys."""
        return f"{self.model}@{self.base_url}"

    def _openai(self) -> openai.OpenAI:
        if self._client is None:
            # Local servers take any key; a missing variable must not stop them.
            key = os.environ.get(self.api_key_env) or "unused"
            self._client = openai.OpenAI(base_url=self.base_url, api_key=key, timeout=self.timeout_s,
                                         max_retries=0)
        return self._client

    def _params(self, schema: dict | None, max_tokens: int | None, temperature: float | None) -> dict:
        params = {"model": self.model, "temperature": self.temperature if temperature is None else temperature,
                  "max_tokens": max_tokens or self.max_tokens}
        if self.seed is not None:
            params["seed"] = self.seed
        mode = self.profile.structured_output
        if schema is None or mode == "text":
            return params
        if mode == "json_schema":
            params["response_format"] = {"type": "json_schema",
                                         "json_schema": {"name": "reply", "schema": schema, "strict": True}}
        elif mode == "json_object":
            params["response_format"] = {"type": "json_object"}
        else:
            params["response_format"] = {"type": "json_object",
                                         "schema": _bounded(schema, self.profile.max_string_chars)}
        return params

    def check(self, timeout_s: float = 10.0) -> None:
        """EndpointUnreachable unless the endpoint answers a model listing (any HTTP answer but a refused
        key counts: some servers have no /models) or takes the connection and is slow to answer: a busy
        server (llama.cpp's answers one request at a time) is not a dead one, and the run's own requests
        wait their turn."""
        client = self._openai().with_options(timeout=timeout_s, max_retries=0)
        try:
            client.models.list()
        except openai.APITimeoutError:
            logging.getLogger(__name__).warning(
                "the LLM endpoint %s took the connection but did not answer within %.0f s: busy, its requests "
                "will wait their turn", self.base_url, timeout_s)
        except openai.APIConnectionError as error:
            raise EndpointUnreachable(f"the LLM endpoint {self.base_url} does not answer ({error}); start it "
                                      "or point llm.client.base_url at one that runs") from None
        except openai.AuthenticationError as error:
            raise EndpointUnreachable(f"the LLM endpoint {self.base_url} refused the key from "
                                      f"${self.api_key_env}: {error.status_code}: {error.message}") from None
        except openai.APIStatusError:
            pass

    def cache_key(self, messages: list, params: dict) -> str:
        blob = json.dumps({"base_url": self.base_url, "messages": messages, "params": params}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()

    def complete(self, messages: list, schema: dict | None = None, max_tokens: int | None = None,
                 temperature: float | None = None) -> str:
        """The reply text (cached when caching is on); max_tokens and temperature default to the client's.
        A reply cut at max_tokens is returned as it is: free text is used up to where it stopped."""
        images = sum(part.get("type") == "image_url" for m in messages if isinstance(m["content"], list)
                     for part in m["content"])
        if images > self.profile.max_images:
            raise ModelRefused(f"{self.model} takes {self.profile.max_images} images per request (its profile), "
                               f"and this request has {images}: choose a vision model's profile, or a method "
                               "setting that sends fewer frames at once")
        if schema is not None and self.profile.structured_output in ("json_object", "text"):
            messages = _asking_for(schema, messages)
        messages = [_text_only(m) for m in messages]
        params = self._params(schema, max_tokens, temperature)
        key = self.cache_key(messages, params)
        if self.store is not None:
            hit = self.store.llm_cached(key)
            if hit is not None:
                # A method's cost must not depend on what the cache held: a cached reply counts as the
                # call it was, at the tokens it cost then.
                self._count(calls=1, cache_hits=1, prompt_tokens=hit["prompt_tokens"],
                            completion_tokens=hit["completion_tokens"])
                return hit["reply"]
        text, prompt_tokens, completion_tokens = self._call(messages, params)
        if self.store is not None:
            self.store.llm_remember(key, self.model, text, prompt_tokens, completion_tokens)
        return text

    def requests_at_once(self) -> int:
        return self.concurrency

    def in_flight(self, request: Callable, items: Iterable) -> Iterator:
        """`request(item)` for every item, up to `concurrency` at once, yielded in the items' order as
        they come (the first error raised, as one after another would). Items are read as requests free
        up, so a stage sends each segment as soon as it has its frames and the endpoint never waits for
        a whole group to finish."""
        if self.concurrency == 1:
            yield from map(request, items)
            return
        pool = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="llm-request")
        waiting = collections.deque()
        try:
            for item in items:
                # Each request runs in a copy of the caller's context, so the usage scopes open there
                # (`counted`) count its calls as they would one after another.
                waiting.append(pool.submit(contextvars.copy_context().run, request, item))
                # Twice as many as run: a freed slot takes the next at once.
                if len(waiting) >= 2 * self.concurrency:
                    yield waiting.popleft().result()
            while waiting:
                yield waiting.popleft().result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def complete_json(self, messages: list, schema: dict, max_tokens: int | None = None,
                      temperature: float | None = None) -> dict:
        """A reply validated against `schema`; one repair attempt, then LLMReplyError with the raw text."""
        raw = self.complete(messages, schema, max_tokens, temperature)
        in_text = self.profile.structured_output == "text"
        try:
            return _validated(raw, schema, in_text)
        except ValueError as first:
            repair = messages + [
                {"role": "assistant", "content": raw},
                {"role": "user", "content": f"That reply is invalid: {first}. Reply again with only "
                                            "JSON that matches the schema."},
            ]
            repaired = self.complete(repair, schema, max_tokens, temperature)
            try:
                return _validated(repaired, schema, in_text)
            except ValueError as second:
                raise LLMReplyError(f"reply from {self.model} does not match the schema ({second})",
                                    repaired) from None

    def _call(self, messages: list, params: dict) -> tuple[str, int, int]:
        retrying = tenacity.Retrying(retry=tenacity.retry_if_exception(transient),
                                     stop=tenacity.stop_after_attempt(self.max_retries + 1), wait=self._wait,
                                     before_sleep=lambda _: self._count(retries=1), reraise=True)
        try:
            response = retrying(self._create, messages, params)
        except (*TRANSIENT, openai.APIStatusError) as error:
            self._count(calls=1)
            if transient(error):
                raise LLMError(f"{self.base_url} failed after {retrying.statistics['attempt_number']} attempts: "
                               f"{type(error).__name__}: {error}") from None
            # A refused request (bad key, unknown model, too long) is not retried: it would fail again.
            if error.status_code == 400 and any(word in str(error.message).lower() for word in REFUSED_FORMATS):
                # The profile promised what the model does not take: every request would be refused alike.
                raise ModelRefused(
                    f"{self.model} at {self.base_url} refused a request's {_refused_part(error.message)} "
                    f"({error.message}); its profile says structured_output={self.profile.structured_output}, "
                    f"max_images={self.profile.max_images}: choose the profile of this model "
                    "(profile@llm.client.profile=..., or profile@vision.llm.profile=...)") from None
            refused = LLMRefused if error.status_code in REFUSED_REQUEST else LLMError
            raise refused(f"{self.model} at {self.base_url} refused the request: {error.status_code}: "
                          f"{error.message}") from None
        usage = response.usage
        prompt, completion = (usage.prompt_tokens, usage.completion_tokens) if usage else (0, 0)
        self._count(calls=1, prompt_tokens=prompt, completion_tokens=completion)
        return response.choices[0].message.content or "", prompt, completion

    def _create(self, messages: list, params: dict):
        with self._slots.slot():
            return self._openai().chat.completions.create(messages=messages, **params)

    def _count(self, **used: int) -> None:
        """Add to this client's usage and to the usage scopes open where the call was made (a call that
        ended in an error counts in a question's cost too)."""
        with _BOOKKEEPING:
            self.usage.add(**used)
            count_in_scopes(self.model, **used)

    def _wait(self, retry_state: tenacity.RetryCallState) -> float:
        """A 429's Retry-After, else exponential backoff with jitter, capped at max_backoff_s."""
        error = retry_state.outcome.exception()
        response = getattr(error, "response", None)
        retry_after = response.headers.get("retry-after") if response is not None else None
        if retry_after:
            try:
                return min(float(retry_after), self.max_backoff_s)
            except ValueError:
                pass
        attempt = retry_state.attempt_number - 1
        return min(self.backoff_s * 2 ** attempt, self.max_backoff_s) * random.uniform(0.5, 1.0)


def _bounded(schema, limit: int | None):
    """The schema with every free string capped at `limit` characters: a grammar-constrained small
    model then cannot ramble past max_tokens and cut its JSON short. (Limits near 1000 and above
    overflow llama.cpp's grammar builder.)"""
    if limit is None:
        return schema
    if isinstance(schema, list):
        return [_bounded(item, limit) for item in schema]
    if not isinstance(schema, dict):
        return schema
    bounded = {key: _bounded(value, limit) for key, value in schema.items()}
    if bounded.get("type") == "string" and "enum" not in bounded and "maxLength" not in bounded:
        bounded["maxLength"] = limit
    return bounded


def _asking_for(schema: dict, messages: list) -> list:
    """The messages with the schema asked for in words at the end of the last one: JSON mode and plain
    text carry no schema of their own (and OpenAI's JSON mode refuses messages that never say JSON)."""
    ask = f"Reply with only a JSON object that matches this JSON schema:\n{json.dumps(schema)}"
    last = messages[-1]
    content = last["content"]
    content = content + [{"type": "text", "text": ask}] if isinstance(content, list) else f"{content}\n\n{ask}"
    return messages[:-1] + [{**last, "content": content}]


def _refused_part(message: str) -> str:
    return "images" if "image" in str(message).lower() else "response_format"


def _validated(raw: str, schema: dict, in_text: bool = False) -> dict:
    """The reply's JSON, checked against `schema`; `in_text`: a plain-text reply, whose JSON object may
    stand inside a code fence or a sentence (from its first "{" to its last "}")."""
    if in_text and "{" in raw:
        raw = raw[raw.index("{"):raw.rindex("}") + 1] if "}" in raw else raw[raw.index("{"):]
    try:
        # Grammar-constrained servers (llama.cpp) let raw newlines into strings; the meaning is unambiguous.
        value = json.loads(raw, strict=False)
    except json.JSONDecodeError as error:
        raise ValueError(f"not JSON: {error}") from None
    error = jsonschema.exceptions.best_match(_validator(json.dumps(schema, sort_keys=True)).iter_errors(value))
    if error is not None:
        raise ValueError(f"schema violation: {error.message}")
    return value


@functools.lru_cache(maxsize=256)
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    """A validator of the schema, built (and the schema checked) once: `jsonschema.validate` does both on
    every reply, which cost a question's steps more CPU than the reply's request."""
    schema = json.loads(schema_json)
    validator = jsonschema.validators.validator_for(schema)
    validator.check_schema(schema)
    return validator(schema)
