"""What a user imports from ``bsb`` and the small habits: nested overrides, exact t-intervals, type information."""

from pathlib import Path

import pytest

import bsb


def test_the_public_api_is_importable_from_bsb():
    from bsb import ChainInput, HFBackend, SelectorConfig, TrainConfig, kernels, make_selector, make_task

    assert make_selector("midpoint", SelectorConfig()).name == "midpoint"
    assert ChainInput([1], [2, 3]).response == [2, 3] and callable(kernels.probe_js)
    assert make_task("walk").name == "walk" and TrainConfig().selector == "probe_js" and HFBackend.capabilities.white_box
    assert set(bsb.__all__) <= set(dir(bsb))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        bsb.nope  # noqa: B018


def test_the_package_ships_its_type_information():
    assert (Path(bsb.__file__).parent / "py.typed").exists()
    assert '"bsb" = ["py.typed"]' in (Path(bsb.__file__).parents[1] / "pyproject.toml").read_text()


def test_overrides_nest_at_any_depth_without_touching_the_base():
    from bsb.train.config import parse_overrides

    base = {"task_options": {"ops": [1], "judge": {"model": "a"}}}
    out = parse_overrides(["task_options.judge.model=b", "task_options.judge.retry.max=3", "steps=2"], base)
    assert out == {"task_options": {"ops": [1], "judge": {"model": "b", "retry": {"max": 3}}}, "steps": 2}
    assert base == {"task_options": {"ops": [1], "judge": {"model": "a"}}}
    with pytest.raises(ValueError, match="task_options.ops is not a mapping"):
        parse_overrides(["task_options.ops.x=1"], base)
    with pytest.raises(ValueError, match="an empty name"):
        parse_overrides(["task_options..x=1"])


@pytest.mark.parametrize("n,t", [(2, 12.706), (5, 2.776), (11, 2.228), (31, 2.042), (121, 1.980)])
def test_the_sweeps_t_interval_uses_the_exact_quantile(n, t):
    import math

    import numpy as np

    from bsb.eval.sweep_summary import half_width

    xs = np.arange(n, dtype=float)
    assert half_width(xs) == pytest.approx(t * xs.std(ddof=1) / math.sqrt(n), rel=2e-4)  # t_{0.975, n-1}, tabled
    assert math.isnan(half_width([1.0]))
