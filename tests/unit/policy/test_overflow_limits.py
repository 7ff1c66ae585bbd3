import pytest

from gateway.policy.overflow_limits import OverflowLimits, parse_overflow


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("This model's maximum context length is 128000 tokens. However, your messages resulted in 130532 tokens. Please reduce the length of the messages.", OverflowLimits(128000, 130532, None)),
        ("This model's maximum context length is 8192 tokens. However, you requested 9000 tokens (7000 in the messages, 2000 in the completion). Please reduce the length of the messages or completion.", OverflowLimits(8192, 7000, 2000)),
        ("This endpoint's maximum context length is 163840 tokens. However, you requested about 201232 tokens (197136 of text input, 4096 in the output). Please reduce", OverflowLimits(163840, 197136, 4096)),
        ("prompt is too long: 215341 tokens > 200000 maximum", OverflowLimits(200000, 215341, None)),
        ("input length and `max_tokens` exceed context limit: 195000 + 8192 > 200000, decrease input length", OverflowLimits(200000, 195000, 8192)),
        ("'max_tokens' or 'max_completion_tokens' is too large: 4096. This model's maximum context length is 8192 tokens and your request has 6000 input tokens (4096 > 8192 - 6000).", OverflowLimits(8192, 6000, None)),
        ("The decoder prompt (length 9000) is longer than the maximum model length of 8192. Make sure", OverflowLimits(8192, 9000, None)),
        ("request (9412 tokens) exceeds the available context size (8192 tokens), try increasing it", OverflowLimits(8192, 9412, None)),
        ("The input token count (1196265) exceeds the maximum number of tokens allowed (1048575).", OverflowLimits(1048575, 1196265, None)),
        ("Prompt contains 40123 tokens and 0 draft tokens, too large for model with 32768 maximum context length", OverflowLimits(32768, 40123, None)),
        ("Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 3900 `inputs` tokens and 512 `max_new_tokens`", OverflowLimits(4096, 3900, 512)),
        ("This model's maximum prompt length is 131072 but the request contains 145012 tokens.", OverflowLimits(131072, 145012, None)),
        ("The prompt is too long: 140312, model maximum context length: 131072", OverflowLimits(131072, 140312, None)),
        ("Your request exceeded model token limit: 262144 (requested: 300000)", OverflowLimits(262144, 300000, None)),
        ("Request too large for model `llama` in organization `o` on tokens per minute (TPM): Limit 6000, Requested 9540, please reduce", OverflowLimits(6000, 9540, None)),
        # tests/corpus: Vertex AI, TGI's InputLength, SiliconFlow, Cohere, LM Studio.
        ("Unable to submit request because the input token count is 1251952 but model only supports up to 1048576. Reduce the input token count and try again.", OverflowLimits(1048576, 1251952, None)),
        ("Input validation error: `inputs` must have less than 4096 tokens. Given: 5000", OverflowLimits(4096, 5000, None)),
        ("length of prompt_tokens (57535) must be less than max_seq_len (32768)", OverflowLimits(32768, 57535, None)),
        ("too many tokens: total number of tokens in the prompt cannot exceed 4081 - received 4292. Try using a shorter prompt, or enabling prompt truncating.", OverflowLimits(4081, 4292, None)),
        ("Reached context length of 32000 tokens with model (arch: gpt-oss) that does not currently support mid-generation context overflow.", OverflowLimits(32000, None, None)),
        ("Prompt has 300,000 tokens but maximum context length is 131,072 tokens", OverflowLimits(131072, None, None)),
        # tests/corpus: SambaNova, DeepInfra, llama-cpp-python (its count stops where the prompt
        # stopped fitting, so it is not the prompt's size).
        ("Requested generation length 1 is not possible! The provided prompt is 4309 tokens long, so generating 1 tokens requires a sequence length of 4310, but the maximum supported sequence length is just 4096!", OverflowLimits(4096, 4309, 1)),
        ("Requested input length 99009 exceeds maximum input length 8192", OverflowLimits(8192, 99009, None)),
        ("Prompt exceeds n_ctx: 4157 > 4096", OverflowLimits(4096, None, None)),
        ("Input is too long for requested model.", OverflowLimits()),
        ("", OverflowLimits()),
        (None, OverflowLimits()),
    ],
)
def test_provider_numbers(message: str | None, expected: OverflowLimits) -> None:
    assert parse_overflow(message) == expected
