#!/usr/bin/python3
"""Python sentencepiece's view of a text, line by line, to hold ddp-tokenize against.

    sentencepiece_lines.py MODEL TEXT    # one JSON line per text line: {"ids": [...], "text": "..."}

The ids are sp.encode(line); the text is sp.decode of them: the normalised line.
"""
import json
import sys

import sentencepiece as spm

sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
with open(sys.argv[2], encoding="utf-8", newline="") as f:
    text = f.read()
lines = text.split("\n")
for line in lines:
    line = line[:-1] if line.endswith("\r") else line
    ids = sp.encode(line)
    print(json.dumps({"ids": ids, "text": sp.decode(ids)}))
