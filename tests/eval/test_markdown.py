"""The one Markdown table renderer (eval.markdown.markdown_table)."""

from __future__ import annotations

import pytest

from eval.markdown import markdown_table


def test_a_table_renders_header_separator_and_rows_with_one_space_around_each_cell():
    lines = markdown_table(("name", "n"), [("a", 1), ["b", 2.5]])
    assert lines == ["| name | n |", "|---|---|", "| a | 1 |", "| b | 2.5 |"]


def test_alignment_letters_write_right_and_centre_separators_and_left_as_plain_dashes():
    lines = markdown_table(("a", "b", "c"), [], align="lrc")
    assert lines == ["| a | b | c |", "|---|---:|:---:|"]
    assert markdown_table(("a", "b"), [], align=["r", "l"])[1] == "|---:|---|"


def test_a_pipe_in_a_cell_or_a_header_is_escaped_so_the_row_keeps_its_columns():
    lines = markdown_table(("x|y", "z"), [("`a | b`", "c")])
    assert lines[0] == "| x\\|y | z |"
    assert lines[2] == "| `a \\| b` | c |"


def test_a_line_break_in_a_cell_becomes_a_space():
    assert markdown_table(("err",), [("Traceback\nValueError: boom",)])[2] == (
        "| Traceback ValueError: boom |"
    )


def test_an_empty_cell_is_written_as_one_space():
    assert markdown_table(("a", "b", "c"), [("x", "", "")])[2] == "| x | | |"


def test_cells_are_written_with_str_so_none_bools_and_tuples_read_as_python_prints_them():
    row = markdown_table(("a", "b", "c", "d"), [(None, True, (1, 2), 0.1)])[2]
    assert row == "| None | True | (1, 2) | 0.1 |"


def test_a_row_with_the_wrong_number_of_cells_raises_value_error():
    with pytest.raises(ValueError, match="row 1 has 3 cells for 2 columns"):
        markdown_table(("a", "b"), [("x", "y"), ("x", "y", "z")])
    with pytest.raises(ValueError, match="row 0 has 1 cells"):
        markdown_table(("a", "b"), [("x",)])


def test_an_alignment_of_the_wrong_length_or_with_an_unknown_letter_raises_value_error():
    with pytest.raises(ValueError, match="align has 1 entries for 2 columns"):
        markdown_table(("a", "b"), [], align="r")
    with pytest.raises(ValueError, match="unknown alignment"):
        markdown_table(("a", "b"), [], align="rx")


def test_rows_may_be_a_generator_consumed_once():
    lines = markdown_table(("i",), ([i] for i in range(3)))
    assert lines[2:] == ["| 0 |", "| 1 |", "| 2 |"]
