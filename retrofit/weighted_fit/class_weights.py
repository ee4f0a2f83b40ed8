"""A classifier's ``class_weight`` as row weights, multiplied into ``sample_weight``.

scikit-learn's semantics: ``class_weight`` (None, ``"balanced"`` or a dict
``{label: weight}``, labels not named weighing 1) gives each row its class's
weight, which multiplies its ``sample_weight``. ``"balanced"`` weighs class
``c`` by ``n / (n_classes * n_c)``, counted, as scikit-learn's
``LogisticRegression`` counts them, with the sample weights
(``sklearn.utils.class_weight.compute_class_weight(..., sample_weight=)``):
so the weights stay frequencies (integer sample weights are the rows
repeated, balanced or not), and without ``sample_weight`` the rows get
exactly ``compute_sample_weight("balanced", y)``. Rows of weight 0 are
removal and are left out of the counts, and so are their classes.

Shape letters: N rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils.class_weight import compute_class_weight

from retrofit.errors import InvalidSampleWeightError
from retrofit.validation import check_sample_weight

__all__ = ["class_row_weights"]


def class_row_weights(class_weight: Any, y: Any, w_N: np.ndarray | None) -> np.ndarray | None:
    """Row weights of ``class_weight`` times the checked sample weights ``w_N`` (or None).

    Args:
        class_weight: None, ``"balanced"`` or a dict ``{label: weight}``.
        y: The class labels, ``(N,)``.
        w_N: The checked sample weights (:func:`retrofit.validation.check_sample_weight`) or None.

    Returns:
        ``w_N`` unchanged for ``class_weight=None``; otherwise a new ``(N,)``
        float64 array, finite and ``>= 0``, not all 0.

    Raises:
        InvalidSampleWeightError: An unknown ``class_weight``, a label of the dict
            that is no class of ``y``, a negative or non-finite class weight, or
            class weights that zero every row.
    """
    if class_weight is None:
        return w_N
    if not (class_weight == "balanced" or isinstance(class_weight, dict)):
        raise InvalidSampleWeightError(
            f"class_weight must be None, 'balanced' or a dict {{label: weight}}, got "
            f"{class_weight!r:.80}"
        )
    labels_N = np.asarray(y).reshape(-1)
    counted_N = np.ones(len(labels_N)) if w_N is None else w_N
    held_N = counted_N > 0  # weight 0 is removal: no class count, no class
    try:
        classes = np.unique(labels_N[held_N])
    except TypeError as err:  # labels of kinds that do not compare (text beside NaN)
        raise InvalidSampleWeightError(
            f"class_weight: the labels of y do not sort ({err}); give labels of one kind"
        ) from None
    if isinstance(class_weight, dict):
        known = set(np.unique(labels_N).tolist())
        unknown = [label for label in class_weight if label not in known]
        if unknown:
            raise InvalidSampleWeightError(
                f"class_weight names labels that are no class of y: {unknown[:5]!r}"
            )
        class_weight = {c: v for c, v in class_weight.items() if c in set(classes.tolist())}
    try:
        per_class = compute_class_weight(
            class_weight, classes=classes, y=labels_N[held_N], sample_weight=counted_N[held_N]
        )
    except ValueError as err:
        raise InvalidSampleWeightError(f"class_weight: {err}") from None
    factor_N = np.zeros(len(labels_N))
    factor_N[held_N] = per_class[np.searchsorted(classes, labels_N[held_N])]
    return check_sample_weight(counted_N * factor_N, len(labels_N), where="class_weight")
