"""What a model is and what its endpoint accepts, as its provider documents it: one profile per model
(`conf/profile/`), selected for each LLM client (`profile@llm.client.profile=gpt-4o`,
`profile@vision.llm.profile=...` for a method's vision model). The context window sets the budgets
derived from it, the structured-output mode how a reply's JSON schema is asked for, `max_images` whether
frames may be sent, and the prices what `evaluate` charges per question.
"""

from pathlib import Path
from typing import Annotated

from omegaconf import OmegaConf

from vidprep.conf.checks import ConfigError, Range

PROFILES = Path(__file__).resolve().parents[2] / "conf" / "profile"

# How a reply's JSON schema reaches the model:
#   json_schema: response_format {"type": "json_schema"} (OpenAI from gpt-4o-2024-08-06 and gpt-4o-mini,
#     Gemini's OpenAI-compatible endpoint, vLLM's structured outputs);
#   json_object: JSON mode, response_format {"type": "json_object"}, the schema in the prompt (OpenAI's
#     older models: gpt-4-1106-preview, gpt-3.5-turbo-0125);
#   json_object_schema: llama-cpp-python's server, {"type": "json_object", "schema": ...} (a grammar);
#   text: no response_format; the schema in the prompt, the JSON read from the reply's text.
STRUCTURED_OUTPUT_MODES = ("json_schema", "json_object", "json_object_schema", "text")


class ModelProfile:
    """`model`: the name its endpoint knows it by (the client's model unless set there). `context_tokens`:
    prompt and reply together; `max_output_tokens`: the most a reply may ask for. `max_images`: images one
    request may carry (0: text only). Prices in USD per million input / output tokens. `chars_per_token`:
    how much text a token holds, for budgets derived from the context. `max_string_chars`: a cap on every
    free string of a schema, for a small grammar-constrained model that would otherwise ramble past its
    reply's tokens (null: none)."""

    def __init__(self, model: str, context_tokens: Annotated[int, Range(256, unit="tokens")],
                 max_output_tokens: Annotated[int, Range(1, unit="tokens")], structured_output: str = "json_schema",
                 max_images: Annotated[int, Range(0)] = 0, usd_per_million_input: Annotated[float, Range(0)] = 0.0,
                 usd_per_million_output: Annotated[float, Range(0)] = 0.0,
                 chars_per_token: Annotated[float, Range(1)] = 4.0,
                 max_string_chars: Annotated[int | None, Range(1)] = None):
        if structured_output not in STRUCTURED_OUTPUT_MODES:
            raise ConfigError(f"profile {model}: structured_output must be one of {', '.join(STRUCTURED_OUTPUT_MODES)}, "
                              f"got {structured_output!r}")
        self.model, self.context_tokens, self.max_output_tokens = model, context_tokens, max_output_tokens
        self.structured_output, self.max_images = structured_output, max_images
        self.usd_per_million_input, self.usd_per_million_output = usd_per_million_input, usd_per_million_output
        self.chars_per_token, self.max_string_chars = chars_per_token, max_string_chars


def model_prices(extra) -> dict[str, dict[str, float]]:
    """USD per 1M input / output tokens per model name as its endpoint knows it: every shipped profile's,
    then the config's `prices` (one's own models, other prices) over them."""
    prices = {}
    for path in sorted(PROFILES.glob("*.yaml")):
        profile = OmegaConf.load(path)
        prices[profile.model] = {"input": profile.get("usd_per_million_input", 0.0),
                                 "output": profile.get("usd_per_million_output", 0.0)}
    return prices | (OmegaConf.to_container(extra) if OmegaConf.is_config(extra) else dict(extra or {}))
