"""Weight averaging: the LAWA mean of snapshots and its window."""

from __future__ import annotations

import pytest
import torch

from hosttraining.common.averaging import average_state_dicts, lawa_update


def test_lawa_average_is_the_mean_of_the_snapshots_and_keeps_the_last_window() -> None:
    gen = torch.Generator().manual_seed(0)
    snaps = [{"w": torch.randn(3, 4, generator=gen), "n": torch.tensor([i])} for i in range(3)]
    avg = average_state_dicts(snaps)
    expected = (snaps[0]["w"].double() + snaps[1]["w"].double() + snaps[2]["w"].double()) / 3
    assert torch.equal(avg["w"], expected.float()) and avg["w"].dtype == torch.float32
    assert torch.equal(avg["n"], torch.tensor([2]))  # integers: the newest snapshot's
    with pytest.raises(ValueError, match="different keys"):
        average_state_dicts([snaps[0], {"w": snaps[1]["w"]}])
    model = torch.nn.Linear(2, 2)
    window: list[dict[str, torch.Tensor]] = []
    for i in range(4):
        with torch.no_grad():
            model.weight.fill_(float(i))
        window = lawa_update(window, model, keep=2)
    assert [float(s["weight"][0, 0]) for s in window] == [2.0, 3.0]
