"""The tray's icons, drawn with Pillow: one colour and one glyph per state, 64x64 RGBA.

    idle      green   check mark
    syncing   blue    progress ring (files done / total; a quarter arc when unknown)
    paused    slate   two bars
    degraded  amber   exclamation mark   (keyword-only search, or the reranker is down)
    error     red     cross
    offline   grey    hollow ring with a slash (no daemon answers)

Colour alone is not enough (colour blindness, monochrome panels), hence a glyph per state too.
Shapes are drawn at four times the size and scaled down, which anti-aliases them without fonts.
"""

from __future__ import annotations

from typing import Any

SIZE = 64
_SCALE = 4

STATES = ("idle", "syncing", "paused", "degraded", "error", "offline")

COLOURS: dict[str, tuple[int, int, int]] = {
    "idle": (46, 157, 87),
    "syncing": (47, 111, 214),
    "paused": (96, 108, 128),
    "degraded": (224, 161, 0),
    "error": (214, 69, 65),
    "offline": (138, 143, 152),
}

_WHITE = (255, 255, 255, 255)


def draw_icon(state: str, progress: float | None = None, size: int = SIZE) -> Any:
    """The icon of ``state`` as a ``PIL.Image`` (RGBA, ``size`` square).

    ``progress`` (0..1) fills the ring of the syncing icon; other states ignore it.
    """
    from PIL import Image, ImageDraw

    if state not in COLOURS:
        raise ValueError(f"unknown tray state {state!r}; one of {', '.join(STATES)}")
    big = size * _SCALE
    img = Image.new("RGBA", (big, big), (0, 0, 0, 0))
    d = ImageDraw.Draw(img)
    u = big / 64  # drawing unit: coordinates below are on a 64x64 grid
    colour = (*COLOURS[state], 255)
    if state == "offline":
        # No badge: an outline reads as "absent" next to the filled icons of live states.
        d.ellipse(_box(6, 6, 58, 58, u), outline=colour, width=round(6 * u))
        d.line(_box(14, 50, 50, 14, u), fill=colour, width=round(6 * u))
        return img.resize((size, size), Image.Resampling.LANCZOS)

    d.rounded_rectangle(_box(2, 2, 62, 62, u), radius=round(14 * u), fill=colour)
    w = round(6 * u)
    if state == "idle":
        d.line(
            [_pt(17, 33, u), _pt(28, 44, u), _pt(48, 21, u)], fill=_WHITE, width=w, joint="curve"
        )
    elif state == "syncing":
        ring = _box(13, 13, 51, 51, u)
        # The track: opaque and pre-mixed, since drawing replaces pixels instead of blending.
        track = tuple(round(c * 0.6 + 255 * 0.4) for c in COLOURS[state])
        d.ellipse(ring, outline=(*track, 255), width=w)
        if progress is None:
            d.arc(ring, -90, 0, fill=_WHITE, width=w)
        else:
            done = min(max(progress, 0.0), 1.0)
            if done > 0:
                d.arc(ring, -90, -90 + 360 * done, fill=_WHITE, width=w)
        d.ellipse(_box(28, 28, 36, 36, u), fill=_WHITE)
    elif state == "paused":
        d.rounded_rectangle(_box(20, 17, 28, 47, u), radius=round(2 * u), fill=_WHITE)
        d.rounded_rectangle(_box(36, 17, 44, 47, u), radius=round(2 * u), fill=_WHITE)
    elif state == "degraded":
        d.rounded_rectangle(_box(28, 12, 36, 38, u), radius=round(3 * u), fill=_WHITE)
        d.ellipse(_box(27, 43, 37, 53, u), fill=_WHITE)
    elif state == "error":
        d.line([_pt(20, 20, u), _pt(44, 44, u)], fill=_WHITE, width=round(7 * u))
        d.line([_pt(44, 20, u), _pt(20, 44, u)], fill=_WHITE, width=round(7 * u))
    return img.resize((size, size), Image.Resampling.LANCZOS)


def _pt(x: float, y: float, u: float) -> tuple[int, int]:
    return round(x * u), round(y * u)


def _box(x0: float, y0: float, x1: float, y1: float, u: float) -> tuple[int, int, int, int]:
    return round(x0 * u), round(y0 * u), round(x1 * u), round(y1 * u)
