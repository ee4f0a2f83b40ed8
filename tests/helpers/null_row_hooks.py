"""Forward hooks that insert a zero row into a host's blocks and record the carriers.

``NullRow`` and ``FinalCarriers`` work on the ICL blocks of TabPFN v3 and v3.5
(carriers ``(B, R, E)``); ``NullRowAtBlockEntry`` and ``LastBlockOutput`` on the
per-cell blocks of the v2 family (carriers ``(B, R, C, E)``).

Shape letters: B batch, R rows, C columns, E embedding.
"""

from __future__ import annotations

import torch
from tabpfn.architectures.tabpfn_v3 import TabPFNV3

__all__ = ["FinalCarriers", "LastBlockOutput", "NullRow", "NullRowAtBlockEntry"]


class NullRow:
    """Inserts a zero row at ICL block 0's entry and removes it after the last block.

    Records the final carriers of every row (``final_BRE``) with the null row
    taken out, and the null row's own final carrier (``null_BE``).
    """

    def __init__(self, model: TabPFNV3, pos: int, *, as_train: bool, at_entry: bool = True):
        self.pos, self.as_train, self.at_entry = pos, as_train, at_entry
        blocks = model.icl_blocks
        self.handles = [
            block.register_forward_pre_hook(self._pre_hook(i), with_kwargs=True)
            for i, block in enumerate(blocks)
        ]
        self.handles.append(blocks[-1].register_forward_hook(self._remove))

    def _pre_hook(self, index):
        def hook(module, args, kwargs):
            x_BRE, n_train, *rest = args
            if index == 0 and self.at_entry:
                zero_B1E = x_BRE.new_zeros(x_BRE.shape[0], 1, x_BRE.shape[2])
                x_BRE = torch.cat([x_BRE[:, : self.pos], zero_B1E, x_BRE[:, self.pos :]], 1)
            if self.as_train and self.at_entry:
                n_train = n_train + 1
            return (x_BRE, n_train, *rest), kwargs

        return hook

    def _remove(self, module, args, output):
        x_BRE, kv = output
        self.null_BE = x_BRE[:, self.pos].clone()
        kept = torch.cat([x_BRE[:, : self.pos], x_BRE[:, self.pos + 1 :]], 1)
        self.final_BRE = kept.clone()
        return kept, kv

    def close(self):
        for h in self.handles:
            h.remove()


class FinalCarriers:
    """Records the carriers leaving the last ICL block."""

    def __init__(self, model):
        self.handle = model.icl_blocks[-1].register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        self.final_BRE = output[0].clone()

    def close(self):
        self.handle.remove()


class NullRowAtBlockEntry:
    """Inserts a zero row at block 0's entry (``pos`` counts the thinking rows), removes it
    after the last block; records the last block's output without it and the row itself."""

    def __init__(self, model, pos: int, *, as_train: bool):
        self.pos, self.as_train = pos, as_train
        self.handles = [
            block.register_forward_pre_hook(self._pre_hook(i))
            for i, block in enumerate(model.blocks)
        ]
        self.handles.append(model.blocks[-1].register_forward_hook(self._remove))

    def _pre_hook(self, index):
        def hook(module, args):
            container, sep, *rest = args
            x_BRCE = container.pop(0) if isinstance(container, list) else container
            if index == 0:
                zero = x_BRCE.new_zeros(x_BRCE.shape[0], 1, *x_BRCE.shape[2:])
                x_BRCE = torch.cat([x_BRCE[:, : self.pos], zero, x_BRCE[:, self.pos :]], 1)
            # Every block sees one more train row when the null row is one.
            return ([x_BRCE], sep + 1 if self.as_train else sep, *rest)

        return hook

    def _remove(self, module, args, output):
        x_BRCE, kv = output
        self.null = x_BRCE[:, self.pos].clone()
        kept = torch.cat([x_BRCE[:, : self.pos], x_BRCE[:, self.pos + 1 :]], 1)
        self.final = kept.clone()
        return kept, kv

    def close(self):
        for h in self.handles:
            h.remove()


class LastBlockOutput:
    def __init__(self, model):
        self.handle = model.blocks[-1].register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        self.final = output[0].clone()

    def close(self):
        self.handle.remove()
