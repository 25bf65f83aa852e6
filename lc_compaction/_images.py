"""Images: what one costs in tokens by OpenAI's published rule, and its size read from the first bytes of its
base64 data (PNG, GIF, WebP, JPEG), so an image is never priced by its base64 length.

Source [vision]: OpenAI platform docs, Images and vision guide, "Calculating costs" (detail low = 85 tokens;
high = 85 + 170 per 512px tile after fitting into 2048x2048 and scaling the shortest side down to 768px).
Used by `lc_compaction.tokens`; the public names are re-exported there.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct

IMAGE_LOW_DETAIL_TOKENS = 85
"""Cost of an image sent with ``detail: "low"``, whatever its size [vision]."""

IMAGE_BASE_TOKENS = 85
"""Fixed part of a high-detail image's cost [vision]."""

IMAGE_TILE_TOKENS = 170
"""Cost of each 512px tile of a high-detail image [vision]."""

IMAGE_TILE_PX = 512
"""Side of a tile, pixels [vision]."""

IMAGE_FIT_PX = 2048
"""High-detail images are first scaled down to fit in a square of this side, pixels [vision]."""

IMAGE_SHORT_SIDE_PX = 768
"""...then scaled down so that their shortest side is at most this, pixels [vision]."""

IMAGE_MAX_TOKENS = IMAGE_BASE_TOKENS + IMAGE_TILE_TOKENS * (
    math.ceil(IMAGE_SHORT_SIDE_PX / IMAGE_TILE_PX) * math.ceil(IMAGE_FIT_PX / IMAGE_TILE_PX)
)
"""The largest value of the [vision] formula: after scaling, the long side is at most 2048px (4 tiles) and the
short side at most 768px (2 tiles), so at most 8 tiles: 85 + 170 * 8 = 1445 tokens.  Used for an image whose size
cannot be read (a URL, a file id, an unknown format).  Other providers' rules give similar bounds (Anthropic:
about width * height / 750, at most about 1,600 tokens), but OpenAI's patch-based models (gpt-4.1-mini/nano,
o4-mini: up to 1,536 patches times a model multiplier) can bill more; this is OpenAI's tile rule only."""


# ---------------------------------------------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------------------------------------------


def image_tokens(width: int, height: int, *, detail: str | None = "high") -> int:
    """Tokens of one image of ``width`` x ``height`` pixels under OpenAI's rule [vision].

    ``detail="low"`` costs 85.  Otherwise (``"high"``, ``"auto"``, ``None``: counted as high, the larger) the image
    is scaled down to fit in 2048x2048, then down so its shortest side is at most 768px (never up), and costs
    85 + 170 per 512px tile covering it; at most :data:`IMAGE_MAX_TOKENS` (1445).

    Raises:
        ValueError: ``width`` or ``height`` is not a positive integer.
    """
    if detail == "low":
        return IMAGE_LOW_DETAIL_TOKENS
    if not (isinstance(width, int) and isinstance(height, int)) or width <= 0 or height <= 0:
        raise ValueError(f"image width and height must be positive integers, got {width!r} x {height!r}")
    w, h = float(width), float(height)
    if max(w, h) > IMAGE_FIT_PX:
        scale = IMAGE_FIT_PX / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > IMAGE_SHORT_SIDE_PX:
        scale = IMAGE_SHORT_SIDE_PX / min(w, h)
        w, h = w * scale, h * scale
    w_px, h_px = max(1, round(w)), max(1, round(h))
    tiles = math.ceil(w_px / IMAGE_TILE_PX) * math.ceil(h_px / IMAGE_TILE_PX)
    return IMAGE_BASE_TOKENS + IMAGE_TILE_TOKENS * tiles


_HEADER_B64_CHARS = 512
"""Base64 characters decoded to read an image header (384 bytes): enough for PNG, GIF and WebP headers."""

_JPEG_MAX_SEGMENTS = 64
"""JPEG segments skipped at most while looking for the frame header (SOFn) before giving up."""

_JPEG_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


class _B64Window:
    """Random access to the bytes of a base64 string, decoding only the 4-character groups asked for."""

    __slots__ = ("_s",)

    def __init__(self, s: str) -> None:
        if any(c.isspace() for c in s[:_HEADER_B64_CHARS]):
            # Line-wrapped base64: offsets are not aligned; work on a bounded, cleaned prefix.
            s = "".join(s[: 1 << 16].split())
        self._s = s

    def read(self, offset: int, n: int) -> bytes:
        start = (offset // 3) * 4
        end = ((offset + n + 2) // 3) * 4
        chunk = self._s[start:end]
        if not chunk:
            return b""
        chunk += "=" * (-len(chunk) % 4)
        try:
            data = base64.b64decode(chunk)
        except (binascii.Error, ValueError):
            return b""
        skip = offset - (offset // 3) * 3
        return data[skip : skip + n]


def _image_dimensions(b64: str) -> tuple[int, int] | None:
    """Width and height (pixels) of a base64 PNG, GIF, WebP or JPEG, read from its header; None if unknown."""
    try:
        window = _B64Window(b64)
        head = window.read(0, (_HEADER_B64_CHARS // 4) * 3)
        size: tuple[int, int] | None = None
        if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR" and len(head) >= 24:
            size = struct.unpack(">II", head[16:24])
        elif head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
            size = struct.unpack("<HH", head[6:10])
        elif head[:4] == b"RIFF" and head[8:12] == b"WEBP":
            size = _webp_dimensions(head)
        elif head[:2] == b"\xff\xd8":
            size = _jpeg_dimensions(window)
        if size is None or size[0] <= 0 or size[1] <= 0:
            return None
        return int(size[0]), int(size[1])
    except Exception:  # noqa: BLE001 - a malformed header must never break counting
        return None


def _webp_dimensions(head: bytes) -> tuple[int, int] | None:
    chunk = head[12:16]
    if chunk == b"VP8 " and len(head) >= 30 and head[23:26] == b"\x9d\x01\x2a":
        w, h = struct.unpack("<HH", head[26:30])
        return w & 0x3FFF, h & 0x3FFF
    if chunk == b"VP8L" and len(head) >= 25 and head[20] == 0x2F:
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(head) >= 30:
        return int.from_bytes(head[24:27], "little") + 1, int.from_bytes(head[27:30], "little") + 1
    return None


def _jpeg_dimensions(window: _B64Window) -> tuple[int, int] | None:
    pos = 2
    for _ in range(_JPEG_MAX_SEGMENTS):
        seg = window.read(pos, 9)
        if len(seg) < 4 or seg[0] != 0xFF:
            return None
        marker = seg[1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _JPEG_SOF_MARKERS:
            if len(seg) < 9:
                return None
            height, width = struct.unpack(">HH", seg[5:9])
            return width, height
        if marker == 0xDA or marker == 0xD9:  # start of scan / end of image: no frame header before it
            return None
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            pos += 2
            continue
        pos += 2 + int.from_bytes(seg[2:4], "big")
    return None


