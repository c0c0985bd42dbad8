#!/usr/bin/python3
"""Python sentencepiece's text for a prompt and the ids drawn after it, as ddp-generate prints it.

    sentencepiece_decode.py MODEL PROMPT "ID ID ..."

The stream is BOS, the prompt's ids, then the drawn ids; each BOS starts a new line (ddprun's
Note [Lines as documents]), and each line is sp.decode of its ids.
"""
import sys

import sentencepiece as spm

sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
stream = [sp.bos_id()] + sp.encode(sys.argv[2]) + [int(i) for i in sys.argv[3].split()]
lines = []
for i, token in enumerate(stream):
    if token == sp.bos_id():
        lines.append([])
    else:
        lines[-1].append(token)
print("\n".join(sp.decode(line) for line in lines))
