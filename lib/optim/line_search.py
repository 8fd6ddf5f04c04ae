"""Strong-Wolfe line search for LBFGS: bracketing, then zoom by safeguarded cubic steps.

The algorithm of Nocedal & Wright, Numerical Optimization (2nd ed.), algorithms 3.5 (bracket)
and 3.6 (zoom), with the minimizer of the cubic through two points' values and slopes
(eq. 3.59) as the trial step, clamped to a safeguard interval. The constants and the
safeguards are those torch.optim.LBFGS documents and uses, so that both libraries try the
same steps and LBFGS follows the same iterates.

The search runs along a fixed direction d from a fixed point: `evaluate(t)` returns the loss
(a Python float) and the flat gradient (a rill tensor) at x + t * d. Slopes along d are
Python floats, the step lengths too; the vectors stay rill tensors on the parameters' device.
"""
from __future__ import annotations

import math

from ..ops.linalg import matmul


def dot(x, y) -> float:
    """The inner product of two flat vectors, as a Python float."""
    return float(matmul(x, y))


def cubic_minimizer(x1, f1, g1, x2, f2, g2, bounds=None) -> float:
    """The minimizer of the cubic with values f1, f2 and slopes g1, g2 at x1, x2, clamped to
    `bounds` (default: the interval between x1 and x2); the interval's midpoint where the
    cubic has no minimum (a negative discriminant)."""
    low, high = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    # d1 and d2 of Nocedal & Wright eq. 3.59; the formula is written from the left point.
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    discriminant = d1 ** 2 - g1 * g2
    if discriminant < 0:
        return (low + high) / 2
    d2 = math.sqrt(discriminant)
    if x1 <= x2:
        x = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        x = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(x, low), high)


def strong_wolfe(evaluate, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9,
                 max_ls=25):
    """A step length t along d meeting the strong Wolfe conditions
    f(t) <= f + c1 * t * gtd and |f'(t)| <= c2 * |gtd|, starting from the trial t.

    f, g and gtd are the loss, flat gradient and slope along d at t = 0. Returns
    (loss, flat gradient, t, evaluations): the best point found when `max_ls` evaluations
    or a bracket narrower than `tolerance_change` (in the largest coordinate of t * d) end
    the search before the conditions hold.
    """
    d_norm = float(d.abs().max())
    f_new, g_new = evaluate(t)
    evals, ls_iter = 1, 0
    gtd_new = dot(g_new, d)
    t_prev, f_prev, g_prev, gtd_prev = 0.0, f, g, gtd
    done = False

    # Bracketing: grow t until an interval is known to hold an acceptable step.
    bracket = None
    while ls_iter < max_ls:
        # (Written as "above the line", not "not below it", so that a NaN loss does not
        # count as too far.)
        if f_new > f + c1 * t * gtd or (ls_iter > 1 and f_new >= f_prev):
            bracket = [[t_prev, f_prev, g_prev, gtd_prev], [t, f_new, g_new, gtd_new]]
            break
        if abs(gtd_new) <= -c2 * gtd:  # t itself is acceptable
            bracket = [[t, f_new, g_new, gtd_new]]
            done = True
            break
        if gtd_new >= 0:  # the slope turned: a minimum lies between t_prev and t
            bracket = [[t_prev, f_prev, g_prev, gtd_prev], [t, f_new, g_new, gtd_new]]
            break
        # Still descending: extrapolate, at least 1% past t and at most 10 times t.
        low, high = t + 0.01 * (t - t_prev), t * 10
        t_next = cubic_minimizer(t_prev, f_prev, gtd_prev, t, f_new, gtd_new, (low, high))
        t_prev, f_prev, g_prev, gtd_prev = t, f_new, g_new, gtd_new
        t = t_next
        f_new, g_new = evaluate(t)
        evals += 1
        gtd_new = dot(g_new, d)
        ls_iter += 1
    if ls_iter == max_ls:  # out of evaluations while still descending: zoom will not run
        bracket = [[0.0, f, g, gtd], [t, f_new, g_new, gtd_new]]

    # Zoom: shrink the bracket, keeping at `low` its end with the lower loss.
    low, high = _ends(bracket)
    insufficient_progress = False
    while not done and ls_iter < max_ls:
        (a, fa, _, ga), (b, fb, _, gb) = bracket
        if abs(b - a) * d_norm < tolerance_change:
            break
        t = cubic_minimizer(a, fa, ga, b, fb, gb)
        # A trial too near an end of the bracket makes little progress; after one such
        # trial (or one at or past an end), move it to 10% of the width inside instead.
        lo, hi = min(a, b), max(a, b)
        margin = 0.1 * (hi - lo)
        if min(hi - t, t - lo) < margin:
            if insufficient_progress or t >= hi or t <= lo:
                t = hi - margin if abs(t - hi) < abs(t - lo) else lo + margin
                insufficient_progress = False
            else:
                insufficient_progress = True
        else:
            insufficient_progress = False
        f_new, g_new = evaluate(t)
        evals += 1
        gtd_new = dot(g_new, d)
        ls_iter += 1
        if f_new > f + c1 * t * gtd or f_new >= bracket[low][1]:
            bracket[high] = [t, f_new, g_new, gtd_new]  # t is too far: it closes the bracket
            low, high = _ends(bracket)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True
            elif gtd_new * (bracket[high][0] - bracket[low][0]) >= 0:
                bracket[high] = bracket[low]  # the minimum lies between t and the low end
            bracket[low] = [t, f_new, g_new, gtd_new]
    t, f_new, g_new, _ = bracket[low]
    return f_new, g_new, t, evals


def _ends(bracket):
    """(index of the end with the lower loss, index of the other); one point is both."""
    if len(bracket) == 1:
        return 0, 0
    return (0, 1) if bracket[0][1] <= bracket[1][1] else (1, 0)
