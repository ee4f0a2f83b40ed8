"""Two tables compared number by number: equal to the last bit, or listed with the difference."""

from __future__ import annotations

import math

from eval.paper.comparison import compare_cells


def test_equal_numbers_are_equal_to_the_last_bit_and_one_ulp_is_a_difference() -> None:
    mine = {("a/0", "RMSE Full-O"): 1.0, ("a/0", "delta Full-O"): None, ("m", "cases"): 18}
    same = compare_cells(mine, dict(mine))
    assert (same.compared, same.differing) == (3, ())
    theirs = {**mine, ("a/0", "RMSE Full-O"): math.nextafter(1.0, 2.0)}
    (difference,) = compare_cells(mine, theirs).differing
    assert (difference.row, difference.column) == ("a/0", "RMSE Full-O")
    assert difference.difference == -(2.0**-52) and difference.relative < 0


def test_differences_are_listed_a_missing_number_first_then_the_largest_relative() -> None:
    mine = {("a", "x"): 1.0, ("b", "x"): 100.0, ("c", "x"): None, ("d", "x"): 0.5, ("e", "x"): 2.0}
    theirs = {("a", "x"): 1.1, ("b", "x"): 101.0, ("c", "x"): 3.0, ("d", "x"): 0.0, ("f", "x"): 1}
    comparison = compare_cells(mine, theirs)
    assert [d.row for d in comparison.differing] == ["c", "a", "b", "d"]
    assert comparison.differing[1].relative == (1.0 - 1.1) / 1.1
    assert comparison.differing[3].relative is None  # from zero: the absolute difference
    assert comparison.differing[3].difference == 0.5
    assert comparison.compared == 4
    assert comparison.only_yours == (("e", "x"),) and comparison.only_committed == (("f", "x"),)


def test_two_nans_are_the_same_number_and_nan_against_a_number_is_not() -> None:
    nan = float("nan")
    assert compare_cells({("a", "x"): nan}, {("a", "x"): nan}).differing == ()
    assert len(compare_cells({("a", "x"): nan}, {("a", "x"): 1.0}).differing) == 1
