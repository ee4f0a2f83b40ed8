"""The paper's evaluation: suites and datasets, run specs, the result store, execution, reports."""
