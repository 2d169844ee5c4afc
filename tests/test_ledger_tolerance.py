"""The number-aware comparison behind the notebook regression and the results check."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ddcl_theory.ledger.report import below, wrap
from ddcl_theory.ledger.tolerance import (
    TIGHT,
    Tolerance,
    compare_text,
    numbers_agree,
    parse_declaration,
    count_allowance,
    largest_move,
    split_numbers,
)

TRAINING = Tolerance(abs=0.03, reason="training outcome")


def test_words_and_verdicts_compare_exactly():
    assert compare_text("D6 refuted", "D6 refuted") == []
    assert compare_text("D6 refuted", "D6 confirmed") != []
    assert compare_text("D6 refuted", "D6 refuted", TRAINING) == []
    assert compare_text("verdict: qualified", "verdict: not reproduced", TRAINING) != []


def test_an_off_by_one_count_fails_even_under_a_declared_tolerance_when_it_exceeds_it():
    assert compare_text("10 of 12 seeds", "11 of 12 seeds") != []
    assert compare_text("n = 147 instances", "n = 146 instances") != []


def test_integers_compare_exactly_by_default_and_with_the_declared_tolerance_otherwise():
    assert not numbers_agree("10", "11")
    assert numbers_agree("10", "11", Tolerance(abs=1, reason="count of a training outcome"))


def test_a_count_of_runs_moves_within_count_abs_and_decimals_ignore_it():
    counts = Tolerance(abs=0.05, count_abs=2, reason="9 runs meeting a plateau rule")
    text = "DDCL runs finished: 9 of 9 (validation plateau 1, past the optimum 8); acc 0.362"
    assert compare_text(text, text.replace("plateau 1", "plateau 0").replace("8)", "9)"),
                        Tolerance(abs=0.05, reason="accuracies")) != []
    assert compare_text(text, text.replace("plateau 1", "plateau 0").replace("8)", "9)"),
                        counts) == []
    assert compare_text(text, text.replace("plateau 1", "plateau 4"), counts) != []
    assert compare_text(text, text.replace("0.362", "0.462"), counts) != []
    assert numbers_agree("0.30", "0.32", Tolerance(count_abs=2, reason="counts")) is False


def test_count_abs_is_read_from_a_declaration_and_needs_a_reason():
    tol = parse_declaration("# nbval-tolerance: abs=0.05 count_abs=2 -- counts of 9 runs\n")
    assert (tol.abs, tol.rel, tol.count_abs) == (0.05, 0.0, 2.0)
    assert tol.describe() == "abs=0.05 count_abs=2"
    assert parse_declaration("# nbval-tolerance: abs=0.05 -- was rel=0.3 before\n").rel == 0
    with pytest.raises(ValueError, match="reason"):
        Tolerance(count_abs=1)
    with pytest.raises(ValueError, match="count_abs"):
        Tolerance(count_abs=-1, reason="negative")


def test_seeds_needed_move_within_count_rel_while_decimals_stay_within_abs():
    tol = parse_declaration("# nbval-tolerance: abs=0.05 count_abs=3 count_rel=1 -- seeds a "
                            "power analysis asks, from a variance of 3 seeds\n")
    assert (tol.count_abs, tol.count_rel) == (3.0, 1.0)
    assert tol.describe() == "abs=0.05 count_abs=3 count_rel=1"
    row = "| > 0 | 0.02 | -0.0776 [-0.15, -0.00746] | 3 / 57 | 0.0402 | inconclusive |"
    moved = "| > 0 | 0.02 | -0.0801 [-0.16, -0.0101] | 3 / 36 | 0.0231 | inconclusive |"
    assert compare_text(row, moved, tol) == []
    assert compare_text(row, moved, Tolerance(abs=0.05, count_abs=3, reason="r")) != []
    assert compare_text(row, moved.replace("3 / 36", "3 / 130"), tol) != []  # beyond 3 + 57
    assert compare_text(row, moved.replace("-0.0801", "+0.0801"), tol) != []  # a sign flip
    assert numbers_agree("0.30", "0.45", Tolerance(count_rel=1, reason="counts")) is False
    assert Tolerance(count_rel=1, reason="r").to_dict()["count_rel"] == 1
    assert "count_rel" not in Tolerance(abs=1, reason="r").to_dict()
    assert Tolerance.from_dict(tol.to_dict()) == tol
    with pytest.raises(ValueError, match="count_rel"):
        Tolerance(count_rel=-1, reason="negative")


def test_a_tolerance_without_count_abs_serialises_as_before_and_round_trips():
    old = Tolerance(abs=0.03, reason="r")
    assert old.to_dict() == {"abs": 0.03, "rel": 0.0, "reason": "r"}
    new = Tolerance(abs=0.03, reason="r", count_abs=2)
    assert Tolerance.from_dict(new.to_dict()) == new
    assert Tolerance.from_dict(old.to_dict()) == old


def test_count_allowance_is_two_binomial_sds_at_the_smoothed_rate():
    assert count_allowance(0, 9) == 2          # p = 1/11: sd 0.86
    assert count_allowance(17, 20) == 4        # p = 18/22: sd 1.72
    assert count_allowance(0, 5) == 2
    assert count_allowance(3, 3) == 2
    assert count_allowance(0, 9, sds=1) == 1
    import numpy as np
    assert count_allowance(np.int64(0), np.int64(9)) == 2      # sums of numpy booleans
    with pytest.raises(ValueError, match="k:"):
        count_allowance(10, 9)
    with pytest.raises(ValueError, match="n:"):
        count_allowance(0, 0)


@given(st.integers(1, 400), st.data())
def test_count_allowance_never_exceeds_the_worst_case_binomial_spread(n, data):
    k = data.draw(st.integers(0, n))
    assert 1 <= count_allowance(k, n) <= int(2 * (n ** 0.5) / 2) + 1


def test_largest_move_measures_a_move_against_its_allowance():
    tol = Tolerance(abs=0.05, reason="accuracies")
    assert largest_move("acc 0.300", "acc 0.300", tol) == (0.0, "")
    used, where = largest_move("acc 0.300, n 5", "acc 0.330, n 5", tol)
    assert abs(used - 0.03 / 0.051) < 1e-9 and "0.300 -> 0.330" in where
    assert largest_move("acc 0.300", "acc 0.301", tol)[0] == 0.0     # a last-digit flip
    assert largest_move("plateau 1", "plateau 0", tol)[0] > 1          # a count, no allowance
    assert largest_move("acc 0.3", "loss 0.3", tol)[1] == "the words differ"


def test_a_rounding_flip_in_the_last_printed_digit_passes_the_tight_default():
    assert compare_text("ratio 0.385", "ratio 0.386") == []
    assert compare_text("ratio 0.18", "ratio 0.179") == []     # round(x, 3) dropped a zero
    assert compare_text("1.2e-03", "1.3e-03") == []


def test_a_move_of_two_units_fails_the_tight_default_and_passes_a_declared_tolerance():
    assert compare_text("acc 0.234", "acc 0.236") != []
    assert compare_text("acc 0.234", "acc 0.236", TRAINING) == []
    assert compare_text("acc 0.234", "acc 0.300", TRAINING) != []


def test_relative_tolerance_scales_with_the_golden_value():
    tol = Tolerance(rel=0.01, reason="relative")
    assert numbers_agree("1000", "1009", tol)
    assert not numbers_agree("1000", "1011", tol)


def test_digits_inside_identifiers_are_text_not_numbers():
    words, numbers = split_numbers("D13 cell-004 x2 eps=0.5")
    assert numbers == ["0.5"]
    assert compare_text("D13", "D14") != []


def test_number_count_changes_are_reported_as_text_differences():
    assert compare_text("a 1 b", "a 1 b 2") != []
    assert compare_text("a 1\nb", "a 1\nb\n2") != []


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), st.integers(1, 6))
def test_a_number_always_agrees_with_its_own_rounding(x, digits):
    assert numbers_agree(f"{x:.{digits}f}", f"{x:.{digits}f}")
    assert compare_text(f"v={x:.{digits}e}", f"v={x:.{digits}e}") == []


@given(st.floats(min_value=1e-3, max_value=1e3), st.floats(min_value=0.0, max_value=0.49))
def test_values_half_a_unit_apart_agree_at_their_printed_precision(x, frac):
    a, b = x, x + frac * 1e-3
    assert numbers_agree(f"{a:.3f}", f"{b:.3f}")


def test_parse_declaration_reads_abs_rel_and_reason():
    src = "x = 1\n# nbval-tolerance: abs=0.02 rel=0.1 -- test accuracy of a short training run\n"
    tol = parse_declaration(src)
    assert (tol.abs, tol.rel, tol.reason) == (0.02, 0.1, "test accuracy of a short training run")
    assert parse_declaration("print(1)") == TIGHT


def test_a_declaration_without_reason_or_values_is_an_error():
    with pytest.raises(ValueError, match="reason"):
        parse_declaration("# nbval-tolerance: abs=0.02")
    with pytest.raises(ValueError, match="abs="):
        parse_declaration("# nbval-tolerance: loose -- because")
    with pytest.raises(ValueError, match="abs"):
        Tolerance(abs=-1, reason="negative")


def test_below_prints_a_bound_for_rounding_noise_and_digits_otherwise():
    assert below(7.4e-32, 1e-25) == "< 1e-25"
    assert below(6.8e-32, 1e-25) == below(0.0, 1e-25)
    assert below(0.0553, 1e-25) == "0.0553"
    with pytest.raises(ValueError, match="bound"):
        below(1.0, 0.0)


def test_the_emulated_machine_switches_both_aten_and_mkl_kernels():
    from ddcl_theory.runtime.kernels import probe

    emulated = probe({"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"})
    assert emulated["aten"] == "DEFAULT"
    assert emulated["mkl_cnr"] == "COMPATIBLE"


def test_a_line_wrapped_elsewhere_is_the_same_text_but_other_words_are_not():
    golden = "soft usage 0.19 [0.04, 0.35] after epoch 1,\n  VectorQuantize 0.96"
    assert compare_text(golden, "soft usage 0.19 [0.04, 0.35] after\n  epoch 1, VectorQuantize 0.96") == []
    assert compare_text(golden, "soft usage 0.19 [0.04,  0.35] after epoch 1, VectorQuantize 0.96") == []
    assert compare_text(golden, "soft usage 0.19 [0.04, 0.35] after epoch 1, VQ 0.96") != []
    assert compare_text("after epoch", "afterepoch") != []          # a space is not nothing
    assert compare_text(golden, golden.replace("0.19", "0.29")) != []


@given(st.lists(st.sampled_from(["usage", "0.19", "-3.5e-02", "[0.04,", "tau", "=", "x" * 30]),
                min_size=1, max_size=60), st.integers(20, 100))
def test_wrapped_text_compares_equal_to_the_unwrapped_text(words, width):
    text = " ".join(words)
    wrapped = wrap(text, width)
    assert compare_text(text, wrapped) == []
    assert all(len(line) <= width for line in wrapped.splitlines()
               if " " in line.strip())               # only one unbreakable word may run past
