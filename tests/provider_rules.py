"""What each provider documents about a chat completion request, as a scripted endpoint's refusals (a
400 with the provider's kind of message). Written from the providers' documents, not from vidprep's
profiles, so a profile that promises what the model does not take shows as a refused request.

- OpenAI: `response_format` json_schema only from gpt-4o-2024-08-06 and gpt-4o-mini; JSON mode
  (json_object) on gpt-4-1106-preview, gpt-3.5-turbo-0125 and later, and only when a message says
  "JSON"; images only for vision models; prompt plus max_tokens within the context window; max_tokens
  within the model's reply limit. A 448-pixel frame costs 255 tokens (one 512-pixel tile, high detail).
- Gemini's OpenAI-compatible endpoint: json_schema response formats; 258 tokens per image.
- vLLM: structured outputs (json_schema, json_object); one image per prompt unless started with
  --limit-mm-per-prompt; LLaVA-1.6 spends up to 2,880 tokens on an image, Qwen2.5-VL 144 on a
  448x252 frame (28-pixel patches merged 2x2).
- Text is counted at 4 characters a token.
"""

OPENAI_OLD = {"formats": {"json_object"}, "images": 0, "image_tokens": 0, "max_output": 4096}
OPENAI_4O = {"formats": {"json_object", "json_schema"}, "images": 500, "image_tokens": 255, "max_output": 16384,
             "context": 128000}
VLLM = {"formats": {"json_object", "json_schema"}, "images": 1, "json_word": False}
RULES = {
    "gpt-4-1106-preview": OPENAI_OLD | {"context": 128000},
    "gpt-3.5-turbo-0125": OPENAI_OLD | {"context": 16385},
    "gpt-4o": OPENAI_4O,
    "gpt-4o-mini": OPENAI_4O,
    "gemini-1.5-flash": {"formats": {"json_object", "json_schema"}, "images": 3600, "image_tokens": 258,
                         "max_output": 8192, "context": 1048576, "json_word": False},
    "llava-hf/llava-v1.6-vicuna-13b-hf": VLLM | {"image_tokens": 2880, "max_output": 4096, "context": 4096},
    "Qwen/Qwen2.5-VL-7B-Instruct": VLLM | {"image_tokens": 144, "max_output": 32768, "context": 32768},
}


def refusal(body: dict) -> str | None:
    """Why the model's provider would refuse the request (an unknown model included), or None."""
    model = body["model"]
    rules = RULES.get(model)
    if rules is None:
        return f"The model `{model}` does not exist or you do not have access to it."
    kind = (body.get("response_format") or {}).get("type", "text")
    if kind != "text" and kind not in rules["formats"]:
        return f"Invalid parameter: 'response_format' of type '{kind}' is not supported with this model."
    texts, images = [], 0
    for message in body["messages"]:
        content = message["content"]
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts += [p["text"] for p in parts if p["type"] == "text"]
        images += sum(p["type"] == "image_url" for p in parts)
    if kind == "json_object" and rules.get("json_word", True) and not any("json" in t.lower() for t in texts):
        return "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'."
    if images > rules["images"]:
        return ("Invalid content type. image_url is only supported by certain models." if not rules["images"]
                else f"At most {rules['images']} image(s) may be provided in one request.")
    if kind == "json_schema" and not _strict_schema(body["response_format"]["json_schema"]["schema"]):
        return "Invalid schema for response_format 'reply': every object needs additionalProperties false and all its properties required."
    max_tokens = body.get("max_tokens") or 0
    if max_tokens > rules["max_output"]:
        return f"max_tokens is too large: {max_tokens}. This model supports at most {rules['max_output']} completion tokens."
    prompt = sum(len(t) for t in texts) // 4 + images * rules["image_tokens"]
    if prompt + max_tokens > rules["context"]:
        return (f"This model's maximum context length is {rules['context']} tokens. However, you requested "
                f"{prompt + max_tokens} tokens ({prompt} in the messages, {max_tokens} in the completion).")
    return None


def _strict_schema(schema) -> bool:
    """OpenAI's strict mode: every object closes its properties and requires them all."""
    if isinstance(schema, list):
        return all(_strict_schema(s) for s in schema)
    if not isinstance(schema, dict):
        return True
    if schema.get("type") == "object" and (schema.get("additionalProperties") is not False or
                                           set(schema.get("required", [])) != set(schema.get("properties", {}))):
        return False
    return all(_strict_schema(v) for v in schema.values())
