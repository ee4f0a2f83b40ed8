"""Tests of ``lab.device_checks``: the GPU check, dry-run on a CPU."""
