"""The tests: a folder per package (patches, retrofit, eval, hosttraining, lab); repo/ the checkout.

README's test command runs patches/, retrofit/, eval/ and repo/ (pyproject's testpaths); the
lab's room, lab/ and hosttraining/, runs when named (tests/helpers/rooms.py).
"""
