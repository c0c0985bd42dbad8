#!/usr/bin/python3
"""Text into byte-level token shards in llm.c's format (vocabulary 256), with a held-out split.

    /usr/bin/python3 scripts/make_tokens.py OUT_DIR --kjv                 # the King James Bible (bible-kjv)
    /usr/bin/python3 scripts/make_tokens.py OUT_DIR --text a.txt b.txt    # any UTF-8 text

Each byte of the text is one token. The shards are llm.c's uint16 format: a 1,024-byte header of
256 little-endian int32 (magic 20240520, version 1, token count), then the tokens as uint16; they
are written as OUT_DIR/{name}_train_NNNNNN.bin and {name}_val_NNNNNN.bin, at most --shard-tokens
each. The held-out split is the end of the text, about --val-fraction of it: whole books for the
Bible (so no verse of a held-out book is trained on), whole lines for other text.

Only the standard library is used, so any python3 runs it.
"""

import argparse
import glob
import os
import re
import struct
import subprocess
import sys

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256
REFERENCE = re.compile(r"^(\d?[A-Za-z]+)(\d+):(\d+) (.*)$")


def kjv_books():
    """The Bible as (book, text) pairs, one verse a line, without the verse references."""
    try:
        out = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], check=True, capture_output=True).stdout
    except FileNotFoundError:
        sys.exit("make_tokens.py: no `bible` command: install Debian's bible-kjv (apt-get install bible-kjv)")
    books = []
    for line in out.decode("utf-8").splitlines():
        match = REFERENCE.match(line)
        if not match:
            continue  # the program's blank separator lines
        book, verse = match.group(1), match.group(4)
        if not books or books[-1][0] != book:
            books.append((book, []))
        books[-1][1].append(verse)
    return [(book, "\n".join(verses) + "\n") for book, verses in books]


def split_units(units, val_fraction):
    """(cut, train, val): units[cut:], the last whole units making up about val_fraction of the bytes, are held out."""
    total = sum(len(text.encode("utf-8")) for text in units)
    held, cut = 0, len(units)
    while cut > 1 and held < val_fraction * total:
        cut -= 1
        held += len(units[cut].encode("utf-8"))
    return cut, "".join(units[:cut]), "".join(units[cut:])


def write_shards(out_dir, name, split, data, shard_tokens):
    paths = []
    for index, start in enumerate(range(0, max(len(data), 1), shard_tokens)):
        chunk = data[start:start + shard_tokens]
        path = os.path.join(out_dir, f"{name}_{split}_{index:06d}.bin")
        header = struct.pack("<3i", MAGIC, VERSION, len(chunk)) + bytes(4 * (HEADER_INTS - 3))
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(header)
            tokens = bytearray(2 * len(chunk))  # each byte a little-endian uint16: the byte, then 0
            tokens[0::2] = chunk
            f.write(tokens)
        os.replace(tmp, path)  # never a half-written shard under the real name
        paths.append(path)
    return paths


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--kjv", action="store_true", help="the King James Bible from Debian's bible-kjv")
    source.add_argument("--text", nargs="+", help="text files, concatenated")
    parser.add_argument("--name", help="shard name prefix (default: kjv, or the first file's stem)")
    parser.add_argument("--val-fraction", type=float, default=0.1)
    parser.add_argument("--shard-tokens", type=int, default=100_000_000)
    args = parser.parse_args()
    if not 0 < args.val_fraction < 1:
        parser.error("--val-fraction must be between 0 and 1")
    if args.shard_tokens < 1:
        parser.error("--shard-tokens must be at least 1")
    if args.kjv:
        books = kjv_books()
        cut, train, val = split_units([text for _, text in books], args.val_fraction)
        held = [book for book, _ in books[cut:]]
        name = args.name or "kjv"
    else:
        try:
            text = "".join(open(path, encoding="utf-8").read() for path in args.text)
        except (OSError, UnicodeDecodeError) as e:
            sys.exit(f"make_tokens.py: {e}")
        lines = text.splitlines(keepends=True)
        # Shards of no token would only be refused later, by ddprun, far from the cause.
        if not text.strip():
            sys.exit(f"make_tokens.py: {args.text[0]}: no text")
        if len(lines) < 2:
            sys.exit(f"make_tokens.py: {args.text[0]}: one line, which cannot be split into training and held-out "
                     "text; give at least two")
        _, train, val = split_units(lines, args.val_fraction)
        name = args.name or os.path.splitext(os.path.basename(args.text[0]))[0]
    os.makedirs(args.out_dir, exist_ok=True)
    # A glob of shards takes them all: an earlier run's extra shards must not join this one's.
    for stale in glob.glob(os.path.join(args.out_dir, f"{name}_train_*.bin")) + \
            glob.glob(os.path.join(args.out_dir, f"{name}_val_*.bin")):
        os.remove(stale)
    for split, part in (("train", train), ("val", val)):
        data = part.encode("utf-8")
        paths = write_shards(args.out_dir, name, split, data, args.shard_tokens)
        print(f"{split}: {len(data):,} tokens in {len(paths)} shard(s): {', '.join(paths)}")
    if args.kjv:
        print(f"held out: {len(held)} books, {held[0]} to {held[-1]}")


if __name__ == "__main__":
    main()
