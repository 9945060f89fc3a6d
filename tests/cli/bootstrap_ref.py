"""The reference for mltool's confidence intervals: a plain numpy bootstrap over groups (whole
groups drawn with replacement, numpy's percentiles), with scikit-learn / lifelines computing each
resample's metric. Its draws are numpy's, not mltool's, so the two intervals agree only within
the bootstrap's own noise: the checks allow 0.02, and draw more resamples here to keep the
reference's share of that small."""
import warnings

import numpy as np


def group_bootstrap(groups, statistic, resamples=4000, seed=0):
    """(low, high) of the 95% percentile interval of statistic(sample indices) over
    `resamples` resamples of the groups; resamples where it raises ValueError or is not finite
    are left out, as mltool leaves out its undefined ones."""
    order = list(dict.fromkeys(groups))
    members = {g: [] for g in order}
    for i, g in enumerate(groups):
        members[g].append(i)
    members = [np.array(members[g]) for g in order]
    rng = np.random.default_rng(seed)
    values = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(resamples):
            idx = np.concatenate([members[k] for k in rng.integers(0, len(members), len(members))])
            try:
                v = statistic(idx)
            except ValueError:
                continue
            if np.isfinite(v):
                values.append(v)
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def expect_interval(expect, got, name, reference, estimate, within=0.02):
    """got: run.json's / cv.json's intervals (of 1000 resamples); the metric's estimate equals
    `estimate` within 1e-9, at least 900 resamples gave a number, and its bounds are the
    reference's within `within`."""
    m = got["metrics"][name]
    expect(m["estimate"] is not None and abs(m["estimate"] - estimate) <= 1e-9,
           f"{name}: estimate {m['estimate']}, reference {estimate}")
    expect(m["low"] is not None and m["high"] is not None and m["low"] <= m["high"] and
           m["resamples"] >= 900, f"{name}: interval {m}")
    expect(abs(m["low"] - reference[0]) <= within and abs(m["high"] - reference[1]) <= within,
           f"{name}: interval [{m['low']:.4f}, {m['high']:.4f}], numpy's bootstrap "
           f"[{reference[0]:.4f}, {reference[1]:.4f}]")


MIN_GROUPS, MIN_OUTCOME_GROUPS = 10, 5  # docs/train.md#confidence-intervals


def expect_not_estimable(expect, got, name, estimate, why):
    """got: run.json's / cv.json's intervals from too few groups: the metric's estimate equals
    `estimate` within 1e-9, its bounds are null, no resample was drawn for it, and
    `not_estimable` is `why`; the intervals record the minimum."""
    m = got["metrics"][name]
    expect(got.get("minimum_groups") == MIN_GROUPS, f"minimum_groups {got.get('minimum_groups')}")
    expect(m["estimate"] is not None and abs(m["estimate"] - estimate) <= 1e-9,
           f"{name}: estimate {m['estimate']}, reference {estimate}")
    expect(m["low"] is None and m["high"] is None and m["resamples"] == 0 and
           m.get("not_estimable") == why, f"{name}: {m}, expected not estimable: {why!r}")


def too_few_groups(n, unit):
    """not_estimable's words for `n` groups of `unit` below the minimum."""
    return f"{n} {unit}{'' if n == 1 else 's'}: an interval needs at least {MIN_GROUPS}"
