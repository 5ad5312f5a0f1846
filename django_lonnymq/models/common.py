"""What the model modules share: how a name's length CHECK is written, and bounds in the
schema's units."""

from __future__ import annotations

from ..bounds import MIN_EVERY

MIN_EVERY_MS = int(MIN_EVERY.total_seconds() * 1000)


def length(most: int) -> str:
    """The pattern of a name's length CHECK: 1 to ``most`` characters."""
    return f"^.{{1,{most}}}$"
