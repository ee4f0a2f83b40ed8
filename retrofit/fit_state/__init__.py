"""Fit states of both estimators (``save_fit_state``, ``load_from_fit_state``), as data only.

:mod:`retrofit.fit_state.archive` writes and reads the file,
:mod:`retrofit.fit_state.tables` the training inputs in it and
:mod:`retrofit.fit_state.model_paths` the ``model_path``.
"""
