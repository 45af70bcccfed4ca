"""Invalid chat request fields and the `param` each 400 must name (shared by the in-process and
end-to-end server tests)."""

INVALID = [
    ({"messages": None}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user"}]}, "messages.0.content"),
    ({"temperature": 3}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"n": 2}, "n"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"stop": [""]}, "stop"),
    ({"stop": "x" * 4097}, "stop"),
    ({"stop": [1]}, "stop.0"),
    ({"stop": "x", "stop_token_ids": [5]}, "stop_token_ids"),
    ({"stop_token_sequences": [[1]] * 17}, "stop_token_sequences"),
    ({"stop_token_sequences": [list(range(65))]}, "stop_token_sequences.0"),
    ({"stop_token_ids": [10**7]}, "stop_token_ids"),
    ({"stop": "x", "response_format": {"type": "json_object"}}, "stop"),
    ({"return_token_ids": "yes"}, "return_token_ids"),
    ({"return_token_ids": 1}, "return_token_ids"),
    ({"return_token_timestamps": True}, "return_token_timestamps"),
    ({"stream": True, "stream_options": {"include_usage": "true"}}, "stream_options.include_usage"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"}, "tool_choice"),
    ({"model": "other-model"}, "model"),
    ({"messages": [{"role": "user", "content": "x" * 5000}]}, "messages"),
]
