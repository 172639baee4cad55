#!/usr/bin/env python3
"""Writes a Telegram Desktop chat export (result.json) of N generated messages, for measuring
ava on a big chat: `python3 docs/bench/telegram_export.py 100000 > result.json`, then
`ava --embedder hash import --user 42 result.json`. Two speakers, twelve words a message
from a 5,000-word vocabulary, a minute apart; seeded, so every run writes the same file."""

import json
import random
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
rng = random.Random(7)
vocabulary = [f"w{i:04d}" for i in range(5000)]
start = 1_767_225_600  # 2026-01-01 00:00 UTC
out = sys.stdout
out.write('{"name": "Generated", "type": "personal_chat", "id": 4242, "messages": [\n')
for i in range(n):
    message = {
        "id": i + 1,
        "type": "message",
        "date_unixtime": str(start + 60 * i),
        "from": "Alice" if i % 2 == 0 else "Bob",
        "text": " ".join(rng.choice(vocabulary) for _ in range(12)),
    }
    out.write(json.dumps(message) + (",\n" if i + 1 < n else "\n"))
out.write("]}\n")
