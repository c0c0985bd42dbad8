#!/usr/bin/python3
"""Counts the pixels of given colours in a PNG (8-bit RGB or RGBA, not interlaced), with the Python
standard library only: how the report test tells a drawn curve from an empty plot.

    png_colors.py FILE.png RRGGBB [RRGGBB ...]   prints "width height" then "RRGGBB count" per colour
"""
import struct
import sys
import zlib


def pixels(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG")
    at, idat, header = 8, b"", None
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        chunk = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        at += 12 + length
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in (2, 6) or interlace:
        sys.exit(f"{path}: unsupported PNG (depth {depth}, colour type {color}, interlace {interlace})")
    channels = 3 if color == 2 else 4
    stride = width * channels
    raw = zlib.decompress(idat)
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(line))
        previous = line
    return width, height, channels, rows


def main(path, colours):
    width, height, channels, rows = pixels(path)
    wanted = {bytes.fromhex(c): 0 for c in colours}
    for row in rows:
        for x in range(0, width * channels, channels):
            rgb = row[x:x + 3]
            if rgb in wanted:
                wanted[rgb] += 1
    print(width, height)
    for colour, count in wanted.items():
        print(colour.hex(), count)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
