"""Row weights through a zero-padded ragged ICL batch (retrofit/batching/padding.py).

Ragged datasets, each embedded under its own integer row weights and run as
one padded ICL forward (its weights padded with zeros), give each dataset the
output of its own context with every row repeated that many times: every host
class, regressors through the stage's decoder and v3's and v3.5's classifiers
through ``decode_classes``, which reads the dataset's weighted train rows. Tiny
float64 hosts (tests/helpers/tiny_hosts.py), within ``MODEL_ULPS[float64]``
ulps (the padded batch runs its projections over other matrix heights).

Shape letters: R rows, B batch, C features, N train rows, M test rows.
"""

from __future__ import annotations

import pytest
import torch

import retrofit
from retrofit.batching.padding import key_rows, pad_weights, run_padded_icl
from retrofit.errors import BatchInputError
from retrofit.hosts.common.base import icl_stage_for
from tests.helpers.exactness import MODEL_ULPS, deviation_in_ulps
from tests.helpers.tiny_hosts import HOST_NAMES, build_task_host

# (train, test) per dataset, three features each (one feature-group count for v2).
RAGGED = [(9, 4), (14, 3), (6, 5)]
C, CLASSES = 3, 4


def _sets(task: str, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    sets = []
    for n, m in RAGGED:
        x = torch.randn(n + m, 1, C, generator=g, dtype=torch.float64)
        if task == "multiclass":
            y = (torch.arange(n) % 3).double()
        else:
            y = torch.randn(n, generator=g, dtype=torch.float64)
        w = torch.randint(0, 4, (n,), generator=g).double()
        w[:3] = torch.tensor([1.0, 1.0, 1.0])  # every class keeps a row
        w[3] = 2.0
        sets.append((x, y, w))
    return sets


def _repeated(x, y, w):
    rows = [j for j in range(len(y)) for _ in range(int(w[j]))]
    return torch.cat([x[rows], x[len(y) :]]), y[rows]


@pytest.mark.parametrize("task", ["regression", "multiclass"])
@pytest.mark.parametrize("name", HOST_NAMES)
def test_each_dataset_of_a_padded_batch_is_its_repeated_context(name, task):
    model = build_task_host(name, task, CLASSES)
    retrofit.patch(model, "full-o")
    stage = icl_stage_for(model)
    kwargs = {"task_type": task} if name == "tabpfn_v3_5" else {}
    classify = task == "multiclass" and hasattr(model, "icl_blocks")
    sets = _sets(task)
    with torch.inference_mode():
        carriers, keys = [], []
        for x, y, w in sets:
            with retrofit.row_weights(model, w):
                c = stage.embed(model, x, y, **kwargs)
            carriers.append(c)
            keys.append(key_rows(c, x.shape[0] - y.shape[0]))

        def decode(d, keys_BND, test_BMD):
            return stage.decode_classes(model, keys_BND, test_BMD, sets[d][1])

        outs = run_padded_icl(
            model,
            carriers,
            keys,
            weights=[w for _, _, w in sets],
            decode=decode if classify else None,
        )
        for out, (x, y, w) in zip(outs, sets, strict=True):
            ref = model(*_repeated(x, y, w), **kwargs)
            scale = ref.abs().max().item()
            assert deviation_in_ulps(out, ref, scale=scale) <= MODEL_ULPS[torch.float64]


def test_padded_weights_put_each_dataset_at_its_rows_and_zeros_in_the_padding():
    carriers = [torch.zeros(2, 7, 1), torch.zeros(1, 9, 1)]
    # v2.5-like: two learned rows before each dataset's train rows.
    w = pad_weights([torch.tensor([3.0, 0.5]), None], carriers, [2 + 2, 2 + 4])
    assert w.tolist() == [[3.0, 0.5, 0.0, 0.0], [3.0, 0.5, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
    assert pad_weights([None, None], carriers, [4, 6]) is None
    with pytest.raises(BatchInputError, match="do not fit"):
        pad_weights([torch.ones(3), torch.ones(3)], carriers, [4, 6])
