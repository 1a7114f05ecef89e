"""The paired median ratio of alternating benchmark runs, with a distribution-free interval.

One implementation for every bench script that judges "A vs B" from alternating pairs
(scripts/bench-direct-fixed.sh, scripts/bench-tls.sh): each pair gives a ratio A/B; the
figure is the median ratio, and its interval comes from the order statistics of the sorted
ratios — [r_k, r_(n+1-k)] holds the true median with probability ≥ 1 - 2·P(Binomial(n, ½) ≤
k-1), whatever the ratios' distribution (no normality assumed). k is the largest with that
tail ≤ 2.5%: with 9 pairs k = 2, coverage 96.1%; with 5 or fewer no such k exists and the
interval falls back to min–max, said as such. Standard library only.

    from paired import interval            # sys.path: scripts/lib
    med, lo, hi, cover = interval(ratios)  # cover None: too few pairs, [lo, hi] is min–max
"""

import math
import statistics


def coverage(n, k=1):
    """The probability that [r_k, r_(n+1-k)] of n sorted ratios holds their true median:
    1 - 2·P(Binomial(n, ½) ≤ k-1). For min–max (k = 1) 1 - 2^(1-n): 50% for two, 75% for
    three, 87.5% for four, 93.75% for five."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n


def interval(ratios, tail=0.025):
    """(median, lo, hi, coverage) of the paired ratios; coverage None when there are too
    few pairs for a two-sided interval with each tail ≤ `tail` (then lo–hi is min–max)."""
    r = sorted(ratios)
    n = len(r)
    if n == 0:
        raise ValueError("no pairs")
    k, cover = 1, None
    for j in range(1, n // 2 + 1):
        c = coverage(n, j)
        if c >= 1 - 2 * tail:
            k, cover = j, c
    return statistics.median(r), r[k - 1], r[n - k], cover


def describe(cover):
    """How to name the interval in a report line."""
    return f"~{cover * 100:.0f}% interval" if cover else "min–max (too few pairs for a 95% interval)"


def verdict_at_least(lo, hi, target):
    """Fail closed against a floor: "met" only when the whole interval is ≥ target,
    "not-met" when it is wholly below, else "not-shown"."""
    if lo >= target:
        return "met"
    if hi < target:
        return "not-met"
    return "not-shown"


if __name__ == "__main__":
    # Self-check of the coverage figures quoted in the scripts' help texts.
    for n, want in ((9, (2, 0.961)), (5, None)):
        m, lo, hi, c = interval(list(range(1, n + 1)))
        if want is None:
            assert c is None and (lo, hi) == (1, n), (n, lo, hi, c)
        else:
            assert lo == want[0] and round(c, 3) == want[1], (n, lo, hi, c)
    assert [coverage(n) for n in (2, 3, 5)] == [0.5, 0.75, 0.9375]
    assert abs(coverage(9, 2) - interval(list(range(9)))[3]) < 1e-12
    assert verdict_at_least(1.1, 1.3, 1.1) == "met"
    assert verdict_at_least(0.8, 1.09, 1.1) == "not-met"
    assert verdict_at_least(1.0, 1.2, 1.1) == "not-shown"
    print("paired.py: ok")
