"""The summary's figures are plain decimals a user reads at a glance, never "9.7e-05"."""

from __future__ import annotations

import pytest

from pipeline.engine.cost import _three_figures


@pytest.mark.parametrize(
    ("value", "shown"),
    [(9.7e-05, "0.0000970"), (0.000358, "0.000358"), (0.09996, "0.100"), (0.5, "0.500"), (4.7, "4.70"), (205, "205")],
)
def test_a_small_figure_is_shown_to_three_figures_in_fixed_point(value, shown):
    assert _three_figures(value) == shown
