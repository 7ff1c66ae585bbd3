"""Which images of a request going on to Anthropic cannot go as they are: one plan for every
translation that reaches Messages (chat's messages, Responses' input, Gemini's contents).

Anthropic refuses the whole request for one image over its limits, and the gateway cannot make
an image smaller. An image in what the client asks about now (``asked``) is refused before any
call; one earlier in the conversation becomes a note, as refusing it would fail every later turn
of a session that keeps it in its history (claude-code #12167). The lower limit on the sides of
a request of more than 20 images depends on how many images are sent, so the plan is made on the
whole request before any image is translated:

1. an earlier image over the limits that hold whatever the count (5 MB, 8000 pixels) is a note;
2. while more than 20 would be sent, the oldest earlier images over 2000 pixels become notes,
   as many as bring the count to 20 (a conversation of Retina screenshots keeps its last 20);
3. an image asked about now is judged by the count that is then sent: refused for its 2000
   pixels only when even every earlier one over them left out leaves more than 20;
4. while more than the cap would be sent, the oldest earlier images become notes. The vision
   guide's cap: "up to 600 for API requests (100 for models with a 200k-token context window)"
   (https://platform.claude.com/docs/en/build-with-claude/vision), so 600 on a model of a larger
   window, 100 on one of 200k or whose window is not known (``most_images``); a session of many
   screenshots over it failed every later turn ("Too much media: 0 document pages + 103 images >
   100", claude-code #3397, #19822). One asked about now is never left out for the count: those
   alone over it are Anthropic's to answer.

Pure: what the images are (``Seen``) in, why each that cannot go does not (``Over``) out; the
callers read the images and write the refusals and the notes.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import TypeVar

# Anthropic's limit per image, on its base64 text: "image exceeds 5 MB maximum: 6275800 bytes >
# 5242880 bytes" for a 4.7 MB file (lobehub #14711, whose fix found it counted on the base64).
IMAGE_MAX = 5 * 1024 * 1024
# Anthropic's limits on an image's pixels (the vision guide's "General limits": "The maximal
# dimensions per image are 8000x8000 px. If you submit more than 20 images in one API request,
# this limit is reduced to 2000x2000 px."), answered "messages.7.content.2.image.source.base64.data:
# At least one of the image dimensions exceed max allowed size: 8000 pixels" (claude-code #5147,
# #4778) and "... exceed max allowed size for many-image requests: 2000 pixels" (claude-code
# #49537, #52220, with request ids). Read from the file's header (``image_size``).
SIDE_MAX = 8000
MANY_IMAGES = 20
MANY_SIDE_MAX = 2000
MOST_IMAGES = 100  # a request's images on a model of a 200k-token window, or of one not known
MOST_IMAGES_LONG = 600  # on a model of a larger window
SHORT_WINDOW = 200_000

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Seen:
    """An image as the plan reads it: ``chars`` of base64 (0 for one given by URL, which
    Anthropic fetches and judges itself), its ``sides`` when its header was read, and whether
    it is in what the client ``asked`` about now."""

    chars: int
    sides: tuple[int, int] | None
    asked: bool


@dataclass(frozen=True)
class Over:
    """Why an image cannot go: its ``chars`` over ``IMAGE_MAX`` (``sides`` None), or its
    ``sides`` over ``SIDE_MAX``, or over ``MANY_SIDE_MAX`` in a request of more than
    ``MANY_IMAGES`` images (``many``), or one too many of the ``most`` a request takes (``count``)."""

    chars: int
    sides: tuple[int, int] | None = None
    many: bool = False
    count: bool = False
    most: int = MOST_IMAGES


def most_images(window: int | None) -> int:
    """The most images a request takes on a model of a ``window``-token context window (None:
    not known, held to the lower cap: a note too many costs less than a session refused)."""
    return MOST_IMAGES_LONG if window is not None and window > SHORT_WINDOW else MOST_IMAGES


def plan(images: Mapping[K, Seen], most: int = MOST_IMAGES) -> dict[K, Over]:
    """The images of ``images`` (in the request's order, each under where it is) that are not
    sent as they are, and why: a note when it is earlier, a refusal when it is asked about;
    ``most``: the images the request may hold (``most_images``)."""
    over: dict[K, Over] = {}
    for at, image in images.items():
        if image.chars > IMAGE_MAX:
            over[at] = Over(image.chars)
        elif image.sides is not None and max(image.sides) > SIDE_MAX:
            over[at] = Over(image.chars, image.sides)
    sent = len(images) - len(over)
    wide = [at for at, image in images.items()
            if at not in over and image.sides is not None and max(image.sides) > MANY_SIDE_MAX]  # fmt: skip
    for at in wide:
        if sent <= MANY_IMAGES:
            break
        if not images[at].asked:  # the oldest first: ``images`` is in the request's order
            over[at] = Over(images[at].chars, images[at].sides, many=True)
            sent -= 1
    if sent > MANY_IMAGES:
        # Every earlier one over 2000 pixels is a note, and still too many: those asked about
        # now cannot go at their size.
        over |= {at: Over(images[at].chars, images[at].sides, many=True) for at in wide if at not in over}
    for at, image in images.items():
        if sent <= most:
            break
        if at not in over and not image.asked:
            over[at] = Over(image.chars, image.sides, count=True, most=most)
            sent -= 1
    return over
