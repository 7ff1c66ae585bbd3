"""The plan of which images of a request cannot go to Anthropic as they are (``image_limits``):
the vision guide's "General limits" (8000 pixels a side, 2000 in a request of more than 20
images) and the 5 MB of base64 an image may be, applied to what is sent, not to what came."""

from __future__ import annotations

from gateway.translate.image_limits import IMAGE_MAX, Over, Seen, most_images, plan

RETINA = (2880, 1800)  # a MacBook's screenshot
SMALL = (500, 500)


def earlier(sides: tuple[int, int] | None = RETINA, chars: int = 1000) -> Seen:
    return Seen(chars, sides, asked=False)


def now(sides: tuple[int, int] = RETINA, chars: int = 1000) -> Seen:
    return Seen(chars, sides, asked=True)


def test_a_21st_screenshot_leaves_out_the_oldest_and_is_sent() -> None:
    """20 answered turns each with a Retina screenshot, then a 21st: the oldest becomes a note,
    20 go, the new one among them (it was refused, the 20 earlier all left out)."""
    images = {k: earlier() for k in range(20)} | {20: now()}
    assert plan(images) == {0: Over(1000, RETINA, many=True)}


def test_a_small_21st_image_leaves_out_only_the_oldest_screenshot() -> None:
    images = {k: earlier() for k in range(20)} | {20: now(SMALL)}
    assert plan(images) == {0: Over(1000, RETINA, many=True)}


def test_only_as_many_are_left_out_as_bring_the_count_to_20_oldest_first() -> None:
    """22 images, three earlier screenshots: the two oldest are left out, the third is sent."""
    images = {0: earlier(SMALL), 1: earlier(), 2: earlier(SMALL), 3: earlier()}
    images |= {k: earlier(SMALL) for k in range(4, 19)} | {19: earlier(), 20: now(), 21: now(SMALL)}
    assert plan(images) == {1: Over(1000, RETINA, many=True), 3: Over(1000, RETINA, many=True)}


def test_20_images_or_fewer_keep_the_8000_pixel_limit() -> None:
    assert plan({k: earlier() for k in range(19)} | {19: now()}) == {}


def test_one_asked_about_is_refused_when_even_every_earlier_one_left_out_leaves_too_many() -> None:
    """Earlier small images are not left out to make room: they are under every limit."""
    images = {0: earlier()} | {k: earlier(SMALL) for k in range(1, 20)} | {20: now(SMALL), 21: now(), 22: now()}
    assert plan(images) == {0: Over(1000, RETINA, many=True), 21: Over(1000, RETINA, many=True),
                            22: Over(1000, RETINA, many=True)}  # fmt: skip


def test_an_image_over_the_absolute_limits_is_left_out_first_and_not_counted() -> None:
    """Over 5 MB or 8000 pixels, an earlier image is a note whatever the count, and a note is no
    image: 19 small ones, one of 6 MB and a screenshot asked about now are 20 images sent."""
    big = earlier(SMALL, chars=IMAGE_MAX + 1)
    images = {k: earlier(SMALL) for k in range(19)} | {19: big, 20: now()}
    assert plan(images) == {19: Over(IMAGE_MAX + 1)}
    wide = {k: earlier(SMALL) for k in range(19)} | {19: earlier((8001, 2)), 20: now()}
    assert plan(wide) == {19: Over(1000, (8001, 2))}  # the 8000 limit named, not the 2000 one


def test_an_image_asked_about_over_the_absolute_limits_is_over_them_whatever_the_count() -> None:
    assert plan({0: now((8001, 2)), 1: now(chars=IMAGE_MAX + 1)}) == {
        0: Over(1000, (8001, 2)), 1: Over(IMAGE_MAX + 1)}  # fmt: skip


def test_an_image_whose_sides_are_not_known_counts_and_is_never_left_out() -> None:
    """One given by URL (Anthropic fetches it) or whose header is not read: Anthropic judges it."""
    images = {k: earlier(None) for k in range(20)} | {20: now()}
    assert plan(images) == {20: Over(1000, RETINA, many=True)}


def test_over_100_images_the_oldest_earlier_ones_are_left_out_whatever_their_size() -> None:
    """A session of small screenshots: 103 images failed every later turn ("Too much media: 0
    document pages + 103 images > 100", claude-code #3397). The oldest earlier go first, as many
    as bring the count to 100; one asked about now is never left out for the count."""
    images = {k: earlier(SMALL) for k in range(102)} | {102: now(SMALL)}
    assert plan(images) == {k: Over(1000, SMALL, count=True) for k in range(3)}
    asked = {k: now(SMALL) for k in range(101)}
    assert plan(asked) == {}


def test_the_count_is_taken_after_the_other_limits_left_theirs_out() -> None:
    images = {0: earlier(chars=IMAGE_MAX + 1)} | {k: earlier(SMALL) for k in range(1, 101)} | {101: now(SMALL)}
    assert plan(images) == {0: Over(IMAGE_MAX + 1), 1: Over(1000, SMALL, count=True)}


def test_a_model_of_a_window_over_200k_takes_600_images_one_of_200k_or_unknown_100() -> None:
    """The vision guide: "up to 600 for API requests (100 for models with a 200k-token context
    window)"; a window not known is held to 100."""
    assert (most_images(1_000_000), most_images(200_000), most_images(None)) == (600, 100, 100)
    earlier = {k: Seen(100, (10, 10), asked=False) for k in range(601)}
    assert plan(earlier, 600) == {0: Over(100, (10, 10), count=True, most=600)}
    assert len(plan(earlier)) == 501
