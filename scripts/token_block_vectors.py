"""Writes tests/testdata/token_prefix_blocks.json to stdout, the shared vectors of the proxies'
prefix_blocks="tokens" option (docs/contract.md, "HTTP proxies"): each case's expected blocks are
bounded_router.prefix_blocks of the ids written beside it, chosen by hand from the body, never
read from it, so the file checks the gateway's and the Python proxies' reading of bodies alike::

    .venv/bin/python scripts/token_block_vectors.py > tests/testdata/token_prefix_blocks.json
"""
import json

from bounded_router import prefix_blocks

r40 = list(range(40))
cases = [
    ("an OpenAI completions prompt of ids", {"model": "m", "prompt": r40, "max_tokens": 4}, 16, 1 << 20, r40),
    ("SGLang /generate input_ids", {"input_ids": r40, "sampling_params": {"max_new_tokens": 4}}, 16, 1 << 20, r40),
    ("input_ids wins over prompt", {"prompt": [7] * 40, "input_ids": r40}, 16, 1 << 20, r40),
    ("a null input_ids is absent", {"input_ids": None, "prompt": r40}, 16, 1 << 20, r40),
    ("a text prompt has no ids", {"prompt": "the quick brown fox"}, 1, 1 << 20, None),
    ("a float is no id", {"prompt": [1, 2, 3.0, 4]}, 2, 1 << 20, None),
    ("a boolean is no id", {"prompt": [1, 2, True, 4]}, 2, 1 << 20, None),
    ("a negative id", {"prompt": [1, 2, -1, 4]}, 2, 1 << 20, None),
    ("an id of 2**32", {"prompt": [1, 2, 1 << 32, 4]}, 2, 1 << 20, None),
    ("the largest id", {"prompt": [(1 << 32) - 1, 0, 65536, 1]}, 2, 1 << 20, [(1 << 32) - 1, 0, 65536, 1]),
    ("an invalid id after the cut still makes none", {"prompt": r40 + ["x"]}, 4, 64, None),
    ("prefix_max_bytes 64 hashes the first 16 ids", {"prompt": r40}, 4, 64, r40[:16]),
    ("prefix_max_bytes not a multiple of a block", {"prompt": r40}, 4, 70, r40[:16]),
    ("fewer ids than a block", {"prompt": [1, 2, 3]}, 4, 1 << 20, None),
    ("a batch of prompts", {"prompt": [[1, 2], [3, 4]]}, 1, 1 << 20, None),
    ("an empty prompt", {"prompt": []}, 1, 1 << 20, None),
    ("a partial last block is left out", {"prompt": r40[:7]}, 3, 1 << 20, r40[:6]),
]
out = []
for name, body, bs, max_bytes, ids in cases:
    blocks = None if ids is None else ["%016x" % b for b in prefix_blocks(ids, bs)]
    out.append({"name": name, "body": json.dumps(body), "block_size": bs, "max_bytes": max_bytes, "ids": ids, "blocks": blocks})
# Bodies the JSON encoder does not write: spacing, -0, a repeated key, not JSON.
raw = [
    ("spaces around everything", ' { "prompt" : [ 1 , 2 ,\n3 , 4 ] } ', 2, 1 << 20, [1, 2, 3, 4]),
    ("-0 is 0, as Python reads it", '{"prompt": [-0, 1]}', 1, 1 << 20, [0, 1]),
    ("an exponent is no id", '{"prompt": [1e2, 1]}', 1, 1 << 20, None),
    ("the last of a repeated key", '{"prompt": [9, 9], "prompt": [1, 2]}', 2, 1 << 20, [1, 2]),
    ("not JSON as a whole", '{"prompt": [1, 2]} x', 1, 1 << 20, None),
    ("not an object", '[1, 2]', 1, 1 << 20, None),
    ("NaN is not JSON", '{"prompt": [1, 2], "temperature": NaN}', 1, 1 << 20, None),
    ("Infinity is not JSON", '{"prompt": [1, 2], "top_p": -Infinity}', 1, 1 << 20, None),
]
for name, body, bs, max_bytes, ids in raw:
    blocks = None if ids is None else ["%016x" % b for b in prefix_blocks(ids, bs)]
    out.append({"name": name, "body": body, "block_size": bs, "max_bytes": max_bytes, "ids": ids, "blocks": blocks})
print("[\n" + ",\n".join(json.dumps(case) for case in out) + "\n]")
