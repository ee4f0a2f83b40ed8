"""The library's commands: ``predict``, ``predict-batch``, ``patch``, and what they share.

:mod:`.commands` (the parsers and ``predict``/``patch``), :mod:`.predict_batch`
(``predict-batch``, with its own parser), :mod:`.console` (one-line errors for
every command), :mod:`.csv_tables` (reading and writing CSV tables) and
:mod:`.outputs` (output paths checked before any work).
"""
