"""Render pages and pictures in headless Chromium to PNG and check the screenshots are not blank.

    python scripts/house/screenshots.py OUT_DIR FILE.html|FILE.svg ... [--width 1200] [--height 900]

Needs Debian's `chromium` (apt install chromium); the unit tests do not. For each file it writes
OUT_DIR/<name>.png and prints the share of pixels that are not background; it exits 1 if a
screenshot is blank (under 0.5% of its pixels drawn) or could not be made.
"""

from __future__ import annotations

import argparse
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]


def screenshot(page: Path, png: Path, width: int, height: int) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        sys.exit("no chromium on the path (apt install chromium)")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={png}",
                        f"--window-size={width},{height}", page.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)


def drawn_share(png: Path) -> float:
    """The share of pixels that differ from the top-left one (the background)."""
    width, height, channels, rows = decode_png(png.read_bytes())
    background = rows[0][:channels]
    drawn = sum(1 for row in rows for x in range(0, width * channels, channels) if row[x : x + channels] != background)
    return drawn / (width * height)


def decode_png(data: bytes) -> tuple[int, int, int, list[bytes]]:
    """Width, height, channels and unfiltered rows of an 8-bit RGB or RGBA PNG, with the standard library."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    position, idat, header = 8, b"", None
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position : position + 8])
        chunk = data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        position += 12 + length
    width, height, depth, color = header[:4]
    channels = {2: 3, 6: 4}[color]
    assert depth == 8, "only 8-bit PNGs"
    raw, stride = zlib.decompress(idat), width * channels
    rows, previous = [], bytes(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            left = line[x - channels] if x >= channels else 0
            up, corner = previous[x], previous[x - channels] if x >= channels else 0
            line[x] = (line[x] + (0, left, up, (left + up) // 2, paeth(left, up, corner))[kind]) & 255
        rows.append(bytes(line))
        previous = rows[-1]
    return width, height, channels, rows


def paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--width", type=int, default=1200)
    parser.add_argument("--height", type=int, default=900)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    blank = False
    for page in args.files:
        png = args.out_dir / f"{page.stem}.png"
        screenshot(page, png, args.width, args.height)
        share = drawn_share(png)
        blank |= share < 0.005
        print(f"{png}: {100 * share:.1f}% of the pixels drawn{'  BLANK' if share < 0.005 else ''}")
    sys.exit(1 if blank else 0)


if __name__ == "__main__":
    main()
