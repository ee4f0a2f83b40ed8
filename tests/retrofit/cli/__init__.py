"""Tests of the library's commands: predict, patch, predict-batch."""
