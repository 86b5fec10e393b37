"""A colour per class index: the palette of segmentation masks, their overlays and the sample grid."""

from __future__ import annotations

# A colour per class index (0, the background, black): the masks' palette and the overlays' colours.
_COLOURS = [(0, 0, 0), (230, 25, 75), (60, 180, 75), (255, 225, 25), (0, 130, 200), (245, 130, 48),
            (145, 30, 180), (70, 240, 240), (240, 50, 230), (210, 245, 60), (250, 190, 212), (0, 128, 128),
            (220, 190, 255), (170, 110, 40), (255, 250, 200), (128, 0, 0), (170, 255, 195), (128, 128, 0)]


def palette(n: int = 256) -> list[int]:
    """A PNG palette of ``n`` entries: the colours above, then the same cycle again."""
    return [c for k in range(n) for c in (_COLOURS[0] if k == 0 else _COLOURS[1 + (k - 1) % (len(_COLOURS) - 1)])]
