"""Which way a verification call's columns are projected on a CPU (``column_schedule``): chunk by
chunk until every row has rejected, or all at once, priced from the timings and the acceptance seen."""
import pytest

from fairseq_plugins.decoding.column_schedule import OUTLIER, TRUST, ColumnSchedule, chunks


def test_the_chunks_double_from_two_columns_and_stop_at_the_call_width():
    assert list(chunks(11)) == [(0, 2), (2, 4), (4, 8), (8, 11)]
    assert list(chunks(3)) == [(0, 2), (2, 3)]
    assert list(chunks(16)) == [(0, 2), (2, 4), (4, 8), (8, 16)]
    assert list(chunks(2)) == [(0, 2)] and list(chunks(1)) == [(0, 1)]


def _timed(schedule, rows, whole, chunk):
    for _ in range(TRUST):
        for m, s in whole.items():
            schedule.timed_whole(rows, m, s)
        for cols, s in chunk.items():
            schedule.timed_chunk(rows, cols, s)


def _accepting(schedule, rows, drafted, longest, calls=200):
    for _ in range(calls):
        schedule.accepted(rows, drafted, longest)


def test_an_unknown_cost_is_timed_first_all_at_once_then_in_chunks():
    s = ColumnSchedule()
    for _ in range(TRUST):
        assert not s.chunked(1, 11)  # C_all(11) unknown: score all at once (and time it)
        s.timed_whole(1, 11, 1e-3)
    assert s.chunked(1, 11)  # the chunks' costs unknown: score in chunks (and time them)
    assert s.price(1, 11) == (None, pytest.approx(1e-3))
    assert not s.chunked(1, 2)  # one chunk: nothing to choose


def test_packed_kernel_costs_at_base_size_score_all_at_once_unless_drafts_are_rejected_early():
    """oneDNN's cold timings at d=512 onto 8K ids (ms): 2 rows 0.69, 4 rows 1.26, 11 rows 1.60.  With
    3-4 tokens accepted, chunks of 2 + 2 + 4 cost 2.64 where all 11 cost 1.60; when the second column
    rejects, two chunks (1.38) are cheaper."""
    s = ColumnSchedule()
    _timed(s, 1, {11: 1.60}, {2: 0.69, 4: 1.26, 3: 1.10})
    _accepting(s, 1, drafted=10, longest=4)
    assert not s.chunked(1, 11)
    assert s.price(1, 11)[0] == pytest.approx(0.69 + 0.69 + 1.26, rel=1e-3)
    _accepting(s, 1, drafted=10, longest=2)
    assert s.chunked(1, 11)
    assert s.price(1, 11)[0] == pytest.approx(0.69 + 0.69, rel=1e-3)


def test_a_cost_per_row_scores_in_chunks_whenever_some_column_is_left_unscored():
    """MKL's GEMM on few rows: about one row's product per row (and each chunk's own small operations)."""
    s = ColumnSchedule()
    _timed(s, 1, {11: 11.2}, {2: 2.2, 4: 4.2, 3: 3.2})
    _accepting(s, 1, drafted=10, longest=5)
    assert s.chunked(1, 11)  # 8 columns scored of 11: 8.6 against 11.2
    _accepting(s, 1, drafted=10, longest=10)
    assert not s.chunked(1, 11)  # every column, in four products: 11.8


def test_a_threshold_counts_only_the_calls_whose_draft_reached_it():
    """Accepting >= 4 depends on the first 4 draft tokens only: a call of 3 says nothing about it."""
    s = ColumnSchedule()
    _timed(s, 1, {11: 1.60}, {2: 0.69, 4: 1.26, 3: 1.10})
    _accepting(s, 1, drafted=10, longest=1)  # P(>= 2) = P(>= 4) = P(>= 8) = 0
    _accepting(s, 1, drafted=3, longest=3)   # full acceptance of short drafts: P(>= 2) -> 1 only
    assert s.price(1, 11)[0] == pytest.approx(0.69 + 0.69, rel=1e-3)


def test_batch_sizes_are_priced_apart():
    """A chunk of a 32-row batch projects 32x the rows: batch 1's costs and acceptance do not price it."""
    s = ColumnSchedule()
    _timed(s, 1, {11: 1.60}, {2: 0.69, 4: 1.26, 3: 1.10})
    assert s.price(1, 11)[1] is not None
    assert s.price(32, 11) == (None, None) and not s.chunked(32, 11)


def test_one_timing_taken_while_the_core_was_taken_moves_a_known_cost_by_little():
    s = ColumnSchedule()
    _timed(s, 1, {11: 1.0}, {})
    s.timed_whole(1, 11, 1000.0)  # counted as OUTLIER x the cost so far, with the weight of the 4th timing
    assert s.price(1, 11)[1] == pytest.approx(1.0 + (OUTLIER - 1.0) / (TRUST + 1))
