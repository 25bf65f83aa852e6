"""Media costs: what an image costs in tokens by OpenAI's published rule, its size read from the first bytes of
its base64 data (PNG, GIF, WebP, JPEG), so an image is never priced by its base64 length; and what a PDF costs:
its pages, read from its bytes, times the per-page figure its provider publishes.

Sources:
  [vision]     OpenAI platform docs, Images and vision guide, "Calculating costs" (detail low = 85 tokens; high =
               85 + 170 per 512px tile after fitting into 2048x2048 and scaling the shortest side down to 768px).
  [claude-pdf] Anthropic docs, PDF support (docs.anthropic.com/en/docs/build-with-claude/pdf-support), "Estimate
               your costs": each page is sent as its extracted text, typically 1,500-3,000 tokens a page, and as an
               image of the page (priced as images are).
  [gemini-pdf] Google, Gemini API docs, Document understanding (ai.google.dev/gemini-api/docs/document-processing):
               each document page is equivalent to 258 tokens. (Gemini 3 lets `media_resolution` set another
               per-page budget: ai.google.dev/gemini-api/docs/media-resolution.)
  [openai-pdf] OpenAI platform docs, File inputs (developers.openai.com/api/docs/guides/pdf-files): the extracted text
               and an image of each page are put into the model's context; no per-page figure is published.
  [pdf]        ISO 32000-1 (PDF 1.7): a page is a dictionary of `/Type /Page` (7.7.3.3), the page tree's root a
               `/Type /Pages` dictionary whose `/Count` is the number of pages (7.7.3.2); objects may sit compressed
               in object streams, `/Type /ObjStm` (7.5.7); a linearized file says its page count as `/N` in its
               first dictionary (Annex F).
Used by `lc_compaction.tokens`; the public names are re-exported there.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
import zlib

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




# ---------------------------------------------------------------------------------------------------------------
# PDF documents
# ---------------------------------------------------------------------------------------------------------------

PDF_PAGE_TOKENS_ANTHROPIC = 3_000
"""Tokens one PDF page costs on Claude models: the top of the 1,500-3,000 tokens of text a page [claude-pdf] (the page's
image comes on top of it; the top figure stands for both, as measured costs of 2,100-2,500 a page suggest)."""

PDF_PAGE_TOKENS_GEMINI = 258
"""Tokens one PDF page costs on Gemini models [gemini-pdf]."""

PDF_PAGE_TOKENS_DEFAULT = 3_000
"""Tokens one PDF page costs on OpenAI and every other model: [openai-pdf] publishes no figure, only that each page
is sent as its text and an image; the image alone can cost up to `IMAGE_MAX_TOKENS` (1,445) [vision], so the
highest figure a provider publishes, Anthropic's 3,000, is used (counting high makes compaction run before a call
fails, not after)."""

PDF_FALLBACK_PAGES = 1
"""Pages counted for a PDF whose page count is known neither from its bytes (a URL, a file id, bytes in a form
`pdf_page_count` cannot read) nor from its block's metadata: one page, the smallest document (not an upper bound:
give `"pages": n` in the block, its `extras` or its `metadata` to count it right)."""

PDF_SCAN_BYTES = 32 * 1024 * 1024
"""Bytes of a PDF read at most to count its pages: Anthropic's and OpenAI's 32 MB request limit (a larger file
cannot be sent anyway); what lies beyond is not read."""

PDF_INFLATE_BYTES = 64 * 1024 * 1024
"""Bytes decompressed at most from a PDF's object streams while counting its pages (a bound against a
decompression bomb)."""

_LINEARIZED = re.compile(rb"/Linearized\b[^>]*?/N\s+(\d+)", re.S)
_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
_PAGES_COUNT = re.compile(rb"/Type\s*/Pages\b(?:(?!>>).)*?/Count\s+(\d+)|/Count\s+(\d+)(?:(?!>>).)*?/Type\s*/Pages\b",
                          re.S)
_OBJECT_STREAM = re.compile(rb"<<((?:(?!>>\s*stream).){0,4096}?/Type\s*/ObjStm(?:(?!>>\s*stream).){0,4096}?)>>\s*"
                            rb"stream\r?\n", re.S)


def pdf_page_count(data: str | bytes) -> int | None:
    """The number of pages of a PDF, from its bytes or their base64 (a ``data:`` URL too), or None when it cannot be
    read (not a PDF, or no page found within the bounds).

    Read [pdf], first to last, stopping at the first that answers: the `/N` of a linearized file's first dictionary;
    the `/Count` of the page tree's root (the largest `/Count` of a `/Type /Pages` dictionary); the number of
    `/Type /Page` dictionaries; the same two in the file's Flate-compressed object streams. At most `PDF_SCAN_BYTES`
    bytes are read and `PDF_INFLATE_BYTES` decompressed. Never raises."""
    try:
        raw = _pdf_bytes(data)
        if raw is None:
            return None
        found = _LINEARIZED.search(raw[:2048])
        if found and int(found.group(1)) > 0:
            return int(found.group(1))
        pages = _count_pages(raw)
        if pages:
            return pages
        return _count_pages(_inflated_object_streams(raw)) or None
    except Exception:  # noqa: BLE001 - a malformed file must never break counting
        return None


def _pdf_bytes(data: str | bytes) -> bytes | None:
    if isinstance(data, str):
        text = data.partition(",")[2] if data.startswith("data:") else data
        text = text[: PDF_SCAN_BYTES // 3 * 4 + 4]
        if any(c.isspace() for c in text[:256]):
            text = "".join(text.split())
        try:
            if not _is_pdf(base64.b64decode(text[:1368], validate=False)):  # the header first: no full decode
                return None
            return base64.b64decode(text[: len(text) - len(text) % 4], validate=False)
        except (binascii.Error, ValueError):
            return None
    raw = bytes(data[:PDF_SCAN_BYTES])
    return raw if _is_pdf(raw) else None


def _is_pdf(head: bytes) -> bool:
    """Whether bytes start (within their first 1,024, [pdf] 7.5.2) with the PDF header `%PDF-`."""
    return b"%PDF-" in head[:1024]


def _count_pages(raw: bytes) -> int:
    counts = [int(a or b) for a, b in _PAGES_COUNT.findall(raw)]
    if counts and max(counts) > 0:
        return max(counts)
    return len(_PAGE.findall(raw))


def _inflated_object_streams(raw: bytes) -> bytes:
    """The decompressed content of the Flate-compressed object streams of `raw`, at most `PDF_INFLATE_BYTES`."""
    out: list[bytes] = []
    left = PDF_INFLATE_BYTES
    for found in _OBJECT_STREAM.finditer(raw):
        if left <= 0:
            break
        if b"/FlateDecode" not in found.group(1):
            continue
        end = raw.find(b"endstream", found.end())
        if end < 0:
            continue
        try:
            chunk = zlib.decompressobj().decompress(raw[found.end():end], left)
        except zlib.error:
            continue
        out.append(chunk)
        left -= len(chunk)
    return b"\n".join(out)


def pdf_page_tokens(family: str) -> int:
    """Tokens one PDF page costs for a provider family ("anthropic", "gemini", anything else: the default), by its
    published figure (see the constants)."""
    if family == "anthropic":
        return PDF_PAGE_TOKENS_ANTHROPIC
    if family == "gemini":
        return PDF_PAGE_TOKENS_GEMINI
    return PDF_PAGE_TOKENS_DEFAULT
