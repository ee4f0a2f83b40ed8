"""The lab's room: tests of ``lab`` and of what only the lab's extra or a device runs.

README's test command does not collect it; ``.ci/run`` runs it after installing
the ``lab`` extra (with ``tests/hosttraining`` and tabpfn's own suite).
"""
