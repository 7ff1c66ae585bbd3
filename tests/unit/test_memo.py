from gateway import memo


def test_a_name_is_read_once_and_a_long_one_every_time_and_the_kept_ones_are_bounded() -> None:
    reads: list[str] = []

    @memo.by_name
    def length(name: str) -> int:
        reads.append(name)
        return len(name)

    assert [length("claude-opus-5"), length("claude-opus-5")] == [13, 13]
    assert reads == ["claude-opus-5"]
    long = "m" * (memo.NAME_MAX + 1)
    assert [length(long), length(long)] == [memo.NAME_MAX + 1] * 2
    assert reads.count(long) == 2  # a name the client made long is not kept
    for i in range(memo.KEPT + 1):
        length(f"model-{i}")
    reads.clear()
    length("claude-opus-5")  # pushed out by KEPT newer names: read again
    assert reads == ["claude-opus-5"]
